"""What every Qdrant backend shares: point ids, payload layout and the way back to candidates."""

from __future__ import annotations

import uuid
from typing import Any

from evomem.retrieval import Candidate
from schemas import InsightNode, QueryNode

VECTOR_NAME = "text"
_POINT_NS = uuid.UUID("0b6f3f0e-5a0c-4c39-8f43-5d2b2f1f7a6e")


def point_id(node_id: str) -> str:
    """Qdrant wants a UUID or an integer; node ids that are not UUIDs map to a uuid5 of themselves."""
    try:
        return str(uuid.UUID(node_id))
    except ValueError:
        return str(uuid.uuid5(_POINT_NS, node_id))


def node_id_of(point: Any) -> str:
    payload = point.payload or {}
    return str(payload.get("id") or point.id)


def query_payload(q: QueryNode) -> dict[str, Any]:
    return {"id": q.id, "namespace": q.namespace, "status": q.status}


def insight_payload(n: InsightNode) -> dict[str, Any]:
    return {
        "id": n.id,
        "namespace": n.namespace,
        "state": n.state,
        "text": n.text,
        "positive": sorted(n.positive),
        "negative": sorted(n.negative),
        "version": n.version,
    }


def candidate_from_payload(p: dict[str, Any]) -> Candidate:
    return Candidate(
        id=p["id"],
        text=p["text"],
        positive=frozenset(p.get("positive") or ()),
        negative=frozenset(p.get("negative") or ()),
        version=int(p.get("version", 0)),
        active=p.get("state") == "active",
    )
