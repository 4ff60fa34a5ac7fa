"""Benchmarks of the LLM controller against the local OpenAI-compatible test server, offline.

* Prompt tokens per event with 1 and with 8 events per call (target: at least 30% fewer at 8), as
  the endpoint reports them and the usage tally records them.
* Events per second through a consolidation worker against an endpoint that takes 200 ms per
  request, at 1, 8 and 64 calls in flight (one event a call, so only concurrency changes;
  target: ×20 or more from 1 to 64), and once more at 64 in flight with 8 events per call.

Figures are printed and merged into ``bench/results.json`` under the key ``"llm"``. The test
server counts tokens with the conservative estimate (``evomem.adapters.llm.token_count``), which counts more
than tiktoken does for ordinary text; the ratio between the two settings is what the target is about.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import merge_results
from evomem.adapters.llm import usage
from evomem.adapters.redis.connection import EmbeddedRedis, connect
from evomem.adapters.redis.events import EventStream
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.runtime import open_worker
from evomem.settings import Settings
from evomem.testing.llm_server import LLMTestServer
from evomem.testing.seeding import seed_insights
from schemas import TaskEvent

RESULTS = Path("bench/results.json")
MAX_EVENTS = 1500  # per throughput run
NS = "bench-llm"
LESSONS = [
    "Find the sentence that names the claim's subject and compare every detail before choosing a label.",
    "Split a multi-hop question: find the bridge entity first, then the attribute asked about it.",
    "Before moving a block, clear everything stacked on it and build the goal tower bottom up.",
    "Check each action's preconditions against the current state before issuing it.",
    "When a claim mentions a year, compare it with the year in the evidence.",
    "Answer only once both hops have evidence and name the bridge entity in the reasoning.",
    "Quote the evidence sentence before giving a final label.",
    "With no sentence about the subject, answer NOT ENOUGH INFO rather than guessing.",
    "Search for the entity the question describes before the attribute it asks about.",
    "Put a block on the table only when it sits on a block that must still move.",
    "Re-read the goal state after every move and stop when it holds.",
    "Prefer the most specific source over a general overview page.",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--latency-ms", type=float, default=200.0, help="the endpoint's delay per request")
    p.add_argument("--token-events", type=int, default=64, help="events for the token measurement")
    p.add_argument("--seconds", type=float, default=4.0, help="about how long each throughput run lasts")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")


def _events(rng: random.Random, hot: list[str], n: int) -> list[TaskEvent]:
    """What agents report: three retrieved lessons, a short trajectory, sometimes a proposal."""
    out = []
    label = {"resolved": "SUPPORTS", "failed": "REFUTES"}
    for i in range(n):
        status = rng.choice(["resolved", "failed"])
        out.append(
            TaskEvent(
                namespace=NS,
                query=f"Task {i}: verify that claim {rng.randint(0, 10**6)} about an inventor",
                status=status,
                retrieved_insight_ids=rng.sample(hot, 3),
                trajectory=[
                    "searched for the claim's subject",
                    f"read {rng.randint(1, 4)} passages",
                    "compared the dates with the evidence",
                    f"answered {label[status]}",
                ],
                final_answer=label[status],
                feedback=None if status == "resolved" else "the label was wrong",
                proposed_insight=f"Lesson {uuid.UUID(int=rng.getrandbits(128))}: check the source's date."
                if rng.random() < 0.1
                else None,
            )
        )
    return out


def _seed(client: Any) -> list[str]:
    return seed_insights(
        RedisGraphStore(client), NS, LESSONS, archive_policy="evidence", decided_by="controller"
    )


def _consolidate(settings: Settings, client: Any, events: list[TaskEvent]) -> tuple[float, int]:
    """Publish, then time one worker until the stream is empty: (seconds, events applied)."""
    stream = EventStream(client)
    for e in events:
        stream.publish(e)
    worker = open_worker(settings, client, consumer=f"bench-{uuid.uuid4().hex[:6]}")
    started, applied = time.perf_counter(), 0
    while True:
        report = worker.run_batch(block_ms=0)
        if report.events == 0:
            break
        applied += report.applied
    return time.perf_counter() - started, applied


def _fresh(client: Any) -> list[str]:
    client.flushdb()
    return _seed(client)


def run(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    rng = random.Random(7)
    token_events = 16 if args.quick else args.token_events
    seconds = 0.5 if args.quick else args.seconds
    latency = args.latency_ms / 1000
    cap = 200 if args.quick else MAX_EVENTS
    with (
        tempfile.TemporaryDirectory(prefix="evomem-bench-llm-") as tmp,
        LLMTestServer(latency_s=0.0) as server,
    ):
        redis = EmbeddedRedis(Path(tmp))
        client = connect(redis.ensure())
        base: dict[str, Any] = {
            "data_dir": Path(tmp),
            "redis_url": None,
            "controller": "llm",
            "llm_base_url": server.url,
            "llm_api_key": "local",
            "llm_model": "evomem-bench",
            "llm_tokenizer": "estimate",
            "batch_size": 256,
            "embedder": "hashing",
        }
        try:
            tokens = {}
            for per_call in (1, 8):
                hot = _fresh(client)
                events = _events(random.Random(11), hot, token_events)
                settings = Settings(**base, llm_events_per_call=per_call, llm_concurrency=8)
                _consolidate(settings, client, events)
                tally = usage.summary(client)
                tokens[per_call] = {
                    "events": tally["events_judged"],
                    "calls": tally["calls"],
                    "prompt_tokens_per_event": tally["prompt_tokens_per_event"],
                    "completion_tokens_per_event": tally["completion_tokens_per_event"],
                }
            server.reset(latency_s=latency)
            throughput = []
            for concurrency, per_call in ((1, 1), (8, 1), (64, 1), (64, 8)):
                hot = _fresh(client)
                n = min(cap, max(4, int(seconds * concurrency * per_call / max(latency, 0.01))))
                settings = Settings(
                    **base,
                    llm_events_per_call=per_call,
                    llm_concurrency=concurrency,
                )
                elapsed, applied = _consolidate(settings, client, _events(rng, hot, n))
                throughput.append(
                    {
                        "concurrency": concurrency,
                        "events_per_call": per_call,
                        "events": n,
                        "applied": applied,
                        "seconds": round(elapsed, 3),
                        "events_per_s": round(applied / elapsed, 1),
                        "max_in_flight": server.max_in_flight,
                    }
                )
                server.reset()
        finally:
            client.close()
            redis.stop()
    one, eight = tokens[1]["prompt_tokens_per_event"], tokens[8]["prompt_tokens_per_event"]
    saving = 1 - eight / one if one else 0.0
    rate = {(t["concurrency"], t["events_per_call"]): t["events_per_s"] for t in throughput}
    speedup = rate[(64, 1)] / rate[(1, 1)] if rate[(1, 1)] else 0.0
    section = {
        "timestamp": started.isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.llm", *sys.argv[1:]]),
        "quick": bool(args.quick),
        "token_counter": "estimate: ceil(UTF-8 bytes / 3), above tiktoken's count for ordinary text",
        "latency_ms": args.latency_ms,
        "prompt_tokens": {
            "per_event_at_1_per_call": one,
            "per_event_at_8_per_call": eight,
            "saving": round(saving, 3),
            "target_saving": 0.30,
            "runs": tokens,
        },
        "throughput": {"runs": throughput, "speedup_64_vs_1": round(speedup, 1), "target_speedup": 20},
    }
    _print(section)
    merge_results(args.out, "llm", section)
    print(f'\nmerged under "llm" in {args.out}')
    return 0


def _print(s: dict[str, Any]) -> None:
    p = s["prompt_tokens"]
    print(f"LLM controller against the local test server ({s['token_counter']})")
    print(f"\n{'events per call':<18}{'prompt tokens/event':>21}{'completion tokens/event':>25}{'calls':>7}")
    for per_call, run in p["runs"].items():
        print(
            f"{per_call:<18}{run['prompt_tokens_per_event']:>21}{run['completion_tokens_per_event']:>25}"
            f"{run['calls']:>7}"
        )
    print(f"prompt tokens saved per event at 8 per call: {p['saving']:.1%} (target ≥ 30%)")
    t = s["throughput"]
    print(f"\nendpoint latency {s['latency_ms']:.0f} ms")
    print(
        f"{'in flight':<11}{'events/call':>12}{'events':>8}{'seconds':>9}{'events/s':>10}"
        f"{'max in flight':>15}"
    )
    for r in t["runs"]:
        print(
            f"{r['concurrency']:<11}{r['events_per_call']:>12}{r['applied']:>8}{r['seconds']:>9.2f}"
            f"{r['events_per_s']:>10.1f}{r['max_in_flight']:>15}"
        )
    print(f"speed-up from 1 to 64 in flight: ×{t['speedup_64_vs_1']} (target ×20)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.llm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
