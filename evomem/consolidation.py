"""Consolidation: from a batch of task events to committed graph edits (paper §3.4).

For each batch: parse and validate every event (a malformed one goes to the dead-letter stream with
the field that is wrong), resolve what was retrieved for it, take the stored decision or ask the
controller (explicit verdicts first), store the decision before applying it, apply each event's plan
atomically, and ack only what is committed. A redelivered event finds its stored decision and its
applied marker, so it changes nothing twice and costs no second controller call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from evomem import controllers
from evomem.controllers import Controller, DecisionFailure, DecisionInput
from evomem.editing import EditPlan, plan_edits
from evomem.errors import InvalidEventError, TransientError
from evomem.logs import get_logger
from evomem.ports import ApplyResult, GraphStore
from evomem.settings import Settings
from evomem.stream import Entry, EventStream, reason_of
from schemas import ControllerDecision, TaskEvent
from schemas.models import utcnow

log = get_logger("evomem.consolidation")


@dataclass
class ConsolidationReport:
    events: int = 0
    applied: int = 0
    replayed: int = 0
    dead_lettered: int = 0
    deferred: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)

    def merge(self, other: ConsolidationReport) -> None:
        self.events += other.events
        self.applied += other.applied
        self.replayed += other.replayed
        self.dead_lettered += other.dead_lettered
        self.deferred += other.deferred
        self.operations.update(other.operations)
        self.outcomes.update(other.outcomes)

    def as_dict(self) -> dict[str, object]:
        return {
            "events": self.events,
            "applied": self.applied,
            "replayed": self.replayed,
            "dead_lettered": self.dead_lettered,
            "deferred": self.deferred,
            "operations": dict(self.operations),
            "outcomes": dict(self.outcomes),
        }


@dataclass
class _Work:
    entry: Entry
    event: TaskEvent
    retrieved: list[str]
    similar: list[str] | None
    decision: ControllerDecision | None = None


class Consolidator:
    def __init__(
        self,
        graph: GraphStore,
        stream: EventStream,
        controller: Controller,
        settings: Settings,
        max_deliveries: int = 5,
    ) -> None:
        self.graph = graph
        self.stream = stream
        self.controller = controller
        self.settings = settings
        self.max_deliveries = max_deliveries

    def process(self, entries: Sequence[Entry]) -> ConsolidationReport:
        """Consolidate one batch in a handful of round trips, whatever its size. If the batch as a
        whole fails (not transiently), its events are retried one by one, so that one bad event
        cannot hold the others back: only it stays pending, then goes to the dead letters."""
        try:
            return self._process(entries)
        except TransientError:
            raise
        except Exception as exc:
            if len(entries) == 1:
                report = ConsolidationReport(events=1)
                self._failed(entries[0], exc, report)
                return report
            log.warning("batch.failed_retrying_one_by_one", events=len(entries), error=str(exc))
        total = ConsolidationReport()
        for entry in entries:
            total.merge(self.process([entry]))
        return total

    def _process(self, entries: Sequence[Entry]) -> ConsolidationReport:
        report = ConsolidationReport(events=len(entries))
        work = self._prepare([e for e in entries if self._deliverable(e, report)], report)
        work = self._validate_ids(work, report)
        work = self._decide(work, report)
        plans = [
            plan_edits(
                w.event,
                w.decision,
                retrieved=w.retrieved,
                similar=w.similar,
                allowed_operations=self.settings.allowed_operations,
                archive_policy=self.settings.archive_policy,
                archive_ratio=self.settings.archive_ratio,
                at=utcnow(),
            )
            for w in work
            if w.decision is not None
        ]
        results = self.graph.apply_many(plans)  # a TransientError leaves the whole batch pending
        done = []
        for w, plan, result in zip(work, plans, results, strict=True):
            if isinstance(result, Exception):
                self._failed(w.entry, result, report)
                continue
            done.append(w.entry.id)
            self._count(plan, result, report)
        self.stream.ack(done)
        return report

    # -- steps ---------------------------------------------------------------------------------
    def _deliverable(self, entry: Entry, report: ConsolidationReport) -> bool:
        """The poison guard: an entry delivered more than ``max_deliveries`` times without an ack
        has taken its workers down with it each time; it goes to the dead letters, unprocessed."""
        if entry.deliveries <= self.max_deliveries:
            return True
        self._dead_letter(
            entry,
            f"event: delivered {entry.deliveries} times and never acknowledged "
            "(its worker died or timed out each time)",
            "event",
            report,
        )
        return False

    def _prepare(self, entries: Sequence[Entry], report: ConsolidationReport) -> list[_Work]:
        parsed: list[tuple[Entry, TaskEvent]] = []
        for entry in entries:
            if entry.raw is None:
                self._dead_letter(entry, entry.unreadable, "event", report)
                continue
            try:
                parsed.append((entry, TaskEvent.model_validate_json(entry.raw)))
            except Exception as exc:
                reason, fld = reason_of(exc)
                self._dead_letter(entry, reason, fld, report)
        records = self.graph.load_retrievals([e.retrieval_id for _, e in parsed if e.retrieval_id])
        work = []
        for entry, event in parsed:
            retrieved = list(event.retrieved_insight_ids)
            similar: list[str] | None = None
            record = records.get(event.retrieval_id or "")
            if record is not None:
                if record.namespace != event.namespace:
                    self._dead_letter(
                        entry,
                        f"retrieval_id: retrieval {event.retrieval_id} belongs to another namespace",
                        "retrieval_id",
                        report,
                    )
                    continue
                retrieved = [*record.insight_ids, *retrieved]
                similar = list(record.similar)
            retrieved = list(dict.fromkeys([*retrieved, *event.insight_feedback]))
            work.append(_Work(entry, event, retrieved, similar))
        return work

    def _validate_ids(self, work: list[_Work], report: ConsolidationReport) -> list[_Work]:
        all_ids = {i for w in work for i in w.retrieved}
        owners = self.graph.namespace_of(all_ids) if all_ids else {}
        own_queries = {w.event.query_id for w in work if w.event.query_id}
        known_queries = self.graph.queries(own_queries) if own_queries else {}
        kept = []
        for w in work:
            q = known_queries.get(w.event.query_id or "")
            if q is not None and q.namespace != w.event.namespace:
                err = InvalidEventError("query_id", f"query {q.id!r} belongs to another namespace")
                self._dead_letter(w.entry, str(err), "query_id", report)
                continue
            bad = next((i for i in w.retrieved if owners.get(i) != w.event.namespace), None)
            if bad is None:
                kept.append(w)
                continue
            fld = (
                f"insight_feedback[{bad}]"
                if bad in w.event.insight_feedback
                else f"retrieved_insight_ids[{bad}]"
                if bad in w.event.retrieved_insight_ids
                else "retrieval_id"
            )
            err = InvalidEventError(fld, f"no insight {bad!r} in namespace {w.event.namespace!r}")
            self._dead_letter(w.entry, str(err), fld, report)
        return kept

    def _decide(self, work: list[_Work], report: ConsolidationReport) -> list[_Work]:
        """Stored decisions first (a redelivered event costs no second controller call); the rest
        are decided in one controller call and stored before anything is applied. Returns the work
        that has a decision; an event the controller failed on stays pending (the judge was
        unavailable) or goes to the dead letters (its answers were unusable), untouched."""
        stored = self.graph.load_decisions([str(w.event.event_id) for w in work])
        undecided = []
        for w in work:
            w.decision = stored.get(str(w.event.event_id))
            if w.decision is None:
                undecided.append(w)
        if not undecided:
            return work
        nodes = self.graph.insights({i for w in undecided for i in w.retrieved})
        inputs = [
            DecisionInput(
                w.event, tuple(nodes[i] for i in w.retrieved if i in nodes), self.settings.allowed_operations
            )
            for w in undecided
        ]
        decided = controllers.decide(inputs, self.controller)
        new: dict[str, ControllerDecision] = {}
        for w, d in zip(undecided, decided, strict=True):
            if isinstance(d, DecisionFailure):
                self._undecided(w.entry, d, report)
            else:
                new[str(w.event.event_id)] = d
        kept = self.graph.save_decisions(new) if new else {}
        for w in undecided:
            w.decision = kept.get(str(w.event.event_id))
        return [w for w in work if w.decision is not None]

    # -- bookkeeping -----------------------------------------------------------------------------
    def _failed(self, entry: Entry, exc: Exception, report: ConsolidationReport) -> None:
        if entry.deliveries >= self.max_deliveries:
            reason, fld = reason_of(exc)
            self._dead_letter(
                entry, f"apply failed after {entry.deliveries} deliveries: {reason}", fld, report
            )
        else:
            report.deferred += 1
            log.warning("event.apply_failed", entry_id=entry.id, deliveries=entry.deliveries, error=str(exc))

    def _undecided(self, entry: Entry, failure: DecisionFailure, report: ConsolidationReport) -> None:
        if failure.transient and entry.deliveries < self.max_deliveries:
            report.deferred += 1
            log.warning(
                "event.decision_deferred",
                entry_id=entry.id,
                deliveries=entry.deliveries,
                reason=failure.reason,
            )
            return
        after = f" after {entry.deliveries} deliveries" if failure.transient else ""
        self._dead_letter(entry, f"controller{after}: {failure.reason}", None, report)

    def _dead_letter(self, entry: Entry, reason: str, fld: str | None, report: ConsolidationReport) -> None:
        self.stream.dead_letter(entry, reason, fld)
        report.dead_lettered += 1
        log.warning("event.dead_lettered", entry_id=entry.id, reason=reason)

    @staticmethod
    def _count(plan: EditPlan, result: ApplyResult, report: ConsolidationReport) -> None:
        if result.replayed:
            report.replayed += 1
            return
        report.applied += 1
        for o in result.outcomes:
            report.operations[o.op] += 1
            report.outcomes[o.outcome] += 1


__all__ = ["ConsolidationReport", "Consolidator"]
