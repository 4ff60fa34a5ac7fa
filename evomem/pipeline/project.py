"""The projector: keeps the Qdrant read model in step with the Redis system of record.

It tails the change feed from its cursor, reads what the read model holds of each changed node from
the graph store and writes it to the index in batches: for a query, its status and the insights it
supports and harms; for an insight, its text, state and what it inherits. No evidence set of an
insight is ever read or written here, so a popular insight costs the projector no more than a new
one. Node text never changes, so a vector is computed once, when a node first reaches the index;
later versions update the payload only, and the index never replaces a newer version with an older
one. One projector per index: the embedded index can only be opened by one process anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from evomem.backoff import capped_doubling
from evomem.core.embedding import (
    calibrated,
    embed_passages,
    embedder_floor,
    embedder_name,
    embedder_power,
    unpack_vector,
)
from evomem.core.ports import (
    Change,
    ChangeFeed,
    Embedder,
    EventKey,
    InsightPoint,
    ProjectionSource,
    QueryPoint,
    Vector,
    VectorIndex,
)
from evomem.errors import TransientError
from evomem.logs import get_logger

BATCH = 2048
BACKOFF_BASE_S = 0.05
BACKOFF_MAX_S = 5.0
log = get_logger("evomem.projector")
#: Errors that say a change's data can never be projected (a node whose stored fields do not
#: parse), as opposed to a store that fails for now.
POISON = (ValueError, TypeError, KeyError, IndexError, AttributeError, UnicodeError)


@dataclass(frozen=True, slots=True)
class FollowerState:
    """How the following projector is doing: ``following``, ``failing`` (retrying after an error,
    shown), ``stopped``, or ``idle`` before ``follow`` runs; ``dead`` when its thread is gone."""

    status: Literal["idle", "following", "failing", "stopped", "dead"]
    error: str | None
    failures: int
    since: float


@dataclass
class ProjectionReport:
    changes: int = 0
    insights: int = 0
    queries: int = 0


class Projector:
    """Projects the changes past its cursor. With a ``feed`` it follows the change feed and keeps its
    cursor there, per index; without one it reads the store's changes and keeps the cursor itself."""

    def __init__(
        self,
        graph: ProjectionSource,
        index: VectorIndex,
        embedder: Embedder,
        feed: ChangeFeed | None = None,
        link_k: int = 5,
        persist_every_s: float = 0.0,
        on_new_insights: Callable[[Mapping[str, list[str]]], None] | None = None,
        on_queries_changed: Callable[[Collection[EventKey]], None] | None = None,
    ):
        self.link_k = link_k
        # told the texts of the insights new to the index, by namespace, just before it writes them
        # (the retriever keeps its word counts until then: ``Retriever.insights_added``)
        self.on_new_insights = on_new_insights
        # told the queries whose change it projected, once the index holds them (the retriever
        # keeps their neighbours until then: ``Retriever.queries_changed``)
        self.on_queries_changed = on_queries_changed
        self.graph = graph
        self.index = index
        self.embedder = embedder
        self.floor = embedder_floor(embedder)
        self.power = embedder_power(embedder)
        # the tag of the vectors this index holds: a query carrying one of its retrieval's
        # (``QueryPoint.vector``) is not embedded again; another embedder's is ignored
        self.vector_tag = embedder_name(embedder) if embedder.kind == "dense" else None
        self.carried = 0  # queries written with the vector their retrieval computed
        self.embedded = 0  # texts this projector asked its embedder for (queries and insights)
        self.feed = feed
        self.cursor = "0-0" if index.fresh or feed is None else feed.load_cursor(index.identity)
        self.state = FollowerState("idle", None, 0, time.time())
        self.skipped = 0  # changes skipped to the dead letters since this process started
        self.last_skipped: dict[str, str] | None = None
        # the cursor kept in the feed only moves past writes the index has made durable
        # (``VectorIndex.persist``): at most every ``persist_every_s`` while changes come, and at
        # ``checkpoint``. The feed is kept whole, so what a killed process had not persisted is
        # projected again from the saved cursor (every write is idempotent by version)
        self.persist_every_s = persist_every_s
        self._saved = self.cursor
        self._persisted_at = time.monotonic()
        if index.fresh and feed is not None:
            # a new (or rebuilt) store starts from the beginning: the cursor an earlier store left
            # in the feed must not outlive it, or a process killed before its first checkpoint would
            # come back to a store that is no longer fresh and resume past what it never flushed
            feed.save_cursor(index.identity, self.cursor)

    def _changes(self, after: str, count: int) -> list[Change]:
        return (self.feed or self.graph).changes(after, count)

    def run_once(self, max_changes: int = 100_000) -> ProjectionReport:
        """Project everything the feed holds past the cursor (up to ``max_changes``)."""
        report = ProjectionReport()
        while report.changes < max_changes:
            batch = self._changes(self.cursor, BATCH)
            if not batch:
                break
            good = [c for c in batch if c.problem is None]
            for c in batch:
                if c.problem is not None:
                    self._skip(c, c.problem)
            try:
                self._project(good, report)
            except POISON:
                # one change that can never apply must not hold every other one back: each is
                # projected alone, and the ones whose data fails go to the dead letters with their
                # reason. Any other error (Redis away, the index failing) is the batch's: it is
                # tried again whole by ``follow``, and nothing is skipped
                for c in good:
                    try:
                        self._project([c], report)
                    except POISON as exc:
                        self._skip(c, f"{type(exc).__name__}: {exc}")
            report.changes += len(batch)
            self.cursor = batch[-1].cursor
            self.checkpoint(force=False)
        return report

    def _project(self, changes: list[Change], report: ProjectionReport) -> None:
        latest: dict[Literal["insight", "query"], dict[EventKey, int]] = {"insight": {}, "query": {}}
        for c in changes:
            ref = (c.namespace, c.id)
            seen = latest[c.kind]
            seen[ref] = max(seen.get(ref, 0), c.version)
        report.queries += self._project_queries(latest["query"])
        if latest["query"] and self.on_queries_changed is not None:
            self.on_queries_changed(list(latest["query"]))
        report.insights += self._project_insights(latest["insight"])

    def _skip(self, change: Change, reason: str) -> None:
        """A change that can never be applied: kept as a dead letter (``evomem changes``), named
        in ``skipped`` (``/healthz`` shows it), and passed."""
        log.error(
            "projector.change_skipped",
            cursor=change.cursor,
            kind=change.kind,
            namespace=change.namespace,
            id=change.id,
            reason=reason,
        )
        if self.feed is not None:
            self.feed.dead_letter(change, reason)
        self.skipped += 1
        self.last_skipped = {
            "cursor": change.cursor,
            "kind": change.kind,
            "namespace": change.namespace,
            "id": change.id,
            "reason": reason,
        }

    def checkpoint(self, force: bool = True) -> None:
        """Make what was projected durable in the index and save the cursor past it; unless
        ``force``, only once ``persist_every_s`` have passed since the last time. A flush of the
        embedded store costs 2-5 ms a namespace written (bench/README, "A shard per namespace")."""
        cursor = self.cursor  # set after its batch was written: everything up to it is in the index
        if cursor == self._saved:
            return
        if not force and time.monotonic() - self._persisted_at < self.persist_every_s:
            return
        self.index.persist()
        self._persisted_at = time.monotonic()
        if self.feed is not None:  # the cursor read before the flush: a batch written since is not past it
            self.feed.save_cursor(self.index.identity, cursor)
        self._saved = cursor

    def _held(
        self, kind: Literal["insight", "query"], announced: Mapping[EventKey, int]
    ) -> dict[EventKey, int]:
        """The versions the index holds of the announced nodes, asked once per namespace."""
        by_ns: dict[str, list[str]] = {}
        for ns, i in announced:
            by_ns.setdefault(ns, []).append(i)
        held: dict[EventKey, int] = {}
        for ns, ids in by_ns.items():
            held.update(((ns, i), v) for i, v in self.index.versions(kind, ns, ids).items())
        return held

    def _project_queries(self, announced: Mapping[EventKey, int]) -> int:
        """Queries the index does not hold at the announced version: read, embedded if new, written.
        A query reported without a retrieval record is linked to its most similar queries first."""
        held = self._held("query", announced)
        wanted = [ref for ref, v in announced.items() if held.get(ref, 0) < v]
        points = self.graph.query_points(wanted) if wanted else {}
        if not points:
            return 0
        unseen = [ref for ref in points if ref not in held]
        vectors: dict[EventKey, Vector] = {}
        tag = self.vector_tag
        if tag is not None:
            for ref in unseen:
                carried = unpack_vector(points[ref].vector, tag)
                if carried is not None:
                    vectors[ref] = carried
            self.carried += len(vectors)
        to_embed = [ref for ref in unseen if ref not in vectors]
        if to_embed:  # one call for the batch's new queries that came without a vector
            vectors.update(
                zip(to_embed, self.embedder.embed([points[r].text for r in to_embed]), strict=True)
            )
            self.embedded += len(to_embed)
        pending: set[EventKey] = set()
        by_ns: dict[str, list[str]] = {}
        for ns, q in unseen:
            by_ns.setdefault(ns, []).append(q)
        for ns, ids in by_ns.items():
            pending |= {(ns, q) for q in self.graph.unlinked(ns, ids)}
        ready: list[tuple[QueryPoint, Vector | None]] = [
            (p, vectors.get(ref)) for ref, p in points.items() if ref not in pending
        ]
        self.index.write_queries(ready)
        # one at a time, so that queries of the same batch can find each other
        for ref in pending:
            ns, q = ref
            hits = self.index.search_queries(vectors[ref], ns, self.link_k + 1)
            similar = {h.id: calibrated(h.score, self.floor, self.power) for h in hits if h.id != q}
            self.graph.link_queries(ns, q, dict(list(similar.items())[: self.link_k]))
            self.index.write_queries([(points[ref], vectors[ref])])
        return len(points)

    def _project_insights(self, announced: Mapping[EventKey, int]) -> int:
        """Insights the index does not hold at the announced version (a replayed feed, or a node
        changed again since and projected from a later batch, is not read back at all)."""
        held = self._held("insight", announced)
        wanted = [ref for ref, v in announced.items() if held.get(ref, 0) < v]
        points = self.graph.insight_points(wanted) if wanted else {}
        newer = {ref: p for ref, p in points.items() if held.get(ref, 0) < p.version}
        if not newer:
            return 0
        unseen = [ref for ref in newer if ref not in held]
        vectors: dict[EventKey, Vector] = dict(
            zip(unseen, embed_passages(self.embedder, [newer[ref].text for ref in unseen]), strict=True)
        )  # one call for the batch's new and revised insight texts
        self.embedded += len(unseen)
        pairs: list[tuple[InsightPoint, Vector | None]] = [(p, vectors.get(ref)) for ref, p in newer.items()]
        if unseen and self.on_new_insights is not None:
            # told before the index holds them, so no retrieval meets an insight whose words the
            # retriever was not told of (``Retriever.insights_added``)
            texts: dict[str, list[str]] = {}
            for ref in unseen:
                texts.setdefault(ref[0], []).append(newer[ref].text)
            self.on_new_insights(texts)
        self.index.write_insights(pairs)
        return len(newer)

    def follow(self, stop: threading.Event, block_ms: int = 500) -> None:
        """Project until ``stop`` is set, waking as soon as a change is published. Supervised: any
        error is logged, shown in ``state`` and retried after a backoff that doubles up to
        ``BACKOFF_MAX_S``, so the index catches up by itself once the cause is gone."""
        failures = 0
        self.state = FollowerState("following", None, 0, time.time())
        try:
            while not stop.is_set():
                try:
                    if self.run_once().changes == 0 and self.feed is not None:
                        self.checkpoint(force=False)  # idle: what it projected last is saved too
                        self.feed.wait(self.cursor, block_ms)
                except Exception as exc:
                    failures += 1
                    unreachable = isinstance(exc, TransientError)
                    error = f"{type(exc).__name__}: {exc}"
                    if failures == 1 or failures % 20 == 0:  # not a line every backoff while it lasts
                        if unreachable:
                            log.warning("projector.redis_unreachable", error=str(exc), failures=failures)
                        else:
                            log.exception("projector.failed", error=error, failures=failures)
                    since = self.state.since if self.state.status == "failing" else time.time()
                    self.state = FollowerState("failing", error, failures, since)
                    stop.wait(capped_doubling(failures, BACKOFF_BASE_S, BACKOFF_MAX_S))
                    continue
                if failures:
                    log.info("projector.recovered", failures=failures, cursor=self.cursor)
                    failures = 0
                    self.state = FollowerState("following", None, 0, time.time())
        finally:
            self.state = FollowerState("stopped", self.state.error, failures, time.time())

    def lag(self) -> int:
        """Changes in the feed the index has not seen yet."""
        return len(self._changes(self.cursor, BATCH))


class Follower:
    """A projector following the feed in a background thread, as the retrieval side runs it. The
    thread survives any error (``Projector.follow`` backs off and retries); ``state`` says how it is
    doing, ``dead`` when the thread is gone without being stopped."""

    def __init__(self, projector: Projector) -> None:
        self.projector = projector
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=projector.follow, args=(self._stop,), name="evomem-projector", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def state(self) -> FollowerState:
        state = self.projector.state
        if not self._thread.is_alive() and not self._stop.is_set():
            return FollowerState(
                "dead", state.error or "the projector thread ended", state.failures, state.since
            )
        return state

    def stop(self, timeout_s: float = 5) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)


__all__ = ["Follower", "FollowerState", "ProjectionReport", "Projector"]
