"""Every Redis key and Qdrant collection name evomem uses, in one place.

Nodes are keyed by id alone: ids are globally unique (uuid5 of the creating event), and the
namespace is stored on the node and checked on every read and edit.
"""

from __future__ import annotations

PREFIX = "em"

EVENTS_STREAM = f"{PREFIX}:events"  # task events, field "event" = JSON document
CHANGES_STREAM = f"{PREFIX}:changes"  # (kind, id, version) of every changed node, for projectors
HISTORY_STREAM = f"{PREFIX}:history"  # append-only edit history, one entry per applied edit
DLQ_STREAM = f"{PREFIX}:dlq"  # dead letters, with the reason
CONSUMER_GROUP = "consolidators"
NAMESPACES = f"{PREFIX}:namespaces"  # set of namespaces ever written

QUERY_COLLECTION = "evomem_queries"
INSIGHT_COLLECTION = "evomem_insights"


def insight(insight_id: str) -> str:
    return f"{PREFIX}:ins:{insight_id}"


def insight_positive(insight_id: str) -> str:
    return f"{PREFIX}:ins:{insight_id}:pos"


def insight_negative(insight_id: str) -> str:
    return f"{PREFIX}:ins:{insight_id}:neg"


def insight_edges(insight_id: str) -> str:
    """Hyperedges (ι_a, ι_b, q) into this insight, stored as "a|q" members (Eq. 18)."""
    return f"{PREFIX}:ins:{insight_id}:edges"


def insight_history(insight_id: str) -> str:
    """Stream ids of this insight's entries in the history stream."""
    return f"{PREFIX}:ins:{insight_id}:hist"


def query(query_id: str) -> str:
    return f"{PREFIX}:q:{query_id}"


def query_neighbours(query_id: str) -> str:
    return f"{PREFIX}:q:{query_id}:nbr"


def namespace_insights(namespace: str) -> str:
    return f"{PREFIX}:ns:{namespace}:insights"


def namespace_queries(namespace: str) -> str:
    return f"{PREFIX}:ns:{namespace}:queries"


def namespace_texts(namespace: str) -> str:
    """Hash: digest of normalised insight text -> insight id, to refuse exact duplicate ADDs."""
    return f"{PREFIX}:ns:{namespace}:texts"


def applied(event_id: str) -> str:
    """Marker that an event's edits are committed; its value is the result summary."""
    return f"{PREFIX}:applied:{event_id}"


def decision(event_id: str) -> str:
    return f"{PREFIX}:decision:{event_id}"


def retrieval(retrieval_id: str) -> str:
    return f"{PREFIX}:retrieval:{retrieval_id}"


def projector_cursor(index_identity: str) -> str:
    return f"{PREFIX}:projector:{index_identity}"


def llm_limit(scope: str, kind: str) -> str:
    """The shared LLM rate limit of one endpoint and model: ``requests`` and ``tokens`` buckets
    (hashes of level and time) and ``blocked`` (until when a Retry-After holds every worker back)."""
    return f"{PREFIX}:llm:limit:{scope}:{kind}"


LLM_USAGE = f"{PREFIX}:llm:usage"  # hash of token counters per model, operation and failure kind


def llm_event_usage(event_id: str) -> str:
    """Tokens spent on one event (its share of each LLM call it was in); expires."""
    return f"{PREFIX}:llm:usage:event:{event_id}"
