"""Seeding a memory for tests, benchmarks and demos: active insights written straight into a store
through the ADD edit of a seed event each, as consolidation would write them (any ``EditStore``:
Redis or the in-memory reference)."""

from __future__ import annotations

from collections.abc import Iterable

from evomem.core.editing import added_insight_id, plan_edits
from evomem.core.ports import EditStore
from evomem.settings import ArchivePolicy
from schemas import AddDecision, ControllerDecision, TaskEvent
from schemas.models import utcnow


def seed_insights(
    graph: EditStore,
    namespace: str,
    texts: Iterable[str],
    *,
    archive_policy: ArchivePolicy = "immediate",
    decided_by: str = "seed",
) -> list[str]:
    """Active insights with these texts, in order; their ids."""
    ids = []
    for text in texts:
        event = TaskEvent(namespace=namespace, query=f"seed: {text}", status="resolved")
        decision = ControllerDecision(
            add_new_insight=AddDecision(decision=True, new_insight_text=text, decided_by=decided_by)
        )
        graph.apply(
            plan_edits(
                event,
                decision,
                retrieved=[],
                similar=[],
                allowed_operations={"KEEP"},
                archive_policy=archive_policy,
                archive_ratio=0.5,
                at=utcnow(),
            )
        )
        ids.append(added_insight_id(event.namespace, str(event.event_id)))
    return ids


__all__ = ["seed_insights"]
