"""The retrieval path an agent waits on: embed, top-k similar queries, expand, filter, rank.

No LLM and no write on this path except the small retrieval record a later report refers to. Its
reads are proportional to |Q̃ˢ|: the similar queries come back from the index with the evidence they
carry, the neighbours (``QueryGraphCache``) and their evidence, then which of the insights those
name are active, however much evidence each insight has gathered; on the embedded index all but
the searches are served from the process's read model once warm. The retriever gathers every
number the ranking needs (the candidates' word sets, the word weights) into one ``RankingInputs``;
``rank_from_queries`` sums Eq. 8-9 from the query side and calls nothing back.
"""

from __future__ import annotations

import threading
import time
import uuid
from array import array
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np

from evomem.core.embedding import (
    calibrated,
    embed_passages,
    embedder_floor,
    embedder_name,
    embedder_power,
    embedder_relevance_floor,
    pack_vector,
)
from evomem.core.hashing import HashingEmbedder, word_features, word_part
from evomem.core.ports import (
    Embedder,
    GraphStore,
    QueryHit,
    RetrievalGraph,
    RetrievalRecord,
    Vector,
    VectorIndex,
)
from evomem.core.retrieval import (
    RankingInputs,
    ScoredInsight,
    ServingInsight,
    SquaredIdf,
    TextInputs,
    expand_neighbours,
    idf,
    idf_relevance,
    rank_from_queries,
    with_queries,
)
from evomem.errors import TransientError
from evomem.logs import get_logger
from evomem.pipeline.query_graph import QueryGraphCache
from evomem.results import Retrieval
from evomem.settings import Settings
from evomem.timings import stage

log = get_logger("evomem.retriever")
#: The retrieval path's stages, as ``evomem.timings`` times them (a request's canonical log line).
STAGES = ("embed", "similar", "evidence", "expand", "candidates", "rank")
#: Insights read per page when the word-set cache is warmed: a page holds the GIL while the engine
#: reads it (cold, about 30 ms), so retrievals on other threads wait at most that long.
WARM_BATCH = 1_000


#: Seconds before a retrieval process asks again to count a namespace's words (``count_words``)
#: after an attempt that failed (Redis unreachable, say).
COUNT_WORDS_RETRY_S = 30.0


class WordWeights:
    """The squared IDF weights text relevance weighs words by, for one namespace while it holds
    ``total`` insights, from its word counts (``RetrievalGraph.word_counts``: how many of its
    insights hold each word), read as candidates come. Every change of a word's count comes with a
    change of ``total`` (a node created, or a recount, which sets both), so what it holds is exact
    while ``total`` reads the same: a retriever keeps one per namespace across retrievals and
    starts a new one when the count moves (``Retriever._word_weights``)."""

    __slots__ = ("graph", "namespace", "squared", "total")

    def __init__(self, graph: RetrievalGraph, namespace: str, total: int) -> None:
        self.graph = graph
        self.namespace = namespace
        self.total = total
        self.squared: dict[int, float] = {}

    @classmethod
    def read(
        cls, graph: RetrievalGraph, namespace: str, features: Iterable[int], held: WordWeights | None = None
    ) -> WordWeights | None:
        """The weights of ``features`` as the namespace's counts stand: ``held`` when its count of
        insights still reads the same (only the features it lacks are read), else a new one; None
        while the counts are incomplete. One read, two when the count moved."""
        wanted = list(dict.fromkeys(features))
        got = graph.word_counts(namespace, held.missing(wanted) if held is not None else wanted)
        if got is None:
            return None
        total, counts = got
        if held is None or held.total != total:
            if held is not None:  # what was read is the missing part only: read them all again
                again = graph.word_counts(namespace, wanted)
                if again is None:
                    return None
                total, counts = again
            held = cls(graph, namespace, total)
        held.hold(counts, wanted)
        return held

    def missing(self, features: Iterable[int]) -> list[int]:
        squared = self.squared
        return [f for f in dict.fromkeys(features) if f not in squared]

    def hold(self, counts: dict[int, int], features: Iterable[int]) -> None:
        for f in features:
            if f not in self.squared:
                self.squared[f] = idf(counts.get(f, 0), self.total) ** 2

    def load(self, features: Iterable[int]) -> None:
        """Read the counts of the features not held yet (one read; none when all are held)."""
        missing = self.missing(features)
        if missing:
            got = self.graph.word_counts(self.namespace, missing)
            self.hold(got[1] if got is not None else {}, missing)

    def relevance(self, task: set[int], words: Collection[int], task_norm2: float) -> float:
        """``idf_relevance`` of one word set, its features held."""
        return idf_relevance(task, words, self.squared, task_norm2)


class WordTable:
    """Every word count of one namespace, kept whole by a retrieval process whose projector tells it
    of each new insight (``Retriever.insights_added``): a word the table lacks is held by no insight,
    so a retrieval reads nothing. The words of the insights announced since are read again (one
    read) before the next retrieval weighs any; every other count is as the store holds it, since a
    count only moves when an insight holding the word is created."""

    __slots__ = ("_lock", "_squared", "counts", "graph", "namespace", "pending", "weights")

    def __init__(self, graph: RetrievalGraph, namespace: str) -> None:
        self.graph = graph
        self.namespace = namespace
        self.counts: dict[int, int] = {}
        self.pending: set[int] = set()  # words of insights announced since the counts were read
        self.weights: WordWeights | None = None
        self._squared: SquaredIdf | None = None  # the weights of ``counts`` as they stand, kept
        self._lock = threading.Lock()

    def load(self, limit: int) -> bool:
        """Read the whole table (one read); False while the counts are incomplete or hold more than
        ``limit`` words. Announcements are collected from the table's creation, so none is lost
        to a read that overlaps them."""
        got = self.graph.word_table(self.namespace, limit)
        if got is None:
            return False
        total, self.counts = got
        self.weights = WordWeights(self.graph, self.namespace, total)
        return True

    def holding(self, features: Iterable[int]) -> int:
        """How many of ``features`` some insight of the namespace holds (announced ones included)."""
        counts, pending = self.counts, self.pending
        return sum(1 for f in features if f in counts or f in pending)

    def added(self, features: Iterable[int]) -> None:
        with self._lock:
            self.pending.update(features)

    def squared(self) -> SquaredIdf | None:
        """The squared IDF weights of the namespace's words, the announced words read first; None
        when the store's counts were found incomplete meanwhile (the table is then of no use). Each
        weight is computed when first asked for and kept while the counts stand."""
        if self.pending and not self._refresh():
            return None
        weights = self.weights
        if weights is None:
            return None
        if (
            self._squared is None
            or self._squared.total != weights.total
            or self._squared.counts is not self.counts
        ):
            self._squared = SquaredIdf(weights.total, self.counts)
        return self._squared

    def _refresh(self) -> bool:
        with self._lock:
            pending, self.pending = self.pending, set()
        try:
            got = self.graph.word_counts(self.namespace, pending)
        except BaseException:
            self.added(pending)  # read again next time
            raise
        if got is None:
            return False
        total, counts = got
        for f in pending:
            n = counts.get(f)
            if n:
                self.counts[f] = n
            else:
                self.counts.pop(f, None)
        # a new object: a retrieval on another thread keeps the one it holds whole
        self.weights = WordWeights(self.graph, self.namespace, total)
        self._squared = None
        return True


@dataclass(frozen=True, slots=True)
class TextCacheState:
    """The word-set cache of a retriever (``Retriever.text_cache``), as the health check shows it."""

    entries: int
    capacity: int
    warming: bool
    warmed: int
    """Entries the warm-up added so far."""
    warm_s: float | None
    """How long the warm-up took; None until it ends."""


class Retriever:
    def __init__(
        self,
        graph: GraphStore,
        index: VectorIndex,
        embedder: Embedder,
        settings: Settings,
        resolve: Callable[[str], Settings] | None = None,
    ) -> None:
        self.graph = graph
        self.index = index
        self.embedder = embedder
        self.settings = settings
        # a namespace's effective settings (its own λ, budget, scoring, k, hops over the global ones)
        self.resolve = resolve or (lambda _namespace: settings)
        self.floor = embedder_floor(embedder)  # the cosine unrelated texts get (0: hashing)
        self.power = embedder_power(embedder)  # its curvature once the floor is removed (1: hashing)
        self.relevance_floor = embedder_relevance_floor(embedder)  # a task and an insight's (dense)
        # a dense task vector is kept in the retrieval record (EMBEDDING_CARRY): what it was made by
        self.vector_tag = (
            embedder_name(embedder) if embedder.kind == "dense" and settings.embedding_carry else None
        )
        #: the characters that vector adds to a record (the tag, then float16 bytes in base64)
        self.record_vector_chars = (
            0 if self.vector_tag is None else len(self.vector_tag) + 1 + 4 * -(-2 * embedder.dim // 3)
        )
        self._recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evomem-record")
        # reads whole word tables (``_load_word_table``), one at a time, off the retrieval path
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evomem-words")
        self._pending: set[Future[Exception | None]] = set()
        # insight word sets by id (a text never changes), the oldest dropped first: an array of 32-bit
        # features each, about 400 B with its id and entry (EVOMEM_TEXT_CACHE bounds them)
        self._text_features: OrderedDict[str, array[int]] = OrderedDict()
        self._text_lock = threading.Lock()
        self._warm_stop = threading.Event()
        self._warmer: threading.Thread | None = None
        self._warmed = 0
        self._warm_s: float | None = None
        self._count_after: dict[str, float] = {}  # namespace -> when to ask to count its words again
        self._word_weights: dict[str, WordWeights] = {}  # namespace -> its words' weights, kept
        self._word_tables: dict[str, WordTable] = {}  # namespace -> its whole word counts (announced)
        self._no_table: set[str] = set()  # namespaces whose counts hold more words than WORD_TABLE
        self._table_after: dict[str, float] = {}  # namespace -> when to try to read its table again
        # True when every insight new to the index is announced (``insights_added``, by this
        # process's projector): the kept weights are then used without reading the namespace's
        # count of insights each retrieval
        self.words_announced = False
        # the query graph's adjacency, kept while this process's projector tells it of every query
        # that changed (``queries_changed``; ``queries_announced``), else read from Redis each time
        self.query_graph = QueryGraphCache(graph, settings.read_model_queries)
        self.queries_announced = False

    def similar_queries(self, namespace: str, query: str, k: int | None = None) -> list[str]:
        vector = self.embedder.embed([query])[0]
        return [h.id for h in self.index.search_queries(vector, namespace, k or self.settings.top_k)]

    def retrieve(
        self,
        query: str,
        namespace: str,
        *,
        top_k: int | None = None,
        budget: int | None = None,
        hops: int | None = None,
        record: bool = True,
        wait_record: bool = False,
    ) -> Retrieval:
        """Eq. 2-10 for ``query``. With ``wait_record``, the retrieval record is written before the
        retrieval returns, and ``TransientError`` says Redis did not take it (a retrieval served
        from the read model reads nothing from Redis: only the record shows that it is down)."""
        s = self.resolve(namespace)
        with stage("embed"):
            vector = self.embedder.embed([query])[0]
        k = top_k or s.top_k
        with stage("similar"):
            hits = self._calibrated(self.index.search_queries(vector, namespace, k))  # Eq. 2
        more: list[QueryHit] = []
        task_words = word_features(query)
        if s.evidence_search:
            with stage("evidence"):
                # beyond the paper: Eq. 2's nearest past tasks may carry no evidence of the insights
                # about this task (other subjects under the same template), so the k nearest other
                # past tasks among the evidence of the insights whose words are nearest to its own
                # join them
                found = [h.id for h in hits]
                about = self.about_vector(vector, task_words)
                more = self._calibrated(
                    self.index.search_evidence(vector, namespace, s.evidence_search, k, found, about)
                )
        with stage("expand"):
            neighbours = self.query_graph.neighbours if self.queries_announced else self.graph.neighbours
            expansion = expand_neighbours(
                [h.id for h in hits],
                lambda ids: neighbours(namespace, ids),
                s.hops if hops is None else hops,
                similarity=[h.score for h in hits],
            )  # Eq. 3-4
            if more:  # evidence already: added as found, not expanded through the query graph
                expansion = with_queries(expansion, {h.id: h.score for h in more})
            evidence = {h.id: h for h in [*hits, *more]}
            evidence.update(self.index.query_evidence(namespace, expansion.expanded - evidence.keys()))
        with stage("candidates"):
            supports = {q: h.supports for q, h in evidence.items()}
            named = {i for ids in supports.values() for i in ids}
            active, heirs = self.index.serving_ids(namespace, named)  # Eq. 7: active, supported in Q̃ˢ
        with stage("rank"):
            texts: dict[str, ServingInsight] = {}
            text = None
            if s.scoring == "weighted" and s.relevance_power > 0:
                text = self._text_inputs(vector, task_words, namespace, [*active, *heirs], texts, s.relevance)
            top, candidates = rank_from_queries(
                RankingInputs(
                    supports,
                    {q: h.harms for q, h in evidence.items()},
                    active,
                    heirs,
                    expansion.weights,
                    s.lambda_,
                    budget or s.budget,
                    scoring=s.scoring,
                    power=s.similarity_power,
                    relevance_power=s.relevance_power,
                    text=text,
                )
            )  # Eq. 8-10
            texts.update(self.index.read_insights(namespace, [r.id for r in top if r.id not in texts]))
            ranked = [
                ScoredInsight(r.id, ins.text, r.score, r.support, r.conflict, ins.version, r.similarity)
                for r in top
                if (ins := texts.get(r.id)) is not None  # gone since: not served
            ]
        retrieval = Retrieval(
            str(uuid.uuid4()),
            namespace,
            query,
            tuple(ranked),
            expansion.similar,
            len(expansion.expanded),
            candidates,
        )
        if record:
            # off the agent's path: the record is only read when the report is consolidated, and
            # report() waits for pending records first (``flush``). The query graph links the new
            # query to Eq. 2's similar queries only: the evidence search's queries were found through
            # insights, not through this query, and linking them too would thicken every later
            # expansion (Eq. 3-4) with every insight's evidence
            rec = RetrievalRecord(
                retrieval.id,
                namespace,
                query,
                tuple(h.id for h in hits),
                tuple(i.id for i in ranked),
                tuple(h.score for h in hits),  # each one's cosine
                tuple(i.similarity for i in ranked),
                tuple((i.score, i.support, i.conflict) for i in ranked),
                datetime.now(UTC).isoformat(),
                None
                if self.vector_tag is None or isinstance(vector, Mapping)
                else pack_vector(vector, self.vector_tag),
            )
            # only the unfinished ones are kept: a service that never calls report() must not grow this
            future = self._recorder.submit(self._save, rec)
            self._pending.add(future)
            future.add_done_callback(self._pending.discard)
            if wait_record and isinstance(failed := future.result(), TransientError):
                raise TransientError(f"the retrieval record was not written: {failed}") from failed
        return retrieval

    def _calibrated(self, hits: list[QueryHit]) -> list[QueryHit]:
        """Eq. 2's cosines on the hashing embedder's scale (``evomem.core.embedding.calibrated``), so
        that SIMILARITY_POWER, the edges of the query graph and the rule controller's repeat bar
        mean the same whatever the embedder."""
        floor, power = self.floor, self.power
        if floor <= 0.0 and power == 1.0:
            return hits
        return [replace(h, score=calibrated(h.score, floor, power)) for h in hits]

    def about_vector(self, vector: Vector, task_words: set[int]) -> Vector | None:
        """What the evidence search finds the insights about the task by: with the hashing
        embedder, the task's word 1-2-grams (``word_part``), the measure text relevance ranks by
        too; with any other, None (the whole vector). At a million insights the search by the whole
        vector walked every character n-gram's posting list: 11.6 against 4.5 ms p50 (bench/README,
        "What the evidence search finds insights by"), for the same benchmark quality."""
        if isinstance(self.embedder, HashingEmbedder) and isinstance(vector, dict):
            return word_part(vector, task_words)
        return None

    def _word_sets(
        self, namespace: str, ids: Sequence[str], texts: dict[str, ServingInsight]
    ) -> dict[str, Collection[int]]:
        """Each insight's word 1-2-gram set, by id: kept by id (a text never changes), else from its
        text read in this retrieval (``texts``), else read now in one batch (left in ``texts``)."""
        cache = self._text_features
        capacity = self.settings.text_cache
        sets: dict[str, Collection[int]] = {}
        missing = []
        for i in ids:
            words = cache.get(i)
            if words is not None:
                sets[i] = words
            elif i in texts:
                sets[i] = word_features(texts[i].text)
            else:
                missing.append(i)
        if missing:
            read = self.index.read_insights(namespace, missing)
            texts.update(read)
            for i, ins in read.items():
                words = array("I", word_features(ins.text))  # distinct, 4 bytes each
                sets[i] = words
                if capacity <= 0:
                    continue
                with self._text_lock:  # retrievals may run on several threads (the HTTP service)
                    if len(cache) >= capacity:
                        # the oldest entry, in O(1): deleting a plain dict's first key leaves a hole
                        # that every later ``next(iter(...))`` walks past (7.6 µs at 65,536 entries)
                        cache.popitem(last=False)
                    cache[i] = words
        return sets

    def _text_inputs(
        self,
        vector: Vector,
        task: set[int],
        namespace: str,
        ids: Sequence[str],
        texts: dict[str, ServingInsight],
        relevance: str,
    ) -> TextInputs:
        """What the ranking weighs each candidate's text with, gathered for every candidate: with a
        dense embedder, the calibrated cosine of the task's vector and the insight's as a passage
        (which knows meanings: the word sets' cosine, which knows words only, would mark down the
        insight worded unlike the task); else the word 1-2-gram sets (``_word_sets``) and, for
        ``relevance=idf``, the squared IDF weights of their words among the namespace's insights
        (``_squared_weights``) with how many of the task's words some insight holds (a bound on each
        candidate's cosine, known from its namespace's ``WordTable``)."""
        if self.embedder.kind == "dense" and not isinstance(vector, Mapping):
            return TextInputs(relevance=self._dense_relevance(vector, namespace, ids, texts))
        sets = self._word_sets(namespace, ids, texts)
        frozen = frozenset(task)
        if relevance != "idf":
            return TextInputs(frozen, sets)
        squared, held = self._squared_weights(namespace, task, sets)
        return TextInputs(frozen, sets, squared, held)

    def _dense_relevance(
        self, vector: Vector, namespace: str, ids: Sequence[str], texts: dict[str, ServingInsight]
    ) -> dict[str, float]:
        """The calibrated cosine of the task's dense vector with each candidate's text as a passage,
        on the embedder's relevance floor (``embedder_relevance_floor``: its EMBEDDING_FLOOR unless
        EMBEDDING_RELEVANCE_FLOOR says otherwise). The projector embedded each insight through the
        same embedder, whose cache keeps it by text, so a candidate is embedded again only once the
        cache has dropped it."""
        missing = [i for i in ids if i not in texts]
        if missing:
            texts.update(self.index.read_insights(namespace, missing))
        known = [i for i in ids if i in texts]
        if not known:
            return {}
        vectors = np.asarray(embed_passages(self.embedder, [texts[i].text for i in known]), dtype=np.float64)
        dots = vectors @ np.asarray(list(vector), dtype=np.float64)  # a dense vector: floats
        floor = self.relevance_floor
        return {i: calibrated(float(d), floor) for i, d in zip(known, dots.tolist(), strict=True)}

    def _squared_weights(
        self, namespace: str, task: set[int], sets: Mapping[str, Collection[int]]
    ) -> tuple[Mapping[int, float] | None, int | None]:
        """The squared IDF weights of the task's words and of the candidates', and how many of the
        task's words some insight of the namespace holds (None unless its whole ``WordTable`` is
        kept). None and None while the namespace's counts are incomplete (they are then counted in
        the background) or Redis is unreachable (the retrieval fails open to the plain cosine)."""
        table = self._word_tables.get(namespace)
        held = table.holding(task) if table is not None and table.weights is not None and task else None
        try:
            squared = self._word_weights_for(namespace, task, sets)
        except TransientError:
            return None, None
        if squared is None:
            self._count_words_later(namespace)
            return None, None
        return squared, held

    def _word_weights_for(
        self, namespace: str, task: Iterable[int], sets: Mapping[str, Collection[int]]
    ) -> Mapping[int, float] | None:
        """The squared weights of the namespace's words, for the task's words and those of the
        word sets ``sets``. Told of every new insight (``words_announced``), from its whole table
        of counts (``WordTable``), which reads nothing until an insight is added, while the
        namespace's words fit ``WORD_TABLE``; otherwise read as met and kept across retrievals
        while its count of insights stays the same (``WordWeights``), for as many namespaces as
        the tenancy cache keeps settings."""
        if self.words_announced and namespace not in self._no_table and self.settings.word_table > 0:
            table = self._word_tables.get(namespace)
            if table is None:
                self._load_word_table(namespace)  # in the background: words are read as met meanwhile
            elif table.weights is not None:  # else still being read
                squared = table.squared()
                if squared is not None and len(table.counts) <= self.settings.word_table:
                    if len(squared) > self.settings.word_table:
                        squared.clear()
                    return squared
                with self._text_lock:  # the store's counts were reset, or grew past WORD_TABLE
                    if self._word_tables.get(namespace) is table:
                        del self._word_tables[namespace]
                    if squared is not None:
                        self._without_table(namespace)
        features = [*task, *(f for words in sets.values() for f in words)]
        held = self._word_weights.get(namespace)
        if held is not None and self.words_announced:
            held.load(features)
            return held.squared
        weights = WordWeights.read(self.graph, namespace, features, held)
        if weights is not None and weights is not held:
            if len(self._word_weights) >= self.settings.tenancy_cache_entries:
                self._word_weights.clear()
            self._word_weights[namespace] = weights
        return None if weights is None else weights.squared

    def _load_word_table(self, namespace: str) -> None:
        """Start reading a namespace's whole word counts in the background (``_read_word_table``),
        unless it is being read or was tried less than ``COUNT_WORDS_RETRY_S`` ago; the table,
        registered now so that no announcement is missed (``WordTable.load``), serves once read."""
        with self._text_lock:
            if namespace in self._word_tables or time.monotonic() < self._table_after.get(namespace, 0.0):
                return
            table = self._word_tables[namespace] = WordTable(self.graph, namespace)
        try:
            self._loader.submit(self._read_word_table, table)
        except RuntimeError:  # closed
            with self._text_lock:
                self._word_tables.pop(namespace, None)

    def _read_word_table(self, table: WordTable) -> None:
        """Read ``table`` whole, dropping the other tables kept when all would hold more than
        ``WORD_TABLE`` words. Not read: the counts are incomplete (tried again later), or alone hold
        more than ``WORD_TABLE`` (the namespace is then read word by word), or Redis failed."""
        namespace, loaded = table.namespace, False
        try:
            loaded = table.load(self.settings.word_table)
            if not loaded and self.graph.word_counts(namespace, ()) is not None:
                with self._text_lock:  # complete, so too many words
                    self._without_table(namespace)
        except Exception as exc:  # a later retrieval tries again; meanwhile words are read as met
            log.warning("word_table_failed", namespace=namespace, error=repr(exc))
        with self._text_lock:
            tables = self._word_tables
            if not loaded:
                if tables.get(namespace) is table:
                    del tables[namespace]
                self._table_after[namespace] = time.monotonic() + COUNT_WORDS_RETRY_S
                if len(self._table_after) > self.settings.tenancy_cache_entries:
                    self._table_after.clear()
                return
            held = sum(len(t.counts) for t in tables.values())
            if held > self.settings.word_table or len(tables) > self.settings.tenancy_cache_entries:
                for ns in [ns for ns in tables if ns != namespace]:
                    del tables[ns]

    def _without_table(self, namespace: str) -> None:
        """The namespace holds more words than ``WORD_TABLE``: its counts are read word by word
        (call with ``_text_lock`` held)."""
        if len(self._no_table) >= self.settings.tenancy_cache_entries:
            self._no_table.clear()
        self._no_table.add(namespace)

    def wait_word_tables(self) -> None:
        """Wait until the word tables asked for so far are read (tests, benchmarks)."""
        self._loader.submit(lambda: None).result()

    def insights_added(self, texts: Mapping[str, Sequence[str]]) -> None:
        """New insights reached the index, their texts by namespace: their words' counts moved."""
        for ns, new in texts.items():
            self._word_weights.pop(ns, None)
            table = self._word_tables.get(ns)
            if table is not None:
                table.added(f for text in new for f in word_features(text))

    def queries_changed(self, refs: Collection[tuple[str, str]]) -> None:
        """Queries changed in the store, by (namespace, id), their new version in the index: their
        edges moved, and those of their neighbours (``QueryGraphCache.changed``)."""
        self.query_graph.changed(refs)

    def _count_words_later(self, namespace: str) -> None:
        """Count the words of a namespace whose counts are incomplete (its insights were written by
        an evomem that did not keep them), in a thread of its own, at most once per
        ``COUNT_WORDS_RETRY_S``; its retrievals weigh every word alike meanwhile."""
        now = time.monotonic()
        with self._text_lock:
            if now < self._count_after.get(namespace, 0.0):
                return
            self._count_after[namespace] = now + COUNT_WORDS_RETRY_S

        def count() -> None:
            try:
                done = self.graph.count_words(namespace)
            except Exception as exc:  # the next retrieval asks again after the pause
                log.warning("count_words_failed", namespace=namespace, error=repr(exc))
                return
            log.info("words_counted" if done else "words_count_retry", namespace=namespace)

        threading.Thread(target=count, name="evomem-count-words", daemon=True).start()

    # -- the word-set cache --------------------------------------------------------------------------
    def warm(self, stop: threading.Event | None = None) -> int:
        """Fill the index's read model (``EVOMEM_READ_MODEL_*``, on the embedded index), then the
        word-set cache from the index's active insights, up to ``EVOMEM_TEXT_CACHE``, never evicting
        what retrievals put there; returns the word sets added. At a million insights
        on this project's store the ranking stage otherwise reads each candidate's text from disk
        on first use (bench/README, "The word-set cache"). Runs in the caller's thread;
        ``start_warming`` runs it in the background."""
        cache, capacity = self._text_features, self.settings.text_cache
        added = 0
        started = time.perf_counter()
        try:
            # the index's read model first (its queries' evidence, its insights' state), if it has one
            if (warm_index := getattr(self.index, "warm_read_model", None)) is not None:
                warm_index(stop)
            if self.queries_announced:  # and the query graph's adjacency
                self.query_graph.warm(
                    ((ns, self.graph.query_ids(ns)) for ns in self.graph.namespaces()), stop
                )
            for page in self.index.scan_insights(WARM_BATCH):
                if (stop is not None and stop.is_set()) or len(cache) >= capacity:
                    break
                words = [(i, array("I", word_features(text))) for i, text in page]
                with self._text_lock:
                    for i, w in words:
                        if len(cache) >= capacity:
                            break
                        if i not in cache:
                            cache[i] = w
                            added += 1
                            self._warmed += 1
        finally:
            self._warm_s = round(time.perf_counter() - started, 3)
        return added

    def start_warming(self) -> None:
        """``warm`` in a daemon thread (once); retrievals go on meanwhile, reading what is not
        cached yet. ``close`` stops it."""
        if self._warmer is not None or self.settings.text_cache <= 0:
            return

        def run() -> None:
            try:
                added = self.warm(self._warm_stop)
                log.info("retriever.warmed", entries=added, seconds=self._warm_s)
            except Exception as exc:  # a cold cache is slower, not wrong: retrievals read the texts
                log.warning("retriever.warm_failed", error=str(exc))

        self._warmer = threading.Thread(target=run, name="evomem-warm", daemon=True)
        self._warmer.start()

    def wait_warm(self, timeout_s: float | None = None) -> bool:
        """Wait for the background warm-up; True when it has ended (or never started)."""
        if self._warmer is None:
            return True
        self._warmer.join(timeout_s)
        return not self._warmer.is_alive()

    def text_cache(self) -> TextCacheState:
        warming = self._warmer is not None and self._warmer.is_alive()
        return TextCacheState(
            len(self._text_features),
            self.settings.text_cache,
            warming,
            self._warmed,
            None if warming else self._warm_s,
        )

    def _save(self, record: RetrievalRecord) -> Exception | None:
        """Write the record; the error, if it was not written (logged, not raised)."""
        try:
            self.graph.save_retrieval(record, self.settings.retrieval_ttl_s)
        except Exception as exc:  # the report still carries the served ids; only the record is lost
            log.warning("retrieval.record_failed", retrieval_id=record.id, error=str(exc))
            return exc
        return None

    def flush(self) -> None:
        """Wait until every retrieval record asked for so far is written."""
        for f in list(self._pending):
            f.result()

    def close(self) -> None:
        self._warm_stop.set()
        if self._warmer is not None:
            self._warmer.join()  # before the index it reads is closed
        self.flush()
        self._recorder.shutdown(wait=True)
        self._loader.shutdown(wait=True, cancel_futures=True)


__all__ = ["STAGES", "Retrieval", "Retriever", "TextCacheState", "WordTable", "WordWeights"]
