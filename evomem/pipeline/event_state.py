"""The state of a reported event — ``queued``, ``applied`` or ``dead-lettered`` — from what the
stores keep: the stream's state marker of the event (its namespace; dead-lettered with the reason)
and the graph's applied marker (the edits applied). One rule for the SDK, the HTTP API, the CLI and
the MCP tools: the applied marker wins (a dead letter replayed and applied is applied), then the
state marker; an event neither knows is not found."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from evomem.core.ports import GraphReader
from evomem.errors import NotFoundError
from evomem.results import AppliedEdit, EventState


def canonical_event_id(event_id: Any) -> str:
    """The event id as events carry it (a UUID, lower case); ``NotFoundError`` for anything else."""
    try:
        return str(uuid.UUID(str(event_id)))
    except ValueError:
        raise NotFoundError(f"no event {event_id!r}") from None


def event_state(
    event_id: str,
    marker: Mapping[str, Any] | None,
    graph: GraphReader,
    namespaces: Iterable[str],
) -> EventState:
    """The state of ``event_id`` in the first of ``namespaces`` that knows it: the marker's own
    namespace is the one to pass when there is a marker (``EventStream.state_of``); without one
    (expired, or published by a plain XADD) only an applied event is found."""
    for ns in namespaces:
        result = graph.applied_result(ns, event_id)
        if result is not None:
            edits = [
                AppliedEdit(op=o.op, insight_id=o.insight_id, outcome=o.outcome, new_id=o.new_id)
                for o in result.outcomes
            ]
            return EventState(
                event_id=event_id, namespace=ns, state="applied", edits=edits, created=list(result.created)
            )
        if marker is not None and marker.get("namespace") == ns:
            if marker.get("state") == "dead-lettered":
                return EventState(
                    event_id=event_id,
                    namespace=ns,
                    state="dead-lettered",
                    reason=str(marker.get("reason") or ""),
                    field=marker.get("field") or None,
                    dead_letter_id=marker.get("dead_letter_id") or None,
                )
            return EventState(event_id=event_id, namespace=ns, state="queued")
    raise NotFoundError(f"no event {event_id!r}")


__all__ = ["canonical_event_id", "event_state"]
