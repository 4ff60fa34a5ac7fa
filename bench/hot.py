"""The hot insight: one insight carrying N positive evidence ids beside a fresh one carrying one, in
one namespace; a KEEP and a retrieval that serves each are timed, and compared.

Built through ``evomem.adapters.redis.importer.import_jsonl`` (what ``evomem import`` runs): 2N
query nodes of two task families, A (the hot insight's N evidence queries) and B (N queries no
insight cites, but one, the fresh insight's). B is A with every word but the stop words
ROT13-encoded: the hashing embedder's features of a B text are those of its A text under a
bijection, so the similar-query search (Eq. 2) and the expansion cost the same on either side, and
only the evidence the served insight carries differs.
"""

from __future__ import annotations

import codecs
import json
import random
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, TextIO

from bench.probes import Progress, ProjectionTimer, rss_mb
from evomem import Memory
from evomem.adapters.redis.importer import import_jsonl
from evomem.pipeline.export import FORMAT

NAMESPACE = "hot"
FAMILIES = ("A", "B")
_IDS = uuid.UUID("5d0c2b8e-7f3a-4c1e-9b6d-0a4e8f2c1d37")
_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ra",
    "ven",
    "dor",
    "sa",
    "tel",
    "qu",
    "is",
    "ber",
    "ny",
    "mo",
    "hra",
    "el",
    "var",
    "an",
    "to",
    "ri",
    "zu",
    "pe",
    "gal",
    "fen",
    "ost",
    "ur",
    "ly",
    "dra",
    "wen",
    "bi",
    "cor",
]
_VERBS = ("Reconcile", "Audit", "Summarise", "Forecast", "Archive", "Review", "Balance", "Export")
_NOUNS = ("ledger", "invoice", "budget", "payroll", "report", "account", "statement", "receipt")
# Varied like a family of real tasks: no word is in every text, so no posting list of the sparse
# index holds the whole namespace.
_TEMPLATE = "{verb} the {w1} {noun} of {w2} for the {w3} {noun2}"
_KEPT = frozenset({"the", "of", "for"})  # the template's stop words: the embedder drops them anyway
#: The hot insight's text: it shares words with family A's tasks, as a lesson does with the tasks it
#: is about, so the evidence search (by the task's words) finds it; the fresh one's is its mirror.
_INSIGHT = "Reconcile each ledger against the bank statement before closing the account."


def _uid(*parts: object) -> str:
    return str(uuid.uuid5(_IDS, ":".join(map(str, parts))))


def mirror(text: str) -> str:
    """The family-B twin of a family-A text."""
    return " ".join(w if w in _KEPT else codecs.encode(w, "rot13") for w in text.split(" "))


def family_texts(family: str, n: int, seed: int) -> list[str]:
    """``n`` distinct task texts of one family: three slots over invented words, combinations drawn
    without replacement; family B mirrors family A text for text."""
    rng = random.Random(f"hot:{seed}")
    side = 2
    while side**3 < 2 * n:
        side += 1
    words: set[str] = set()
    while len(words) < side:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(3)))
    pool = sorted(words)
    texts = [
        _TEMPLATE.format(
            verb=rng.choice(_VERBS),
            noun=rng.choice(_NOUNS),
            noun2=rng.choice(_NOUNS),
            w1=pool[p // side**2],
            w2=pool[p // side % side],
            w3=pool[p % side],
        )
        for p in rng.sample(range(side**3), n)
    ]
    return texts if family == "A" else [mirror(t) for t in texts]


def _records(texts: dict[str, list[str]]) -> Iterator[dict[str, Any]]:
    now = datetime.now(UTC).isoformat()
    evidence = len(texts["A"])
    yield {"kind": "header", "format": FORMAT}
    for family, family_tasks in texts.items():
        for n, text in enumerate(family_tasks):
            yield {
                "kind": "query",
                "id": _uid("q", family, n),
                "namespace": NAMESPACE,
                "text": text,
                "status": "resolved",
                "trajectory": [],
                "event_id": _uid("event", family, n),
                "created_at": now,
                "neighbours": [],
            }
    for name, family, cited, text in (
        ("hot", "A", evidence, _INSIGHT),
        ("fresh", "B", 1, mirror(_INSIGHT)),  # its words are to B's tasks what the hot one's are to A's
    ):
        yield {
            "kind": "insight",
            "id": _uid("insight", name),
            "namespace": NAMESPACE,
            "text": text,
            "state": "active",
            "positive": [_uid("q", family, n) for n in range(cited)],
            "negative": [],
            "version": 1,
            "created_by_event": _uid("event", "import", name),
            "created_at": now,
            "updated_at": now,
            "edges": [],
            "history": [],
        }


def build(mem: Memory, texts: dict[str, list[str]], progress: bool, err: TextIO) -> dict[str, Any]:
    """Import the 2N queries and the two insights, then project them all into the index."""
    evidence = len(texts["A"])
    t0 = time.perf_counter()
    lines = (json.dumps(r) for r in _records(texts))
    counts = import_jsonl(mem.redis, lines)
    t1 = time.perf_counter()
    projector = mem.projector
    assert projector is not None  # the memory was opened with its index
    bar = Progress(err, "project", 2 * evidence + 2, progress)
    projected = 0
    while (changes := projector.run_once(max_changes=10_000).changes) > 0:
        projected += changes
        bar.update(min(projected, 2 * evidence + 2))
    bar.close()
    t2 = time.perf_counter()
    return {**counts, "import_s": round(t1 - t0, 2), "project_s": round(t2 - t1, 2)}


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 4) if xs else float("nan")


def measure(mem: Memory, evidence: int, reps: int, seed: int, progress: bool, err: TextIO) -> dict[str, Any]:
    """``reps`` rounds; in each, per insight (alternating which goes first): a retrieval that
    serves it (the first since its last edit: its index entry was just rewritten), the same
    retrieval again unrecorded (what any reader's caches can do), then the KEEP: ``report()`` with a
    helpful verdict on it and ``consolidate()`` (which projects the change)."""
    a_texts = family_texts("A", evidence, seed)
    texts = {"A": a_texts, "B": [mirror(t) for t in a_texts]}
    built = build(mem, texts, progress, err)
    timer = ProjectionTimer(mem)
    targets = {  # each retrieval asks the text of a query its insight cites: the top similar query
        "hot": (_uid("insight", "hot"), texts["A"][0]),
        "fresh": (_uid("insight", "fresh"), texts["B"][0]),
    }
    for _, text in targets.values():  # warm-up, unrecorded
        for _ in range(3):
            mem.retriever.retrieve(text, NAMESPACE, record=False)
    samples: dict[str, dict[str, list[float]]] = {
        name: {k: [] for k in ("retrieve", "retrieve_repeat", "report", "consolidate", "project", "keep")}
        for name in targets
    }
    served: dict[str, list[int]] = {name: [0, 0] for name in targets}  # [target served, retrievals]
    kept: dict[str, int] = dict.fromkeys(targets, 0)
    bar = Progress(err, "hot insight rounds", reps, progress)
    clock = time.perf_counter_ns
    for rep in range(reps):
        order = list(targets) if rep % 2 == 0 else list(reversed(targets))
        for name in order:
            insight_id, text = targets[name]
            s = samples[name]
            t0 = clock()
            retrieval = mem.retrieve(text, NAMESPACE)
            t1 = clock()
            mem.retriever.retrieve(text, NAMESPACE, record=False)
            t2 = clock()
            served[name][0] += insight_id in {i.id for i in retrieval.insights}
            served[name][1] += 1
            mem.report(retrieval, status="resolved", insight_feedback={insight_id: "helpful"})
            t3 = clock()
            projected = timer.ns
            report = mem.consolidate()
            t4 = clock()
            kept[name] += report.operations.get("KEEP", 0) > 0
            s["retrieve"].append((t1 - t0) / 1e6)
            s["retrieve_repeat"].append((t2 - t1) / 1e6)
            s["report"].append((t3 - t2) / 1e6)
            s["consolidate"].append((t4 - t3) / 1e6)
            s["project"].append((timer.ns - projected) / 1e6)
            s["keep"].append((t4 - t2) / 1e6)
        bar.update(rep + 1)
    bar.close()
    per: dict[str, Any] = {}
    for name, (insight_id, text) in targets.items():
        node = mem.insight(insight_id, NAMESPACE)
        per[name] = {
            "id": insight_id,
            "query": text,
            "positive_after": len(node.positive),
            "served": served[name][0],
            "retrievals": served[name][1],
            "keeps_applied": kept[name],
            **{f"{k}_median_ms": _median(v) for k, v in samples[name].items()},
            "keep_ms": [round(x, 3) for x in samples[name]["keep"]],
        }
        if not timer.calls:
            per[name]["project_median_ms"] = None
    ratios = {
        k: round(per["hot"][f"{k}_median_ms"] / per["fresh"][f"{k}_median_ms"], 3)
        for k in ("keep", "retrieve", "retrieve_repeat", "report", "consolidate", "project")
        if per["hot"][f"{k}_median_ms"] and per["fresh"][f"{k}_median_ms"]
    }
    return {
        "evidence": evidence,
        "reps": reps,
        "namespace": NAMESPACE,
        "build": built,
        "rss_mb_python": rss_mb()["rss"],
        "insights": per,
        "ratios_hot_to_fresh": ratios,
    }


__all__ = ["FAMILIES", "NAMESPACE", "build", "family_texts", "measure", "mirror"]
