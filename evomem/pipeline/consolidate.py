"""Consolidation: from a batch of task events to committed graph edits (paper §3.4).

For each batch: parse and validate every event (a malformed one goes to the dead-letter stream with
the field that is wrong), resolve what was retrieved for it, take the stored decision or ask the
controller (explicit verdicts first), store the decision before applying it, apply each event's plan
atomically, and ack only what is committed. A redelivered event finds its stored decision and its
applied marker, so it changes nothing twice and costs no second controller call.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from evomem.core import decisions, duplicates
from evomem.core.decisions import Controller, DecisionFailure, DecisionInput
from evomem.core.editing import (
    EditPlan,
    added_insight_id,
    event_digest,
    plan_edits,
    revised_insight_id,
    text_key,
)
from evomem.core.lifecycle import ControlResult, plan_control
from evomem.core.ports import (
    ApplyResult,
    ConsolidationStore,
    ControlStore,
    Entry,
    EventKey,
    EventLog,
    GraphReader,
    StoredDecision,
)
from evomem.core.review import HeldEdit, ReviewDecision, Verdict, approval_plan, review_id_for, split_plan
from evomem.errors import InvalidEventError, NotFoundError, TransientError, reason_of
from evomem.logs import get_logger
from evomem.ops import tracing
from evomem.results import ConsolidationReport
from evomem.settings import Settings
from schemas import ControllerDecision, ControlRequest, TaskEvent
from schemas.models import utcnow

log = get_logger("evomem.consolidation")


@dataclass
class _Work:
    entry: Entry
    event: TaskEvent
    retrieved: list[str]
    similar: list[str] | None
    similar_scores: list[float] | None = None
    query_vector: str | None = None  # the task's vector its retrieval computed, for the query node
    relevance: dict[str, float] = field(default_factory=dict)
    decision: ControllerDecision | None = None
    twins: dict[str, str] = field(default_factory=dict)  # text key -> near-duplicate insight
    bands: dict[str, list[str]] = field(default_factory=dict)  # text key -> its buckets

    @functools.cached_property
    def key(self) -> EventKey:  # kept: a batch looks it up for every event, several times
        return (self.event.namespace, str(self.event.event_id))


def apply_control(graph: ControlStore, request: ControlRequest) -> ControlResult:
    """Plan an operator's request against what the store holds now and apply it: a revert by event
    undoes that event's edits; a revert since T every event applied since T, newest first."""
    ns = request.namespace
    events = []
    if request.action == "revert":
        if request.event_id is not None:
            ids = [request.event_id]
        else:
            assert request.since is not None
            ids = list(reversed(graph.events_since(ns, request.since)))
        applied = graph.applied_events(ns, ids)
        events = [applied[i] for i in ids if i in applied]
    return graph.apply_control(plan_control(request, events, utcnow()))


def decide_review(graph: ConsolidationStore, request: ControlRequest, settings: Settings) -> ControlResult:
    """Approve or reject a held edit. The first decision stands; an approval applies the edit as an
    event of its own (``review.approval_plan``), so the same approval twice, or after a crash
    between the two steps, applies it once."""
    assert request.review_id is not None
    verdict: Verdict = "approved" if request.action == "approve" else "rejected"
    mine = ReviewDecision(state=verdict, by=request.by, at=utcnow(), note=request.reason)
    review = graph.decide_review(request.namespace, request.review_id, mine)
    rid = str(request.request_id)
    if review is None or review.decision is None or review.decision.state != verdict:
        return ControlResult(rid, replayed=False)  # no such edit, or decided otherwise before
    if verdict == "rejected":
        return ControlResult(rid, replayed=review.decision != mine, changed=review.decision == mine)
    plan = approval_plan(
        review.held,
        review.decision,
        archive_policy=settings.archive_policy,
        archive_ratio=settings.archive_ratio,
        archive_min=settings.archive_min,
        archive_streak=settings.archive_streak,
        archived_repeats=settings.archived_repeats,
    )
    result = graph.apply(plan)
    return ControlResult(rid, replayed=result.replayed, changed=not result.replayed)


def check_target(graph: GraphReader, request: ControlRequest) -> None:
    """Refuse, before it is published, a request whose insight, event or held edit the namespace
    does not hold (``NotFoundError``): a revert names an event whose edits are applied already."""
    ns = request.namespace
    if request.review_id is not None:
        held = getattr(graph, "held_ids", None)
        if held is None or request.review_id not in held(ns, [request.review_id]):
            raise NotFoundError(f"no edit held for review {request.review_id!r} in namespace {ns!r}")
    if (
        request.insight_id is not None
        and graph.namespace_of([request.insight_id]).get(request.insight_id) != ns
    ):
        raise NotFoundError(f"no insight {request.insight_id!r} in namespace {ns!r}")
    if request.event_id is not None and not graph.is_applied(ns, request.event_id):
        raise NotFoundError(
            f"no applied event {request.event_id!r} in namespace {ns!r} "
            "(an event is reverted once it is consolidated)"
        )


class Consolidator:
    def __init__(
        self,
        graph: ConsolidationStore,
        stream: EventLog,
        controller: Controller,
        settings: Settings,
        max_deliveries: int = 5,
        resolve: Callable[[str], Settings] | None = None,
    ) -> None:
        self.graph = graph
        self.stream = stream
        self.controller = controller
        self.settings = settings
        self.max_deliveries = max_deliveries
        # a namespace's effective settings: its own archive policy and ratio over the global ones
        self.resolve = resolve or (lambda _namespace: settings)

    def process(self, entries: Sequence[Entry]) -> ConsolidationReport:
        """Consolidate one batch: its task events, and the operators' requests among them, each run
        of either in stream order (a revert applies after the edits reported before it)."""
        if all(e.kind == "event" for e in entries):
            return self._process_events(entries)
        total = ConsolidationReport()
        for kind, run in itertools.groupby(entries, key=lambda e: e.kind):
            part = list(run)
            total.merge(self._process_controls(part) if kind == "control" else self._process_events(part))
        return total

    def _process_controls(self, entries: Sequence[Entry]) -> ConsolidationReport:
        """Operators' requests, one at a time (each is one atomic plan); ack what is committed."""
        report = ConsolidationReport(events=len(entries))
        done: list[str] = []
        for entry in entries:
            if not self._deliverable(entry, report):
                continue
            try:
                request = ControlRequest.model_validate_json(entry.raw or b"")
            except Exception as exc:
                reason, fld = reason_of(exc)
                self._dead_letter(entry, reason, fld, report)
                continue
            try:
                result = self.apply_control(request)
            except TransientError:
                self.stream.ack(done)
                raise
            except Exception as exc:
                self._failed(entry, exc, report)
                continue
            done.append(entry.id)
            if result.replayed:
                report.replayed += 1
            else:
                report.applied += 1
                report.operations[request.action.upper()] += 1
                report.outcomes["reverted"] += result.reverted
                if request.action == "retire" and result.changed:
                    report.outcomes["stale"] += 1
            log.info(
                "control.applied",
                request_id=str(request.request_id),
                namespace=request.namespace,
                action=request.action,
                by=request.by,
                replayed=result.replayed,
                reverted=result.reverted,
                skipped=result.skipped,
            )
        self.stream.ack(done)
        return report

    def apply_control(self, request: ControlRequest) -> ControlResult:
        if request.action in ("approve", "reject"):
            return decide_review(self.graph, request, self.resolve(request.namespace))
        return apply_control(self.graph, request)

    def _process_events(self, entries: Sequence[Entry]) -> ConsolidationReport:
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
            total.merge(self._process_events([entry]))
        return total

    def _process(self, entries: Sequence[Entry]) -> ConsolidationReport:
        started_ns = time.time_ns()
        report = ConsolidationReport(events=len(entries))
        clock = time.perf_counter_ns
        stages = report.stages_ns
        t0 = clock()
        work = self._prepare([e for e in entries if self._deliverable(e, report)], report)
        work = self._validate_ids(work, report)
        t1 = clock()
        work = self._decide(work, report)
        t2 = clock()
        self._find_twins(work)
        t3 = clock()
        planned = [
            (
                w,
                s,
                plan_edits(
                    w.event,
                    w.decision,
                    retrieved=w.retrieved,
                    similar=w.similar,
                    similar_scores=w.similar_scores,
                    query_vector=w.query_vector,
                    degree=self.settings.query_degree,
                    twins=w.twins,
                    bands=w.bands,
                    allowed_operations=self.settings.allowed_operations,
                    archive_policy=s.archive_policy,
                    archive_ratio=s.archive_ratio,
                    archive_min=s.archive_min,
                    archive_streak=s.archive_streak,
                    archived_repeats=s.archived_repeats,
                    at=utcnow(),
                ),
            )
            for w, s in ((w, self.resolve(w.event.namespace)) for w in work)
            if w.decision is not None
        ]
        plans = self._hold_for_review(planned, report)
        t4 = clock()
        results = self.graph.apply_many(plans)  # a TransientError leaves the whole batch pending
        t5 = clock()
        done = []
        for w, plan, result in zip(work, plans, results, strict=True):
            if isinstance(result, Exception):
                self._failed(w.entry, result, report)
                continue
            done.append(w.entry.id)
            self._count(plan, result, report)
            log.debug(  # one event followed from its report: event id, namespace, retrieval, stream entry
                "event.applied",
                event_id=str(w.event.event_id),
                namespace=w.event.namespace,
                retrieval_id=w.event.retrieval_id,
                entry_id=w.entry.id,
                replayed=result.replayed,
                outcomes=[o.outcome for o in result.outcomes],
            )
            tracing.consolidated(w.event, w.entry, result, started_ns)
        self.stream.ack(done)
        stages.update(
            prepare=t1 - t0, decide=t2 - t1, twins=t3 - t2, plan=t4 - t3, apply=t5 - t4, ack=clock() - t5
        )
        return report

    # -- steps ---------------------------------------------------------------------------------
    def _hold_for_review(
        self, planned: list[tuple[_Work, Settings, EditPlan]], report: ConsolidationReport
    ) -> list[EditPlan]:
        """In a namespace under review, take the high-impact edits out of each plan and keep them
        for an operator (``evomem.core.review``), before the rest is applied: a redelivered event
        finds them held and holds them again, and one applied already holds nothing (its edits
        were applied as they were planned then, whatever the support is now)."""
        under = [(w, s, p) for w, s, p in planned if s.review and p.edits]
        by_ns: dict[str, list[str]] = {}
        for _, _, p in under:
            by_ns.setdefault(p.namespace, []).append(p.event_id)
        applied = {(ns, e) for ns, ids in by_ns.items() for e in self.graph.applied_events(ns, ids)}
        under = [(w, s, p) for w, s, p in under if (p.namespace, p.event_id) not in applied]
        if not under:
            return [p for _, _, p in planned]
        targets: dict[str, set[str]] = {}
        reviews: dict[str, set[str]] = {}
        for _, _, p in under:
            ids = {e.insight_id for e in p.edits if e.insight_id is not None}
            targets.setdefault(p.namespace, set()).update(ids)
            reviews.setdefault(p.namespace, set()).update(
                review_id_for(p.namespace, p.event_id, e) for e in p.edits
            )
        support = {
            ns: {i: h.positive_count for i, h in self.graph.heads(ns, ids).items()}
            for ns, ids in targets.items()
        }
        held_before = {ns: self.graph.held_ids(ns, ids) for ns, ids in reviews.items()}
        split: dict[int, EditPlan] = {}
        held: list[HeldEdit] = []
        for w, s, p in under:
            assert w.decision is not None
            kept, taken = split_plan(
                p,
                support[p.namespace],
                w.decision.confidence,
                held_before[p.namespace],
                review_support=s.review_support,
                review_confidence=s.review_confidence,
                at=p.at,
            )
            split[id(p)] = kept
            held.extend(taken)
        if held:
            self.graph.hold(held)  # before the event's own edits: a crash between holds them again
            report.outcomes["held"] += len(held)
            for h in held:
                log.info(
                    "edit.held_for_review",
                    review_id=h.review_id,
                    event_id=h.event_id,
                    namespace=h.namespace,
                    op=h.edit.op,
                    insight_id=h.edit.insight_id,
                    reason=h.reason,
                )
        return [split.get(id(p), p) for _, _, p in planned]

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
        records = self.graph.load_retrievals(
            [(e.namespace, e.retrieval_id) for _, e in parsed if e.retrieval_id]
        )
        work = []
        for entry, event in parsed:
            retrieved = list(event.retrieved_insight_ids)
            w = _Work(entry, event, retrieved, None)
            record = records.get((event.namespace, event.retrieval_id or ""))
            if record is not None:
                retrieved = [*record.insight_ids, *retrieved]
                w.similar = list(record.similar)
                w.similar_scores = list(record.similar_scores) if record.similar_scores else None
                w.query_vector = record.vector
                w.relevance = dict(zip(record.insight_ids, record.similarity, strict=False))
            w.retrieved = list(dict.fromkeys([*retrieved, *event.insight_feedback]))
            work.append(w)
        return work

    def _validate_ids(self, work: list[_Work], report: ConsolidationReport) -> list[_Work]:
        all_ids = {i for w in work for i in w.retrieved}
        owners = self.graph.namespace_of(all_ids) if all_ids else {}
        kept = []
        for w in work:
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
        unavailable) or goes to the dead letters (its answers were unusable), untouched. An event
        whose id was already decided for other content is refused: a retry is the same event."""
        digests = {id(w): event_digest(w.event) for w in work}
        stored = self.graph.load_decisions([w.key for w in work])
        undecided: list[_Work] = []
        asked: set[EventKey] = set()  # an event delivered twice in one batch is decided once
        for w in work:
            found = stored.get(w.key)
            if found is not None:
                w.decision = self._same_event(w, found, digests[id(w)], report)
            elif w.key not in asked:
                asked.add(w.key)
                undecided.append(w)
        if undecided:
            inputs = []
            by_ns: dict[str, set[str]] = {}
            for w in undecided:
                by_ns.setdefault(w.event.namespace, set()).update(w.retrieved)
            heads = {ns: self.graph.heads(ns, ids) for ns, ids in by_ns.items()}
            for w in undecided:
                found_heads = heads[w.event.namespace]
                retrieved = tuple(found_heads[i] for i in w.retrieved if i in found_heads)
                inputs.append(
                    DecisionInput(w.event, retrieved, self.settings.allowed_operations, w.relevance)
                )
            decided = decisions.decide(inputs, self.controller)
            new: dict[EventKey, StoredDecision] = {}
            for w, d in zip(undecided, decided, strict=True):
                if isinstance(d, DecisionFailure):
                    self._undecided(w.entry, d, report)
                else:
                    new[w.key] = StoredDecision(d, digests[id(w)])
            kept = self.graph.save_decisions(new) if new else {}
            for w in work:
                if w.decision is None and w.key in kept:
                    w.decision = self._same_event(w, kept[w.key], digests[id(w)], report)
        return [w for w in work if w.decision is not None]

    def _same_event(
        self, w: _Work, stored: StoredDecision, digest: str, report: ConsolidationReport
    ) -> ControllerDecision | None:
        if stored.digest is None or stored.digest == digest:
            return stored.decision
        self._dead_letter(
            w.entry,
            f"event_id: event {w.event.event_id} was reported before with other content in namespace "
            f"{w.event.namespace!r}; a retry must repeat the event as it was",
            "event_id",
            report,
        )
        return None

    def _find_twins(self, work: list[_Work]) -> None:
        """For each new insight text (ADD, REVISE), the active insight of its namespace it nearly
        repeats, if any: one found in the store through the near-duplicate buckets, or a text
        created earlier in this batch. Applying the plan merges into the twin instead of making one.
        A proposal (ADD) that repeats no active insight may repeat an archived one
        (``ARCHIVED_REPEATS=evidence``): that one is its twin, and applying the plan records the
        proposal there instead of starting the lesson over with none of its failures."""
        threshold = self.settings.duplicate_threshold
        texts: dict[str, list[tuple[_Work, str, str, str | None]]] = {}  # ns -> (work, text, new id, old)
        for w in work:
            if w.decision is None:
                continue
            ns, event_id = w.key
            allowed = self.settings.allowed_operations
            for e in w.decision.insight_edits:
                if e.operation == "REVISE" and "REVISE" in allowed and e.revised_insight_text:
                    new_id = revised_insight_id(ns, event_id, e.insight_id)
                    texts.setdefault(ns, []).append((w, e.revised_insight_text, new_id, e.insight_id))
            add = w.decision.add_new_insight
            if add.decision and add.new_insight_text:
                texts.setdefault(ns, []).append(
                    (w, add.new_insight_text, added_insight_id(ns, event_id), None)
                )
        for ns, items in texts.items():
            bands = {text: duplicates.bands(text) for _, text, _, _ in items}
            found = self.graph.duplicate_candidates(ns, {b for bs in bands.values() for b in bs})
            heads = self.graph.heads(ns, found).values()
            # each text is confirmed against the insights sharing one of its buckets only, as a batch
            # of one would be: the stored ones found for any text of the batch, and the texts created
            # earlier in it (against every one of those, one namespace's batch of n texts cost n²/2
            # cosines: 3,000 proposals took 120 of 156 s to consolidate)
            known = duplicates.Buckets()
            archived = duplicates.Buckets()
            for h in heads:
                (known if h.active else archived).add(h.id, h.text, duplicates.bands(h.text))
            for w, text, new_id, old_id in items:
                key = text_key(text)
                vec = duplicates.vector(text)
                mine = bands[text]
                twin = duplicates.nearest(vec, known.sharing(mine, but=old_id), threshold)
                if twin is None and old_id is None and self.resolve(ns).archived_repeats != "new":
                    # a proposal that repeats an archived insight: applying it records its query there
                    twin = duplicates.nearest(vec, archived.sharing(mine), threshold)
                w.bands[key] = mine
                if twin is not None:
                    w.twins[key] = twin
                else:
                    known.add(new_id, text, mine, vec)

    # -- bookkeeping -----------------------------------------------------------------------------
    def _failed(self, entry: Entry, exc: Exception, report: ConsolidationReport) -> None:
        if isinstance(exc, InvalidEventError):  # the event itself is wrong: retrying cannot help
            reason, fld = reason_of(exc)
            self._dead_letter(entry, reason, fld, report)
        elif entry.deliveries >= self.max_deliveries:
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
            report.decisions[(o.op, o.outcome)] += 1


__all__ = ["ConsolidationReport", "Consolidator", "apply_control", "check_target", "decide_review"]
