"""python -m bench.quality.taught: the issue's acceptance world, then the fleet keeps working.

The acceptance test (tests/test_memory_quality.py) teaches look-alike templated topics one by one with
the rule controller and no verdicts, and asks each again at once. Here the same kind of world (its own
topics, so it is not the test's) goes on after the teaching: ``--tasks`` more tasks on random topics,
each a variant of its topic's query ("explain X", "explain X please", ...), with no verdicts and no
proposals; a task succeeds with ``--p-helped`` when its topic's lesson was served and with
``--p-base`` otherwise, and consolidation follows every ``--consolidate-every`` tasks. Then every
topic is asked again, verbatim and lightly paraphrased: is the lesson it taught ranked first, is it
served at all? Figures per seed and their mean, after the teaching and after the tasks.

    python -m bench.quality.taught [--topics 32] [--tasks 200] [--seeds 3] [--p-helped 0.8]
                                   [--p-base 0.4] [--consolidate-every 10] [--set FIELD=VALUE]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.quality.worlds import field_values
from evomem import Memory, Settings

TOPICS = (
    "binary search trees", "rust ownership", "kubernetes pods", "sql joins", "css flexbox",
    "docker volumes", "http caching", "graphql resolvers", "python decorators", "java generics",
    "git rebase", "linux permissions", "dns resolution", "load balancers", "message queues",
    "bloom filters", "consistent hashing", "raft consensus", "map reduce", "the nitrogen cycle",
    "the stock market", "game theory", "prime numbers", "fourier transforms", "bayes theorem",
    "the doppler effect", "semiconductors", "nuclear fission", "the nervous system", "mitochondria",
    "the silk road", "the magna carta", "the space race", "solar panels", "wind turbines",
    "recommendation systems", "reinforcement learning", "decision trees", "linear regression",
    "the ozone layer",
)  # fmt: skip
VARIANTS = ("", " please", " for a beginner", " in detail")
NAMESPACE = "taught"


def lesson(topic: str) -> str:
    return f"To explain {topic}, begin with what {topic} is for and give one worked example of {topic}."


def query(topic: str) -> str:
    return f"explain {topic}"


def paraphrase(topic: str) -> str:
    return f"could you explain {topic} to me briefly?"


def ask_all(memory: Memory, topics: Sequence[str], ids: dict[str, str]) -> dict[str, float]:
    """Every topic asked again: the share whose lesson is first, and served at all, verbatim and
    paraphrased."""
    counts = dict.fromkeys(
        ("first verbatim", "first paraphrased", "served verbatim", "served paraphrased"), 0
    )
    for topic in topics:
        for kind, text in (("verbatim", query(topic)), ("paraphrased", paraphrase(topic))):
            served = [i.id for i in memory.retrieve(text, NAMESPACE).insights]
            counts[f"first {kind}"] += bool(served) and served[0] == ids[topic]
            counts[f"served {kind}"] += ids[topic] in served
    return {k: v / len(topics) for k, v in counts.items()}


def run(
    seed: int, args: argparse.Namespace, extra: dict[str, str]
) -> tuple[dict[str, float], dict[str, float]]:
    rnd = random.Random(seed)
    topics = rnd.sample(TOPICS, min(args.topics, len(TOPICS)))
    with tempfile.TemporaryDirectory(prefix="evomem-taught-") as root:
        values = {"embedder": "hashing", **extra}  # a hashing benchmark unless --set names another
        settings = Settings(data_dir=Path(root), controller="rules", **values)  # type: ignore[arg-type]
        with Memory.open_local(settings) as memory:
            for topic in topics:
                r = memory.retrieve(query(topic), NAMESPACE)
                memory.report(r, status="resolved", proposed_insight=lesson(topic))
                memory.consolidate()
            by_text = {n.text: n.id for n in memory.insights(NAMESPACE)}
            ids = {topic: by_text[lesson(topic)] for topic in topics}
            taught = ask_all(memory, topics, ids)
            for n in range(args.tasks):
                topic = rnd.choice(topics)
                r = memory.retrieve(query(topic) + rnd.choice(VARIANTS), NAMESPACE)
                helped = any(i.id == ids[topic] for i in r.insights)
                ok = rnd.random() < (args.p_helped if helped else args.p_base)
                memory.report(r, status="resolved" if ok else "failed")
                if (n + 1) % args.consolidate_every == 0:
                    memory.consolidate()
            memory.consolidate()
            return taught, ask_all(memory, topics, ids)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality.taught", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--topics", type=int, default=32, help=f"topics taught (at most {len(TOPICS)})")
    parser.add_argument("--tasks", type=int, default=200, help="tasks after the teaching")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--p-helped", type=float, default=0.8, help="success when the topic's lesson is served"
    )
    parser.add_argument("--p-base", type=float, default=0.4, help="success otherwise")
    parser.add_argument("--consolidate-every", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a Settings field")
    args = parser.parse_args(argv)
    extra = dict(field_values(args.set))
    print(
        f"{args.topics} topics taught one by one (rule controller, no verdicts), then {args.tasks} tasks: "
        f"success {args.p_helped} with the topic's lesson served, {args.p_base} without; "
        f"consolidation every {args.consolidate_every}; settings {extra or 'defaults'}"
    )
    after: list[tuple[dict[str, float], dict[str, float]]] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        taught, worked = run(seed, args, extra)
        after.append((taught, worked))
        cells = "  ".join(f"{k} {taught[k]:.2f} → {worked[k]:.2f}" for k in taught)
        print(f"seed {seed}: {cells}", flush=True)
    means = {
        k: (statistics.fmean(a[k] for a, _ in after), statistics.fmean(b[k] for _, b in after))
        for k in after[0][0]
    }
    print("mean:   " + "  ".join(f"{k} {a:.3f} → {b:.3f}" for k, (a, b) in means.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
