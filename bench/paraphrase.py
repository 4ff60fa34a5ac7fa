"""Retrieval quality on real human rewordings, per embedder: ``python -m bench.paraphrase``.

Through the SDK on the embedded stack, as a new user would: the first wording of each pair (an FAQ
question of AIA-BDE, ``bench.paraphrases``) is retrieved for, then reported as a resolved task that
proposes its own lesson (the FAQ's answer); once every report is consolidated, the second wording
(written by a person) is asked. hit@1: the right lesson is served first; top 5: it is among the
five served. Both are split by how many content words the two wordings share (Jaccard < 0.2, and
the rest; content words: lower-cased, punctuation stripped, the language's Snowball stop words out,
``bench.paraphrases``), and beside it by the earlier split (one short stop list). STS-B's 400 pairs
are every low-overlap pair of the pool plus a random draw of the others (``--draw``), so the overall
rate is also given weighted back to the pool's share of low-overlap pairs. Beside them, the
embedder's own ceiling (the nearest first wording by raw cosine, no
memory), the retrieve latency and the embedder's own latency for one text, and the embedding cache's
hits for the tasks asked again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    DEFAULT_OUT,
    embedded_settings,
    machine_info,
    merge_results,
    settings_overrides,
    summarise,
)
from bench.paraphrases import (
    LOW_OVERLAP,
    PACKAGE,
    STSB_PACKAGE,
    STSB_PARAPHRASE,
    Pair,
    low_overlap_share,
    pairs,
)
from evomem import Memory
from evomem.core.embedding import CachedEmbedder
from evomem.runtime import resolve_embedder

KEY = "paraphrase"
LOW = LOW_OVERLAP  # content-word Jaccard below which a pair shares "few" words


def _rate(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 3) if flags else None


def _weighted(low: float | None, rest: float | None, share: float) -> float | None:
    """The pool's overall rate from a stratified draw's two halves (``share``: the pool's low share)."""
    if low is None or rest is None:
        return None
    return round(share * low + (1 - share) * rest, 3)


def run_embedder(
    embedder: str, ps: list[Pair], root: Path, low_share: float | None = None, **overrides: Any
) -> dict[str, Any]:
    settings = embedded_settings(
        root / f"{embedder}-{len(list(root.iterdir()))}", embedder=embedder, **overrides
    )
    namespace = "faq"
    t0 = time.perf_counter()
    with Memory.open_local(settings) as mem:
        opened_s = time.perf_counter() - t0
        name = resolve_embedder(settings)
        reported: set[int] = set()
        for p in ps:  # the first wordings, each reported once, resolved with its lesson
            if p.faq in reported:
                continue
            reported.add(p.faq)
            r = mem.retrieve(p.first, namespace)
            mem.report(r, status="resolved", proposed_insight=p.lesson)
        mem.consolidate()
        hit1: list[bool] = []
        top5: list[bool] = []
        lat: list[int] = []
        for p in ps:
            t = time.perf_counter_ns()
            served = mem.retrieve(p.second, namespace, budget=5)
            lat.append(time.perf_counter_ns() - t)
            # by the FAQ's number the lesson starts with: the memory keeps a text stripped
            tags = [i.text.split("]", 1)[0] + "]" for i in served.insights]
            tag = f"[{p.faq}]"
            hit1.append(bool(tags) and tags[0] == tag)
            top5.append(tag in tags)
        # the same task asked again: served from the embedding cache (dense embedders)
        embedder_obj = mem.runtime.embedder
        cache_before = embedder_obj.stats() if isinstance(embedder_obj, CachedEmbedder) else None
        again = [mem.retrieve(p.second, namespace, budget=5) for p in ps[:20]]
        cache_after = embedder_obj.stats() if isinstance(embedder_obj, CachedEmbedder) else None
        assert all(a.insights is not None for a in again)
        one_text = _one_text_ns(embedder_obj, ps)
        ceiling = _ceiling(embedder_obj, ps)
    low = [n for n, p in enumerate(ps) if p.overlap < LOW]
    rest = [n for n, p in enumerate(ps) if p.overlap >= LOW]
    low_old = [n for n, p in enumerate(ps) if p.overlap_old < LOW]
    out: dict[str, Any] = {
        "embedder": name,
        "pairs": len(ps),
        "pairs_low_overlap": len(low),
        "hit1_all": _rate(hit1),
        "hit1_low_overlap": _rate([hit1[n] for n in low]),
        "hit1_rest": _rate([hit1[n] for n in rest]),
        "top5_all": _rate(top5),
        "top5_low_overlap": _rate([top5[n] for n in low]),
        "top5_rest": _rate([top5[n] for n in rest]),
        "raw_cosine_hit1_all": ceiling["all"],
        "raw_cosine_hit1_low_overlap": _rate([ceiling["flags"][n] for n in low]),
        "raw_cosine_hit1_rest": _rate([ceiling["flags"][n] for n in rest]),
        "old_split": {
            "pairs_low_overlap": len(low_old),
            "hit1_low_overlap": _rate([hit1[n] for n in low_old]),
            "top5_low_overlap": _rate([top5[n] for n in low_old]),
        },
        "retrieve": summarise(lat),
        "embed_one_text": summarise(one_text),
        "open_s": round(opened_s, 3),
    }
    if low_share is not None:  # a stratified draw: the overall rates weighted back to the pool
        out["pool_low_overlap_share"] = round(low_share, 4)
        out["hit1_pool_weighted"] = _weighted(out["hit1_low_overlap"], out["hit1_rest"], low_share)
        out["top5_pool_weighted"] = _weighted(out["top5_low_overlap"], out["top5_rest"], low_share)
    if cache_before is not None and cache_after is not None:
        out["cache_hits_asked_again"] = cache_after["hits"] - cache_before["hits"]
        out["cache_misses_asked_again"] = cache_after["misses"] - cache_before["misses"]
    return out


def _one_text_ns(embedder: Any, ps: list[Pair]) -> list[int]:
    """The embedder's own latency for one text never embedded before (the cache bypassed)."""
    inner: Any = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    samples = []
    for n, p in enumerate(ps[:60]):
        text = f"{p.second} ({n})"
        t = time.perf_counter_ns()
        inner.embed([text])
        samples.append(time.perf_counter_ns() - t)
    return samples


def _ceiling(embedder: Any, ps: list[Pair]) -> dict[str, Any]:
    """hit@1 of the embedder's raw cosine alone: the second wording's nearest first wording."""
    inner: Any = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    firsts = sorted({p.faq: p.first for p in ps}.items())
    ids = [f for f, _ in firsts]
    a = inner.embed([t for _, t in firsts])
    b = inner.embed([p.second for p in ps])
    if isinstance(a[0], dict):  # sparse: a dot product of dicts
        flags = []
        for p, v in zip(ps, b, strict=True):
            scores = [sum(w * u.get(k, 0.0) for k, w in v.items()) for u in a]
            flags.append(ids[int(np.argmax(scores))] == p.faq)
    else:
        sims = np.asarray(b) @ np.asarray(a).T
        flags = [ids[int(j)] == p.faq for p, j in zip(ps, sims.argmax(1), strict=True)]
    return {"all": _rate(flags), "flags": flags}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.paraphrase", description=__doc__)
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument(
        "--kind",
        default="VUC",
        choices=["VUC", "VIN", "STSB"],
        help="AIA-BDE's rewordings by users (VUC) or its authors (VIN), or STS-B's English paraphrases",
    )
    ap.add_argument("--embedders", default="hashing,auto", help="comma-separated EVOMEM_EMBEDDER values")
    ap.add_argument(
        "--stsb-score",
        type=float,
        default=STSB_PARAPHRASE,
        help=f"STS-B: the annotators' score from which a pair is a paraphrase ({STSB_PARAPHRASE})",
    )
    ap.add_argument(
        "--draw",
        default="stratified",
        choices=["stratified", "random"],
        help="STS-B: every low-overlap pair plus a random draw of the others (stratified), or a random draw",
    )
    ap.add_argument("--seed", type=int, default=7, help="the random draw's seed (7)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 40 pairs, not a measurement")
    ap.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="a setting for every run"
    )
    args = ap.parse_args(argv)
    overrides = dict(settings_overrides(args.set))
    ps = pairs(40 if args.quick else args.pairs, args.kind, args.seed, args.stsb_score, args.draw)
    stratified = args.kind == "STSB" and args.draw == "stratified"
    low_share = low_overlap_share(args.kind, args.stsb_score) if stratified else None
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"{len(ps)} pairs, {sum(p.overlap < LOW for p in ps)} with content-word Jaccard < {LOW} "
        f"({sum(p.overlap_old < LOW for p in ps)} by the earlier split)"
        + (f"; the pool's low-overlap share {low_share:.3f}" if low_share is not None else "")
        + (f"; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}" if load else "")
    )
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="evomem-paraphrase-") as tmp:
        for e in args.embedders.split(","):
            results[e] = r = run_embedder(e, ps, Path(tmp), low_share, **overrides)
            old = r["old_split"]
            load = os.getloadavg() if hasattr(os, "getloadavg") else None
            r["load_avg_after"] = [round(x, 2) for x in load] if load else None
            print(
                f"{e:>8} ({r['embedder']}): hit@1 {r['hit1_all']} (Jaccard<{LOW}: {r['hit1_low_overlap']}, "
                f"n={r['pairs_low_overlap']}; rest {r['hit1_rest']}"
                + (f"; pool-weighted {r['hit1_pool_weighted']}" if "hit1_pool_weighted" in r else "")
                + f"), top5 {r['top5_all']} (low {r['top5_low_overlap']}), "
                f"earlier split low hit@1 {old['hit1_low_overlap']} (n={old['pairs_low_overlap']}), "
                f"raw cosine hit@1 {r['raw_cosine_hit1_all']} (low {r['raw_cosine_hit1_low_overlap']}); "
                f"retrieve p50 {r['retrieve']['p50_ms']} ms, "
                f"embed one text p50 {r['embed_one_text']['p50_ms']} ms"
                + (
                    f", cache hits asked again {r['cache_hits_asked_again']}"
                    if "cache_hits_asked_again" in r
                    else ""
                )
                + (f"; load average {load[0]:.2f}" if load else "")
            )
    section = {
        "command": " ".join(["python -m bench.paraphrase", *(sys.argv[1:] if argv is None else argv)]),
        "load_avg_start": [round(x, 2) for x in load] if load else None,
        "corpus": (
            f"STS-B ({STSB_PACKAGE}), pairs scored >= {args.stsb_score}, {len(ps)} pairs, "
            f"{args.draw} draw (seed {args.seed})"
            if args.kind == "STSB"
            else f"AIA-BDE 2.0 ({PACKAGE}), {args.kind} rewordings, {len(ps)} pairs"
        ),
        "duration_s": round(time.perf_counter() - t0, 1),
        "machine": machine_info(),
        "overlap": "Jaccard of content words: lower-cased, punctuation stripped, Snowball stop words out",
        "median_overlap": round(statistics.median(p.overlap for p in ps), 3),
        "median_overlap_old_split": round(statistics.median(p.overlap_old for p in ps), 3),
        "results": results,
    }
    if not args.no_save and not overrides:  # a variant's figures are printed, not kept
        merge_results(args.out, f"{KEY}_{args.kind.lower()}", section)


if __name__ == "__main__":
    main()
