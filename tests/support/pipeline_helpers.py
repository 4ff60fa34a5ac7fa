"""Helpers for the delivery tests: real Celery worker processes and a serial model of the events."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis

from bench.common import child_env as bench_child_env
from evomem.adapters.memory.graph import InMemoryGraphStore
from evomem.core import decisions as controllers
from evomem.core.decisions import DecisionInput, RuleController
from evomem.core.editing import plan_edits
from evomem.settings import Settings
from schemas import TaskEvent
from schemas.models import utcnow


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a process a test starts: the benchmarks' (``bench.common.child_env``: this
    one's without its ``EVOMEM_*`` variables, on the hashing embedder whatever the default, as
    tests/conftest.py pins it for the test process), then ``extra`` (which may name another)."""
    return {**bench_child_env(), **extra}


#: Worker settings that make redelivery quick enough for a test: an event a dead consumer held is
#: reclaimed after 1.5 s, a batch task runs at most 0.6 s.
FAST = {
    "EVOMEM_CLAIM_IDLE_MS": "1500",
    "EVOMEM_BATCH_TIME_LIMIT_S": "1.2",
    "EVOMEM_VISIBILITY_TIMEOUT_S": "8",
    "EVOMEM_PUMP_INTERVAL_S": "0.1",
    "EVOMEM_BATCH_SIZE": "40",
    "EVOMEM_BATCH_WAIT_MS": "50",
    "EVOMEM_ARCHIVE_POLICY": "immediate",
}


def wait_for(condition: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Workers:
    """``evomem worker`` processes, each in its own process group so a test can kill it whole."""

    def __init__(self, redis_url: str, log_dir: Path, extra_env: dict[str, str] | None = None) -> None:
        self.env = {**os.environ, **FAST, "EVOMEM_REDIS_URL": redis_url, **(extra_env or {})}
        self.env.pop("EVOMEM_CONSUMER_NAME", None)
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0

    def start(self, n: int = 1, concurrency: int = 1) -> None:
        for _ in range(n):
            with open(self.log_dir / f"worker-{self.started}.log", "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "evomem.cli",
                            "--log-level",
                            "INFO",
                            "worker",
                            "-c",
                            str(concurrency),
                        ],
                        env=self.env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            self.started += 1

    def children(self, proc: subprocess.Popen[bytes]) -> list[int]:
        try:
            out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False)
        except FileNotFoundError:
            return []
        return [int(p) for p in out.stdout.split()]

    def kill_mid_batch(self, client: redis.Redis, rng: random.Random, timeout: float = 5.0) -> int:
        """SIGKILL a process while it holds events it has read and not acked (consumer names are
        host:pid); returns how many it held, 0 if no process was caught mid-batch in time."""
        mine = {p.pid for p in self.procs} | {c for p in self.procs for c in self.children(p)}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = [
                (c["name"].decode() if isinstance(c["name"], bytes) else c["name"], int(c["pending"]))
                for c in client.xinfo_consumers("em:events", "consolidators")
                if int(c["pending"]) > 0
            ]
            for name, pending in busy:
                pid = int(name.rsplit(":", 1)[1])
                if pid in mine:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    return pending
            time.sleep(0.002)
        return 0

    def kill_one(self, rng: random.Random) -> str:
        """SIGKILL a pool process (Celery replaces it) or a whole worker (a new one is started)."""
        proc = rng.choice([p for p in self.procs if p.poll() is None])
        kids = self.children(proc)
        if kids and rng.random() < 0.7:
            with contextlib.suppress(ProcessLookupError):  # it died since the listing (an earlier kill)
                os.kill(rng.choice(kids), signal.SIGKILL)
            return "child"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.procs.remove(proc)
        self.start(1)
        return "worker"

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.log_dir.glob("worker-*.log"))
        )


def event(namespace: str, query: str, status: str, **fields: Any) -> TaskEvent:
    return TaskEvent(namespace=namespace, query=query, status=status, **fields)  # type: ignore[arg-type]


def serial_model(events: Iterable[TaskEvent], settings: Settings) -> InMemoryGraphStore:
    """The same events applied once each, in order, with no stream, no workers and no faults."""
    store = InMemoryGraphStore()
    for e in events:
        retrieved = list(dict.fromkeys([*e.retrieved_insight_ids, *e.insight_feedback]))
        nodes = store.insights(retrieved)
        (decision,) = controllers.decide(
            [DecisionInput(e, tuple(nodes[i] for i in retrieved if i in nodes), settings.allowed_operations)],
            RuleController(),
        )
        store.apply(
            plan_edits(
                e,
                decision,
                retrieved=retrieved,
                similar=None,
                allowed_operations=settings.allowed_operations,
                archive_policy=settings.archive_policy,
                archive_ratio=settings.archive_ratio,
                at=utcnow(),
            )
        )
    return store


def graph_state(store: Any, namespace: str) -> dict[str, Any]:
    """What must agree between the pipeline and the serial model (order-free by construction)."""
    ids = sorted(store.insight_ids(namespace))
    nodes = store.insights(ids)
    return {
        "insights": {
            i: (n.text, n.state, sorted(n.positive), sorted(n.negative), n.version) for i, n in nodes.items()
        },
        "queries": sorted(store.query_ids(namespace)),
    }


def applied_count(client: redis.Redis) -> int:
    return sum(1 for _ in client.scan_iter(match="em:{*}:applied:*", count=1000))


def xadd_events(client: redis.Redis, events: Iterable[TaskEvent]) -> None:
    pipe = client.pipeline(transaction=False)
    for e in events:
        pipe.xadd("em:events", {"event": e.model_dump_json()})
    pipe.execute()


def hot_events(
    rng: random.Random, namespace: str, hot: list[str], n: int, proposals: float = 0.1
) -> list[TaskEvent]:
    """Events that judge random subsets of a few hot insights, with contradicting verdicts, and
    sometimes propose a new insight with a unique text. Under the immediate policy, without REVISE,
    their final effect does not depend on the order they are applied in."""
    out = []
    for i in range(n):
        named = rng.sample(hot, rng.randint(1, 3))
        verdicts = {h: rng.choice(["helpful", "helpful", "harmful"]) for h in named}
        proposed = (
            f"Lesson {uuid.UUID(int=rng.getrandbits(128))} learned on task {i}."
            if rng.random() < proposals
            else None
        )
        out.append(
            event(
                namespace,
                f"task {i}: verify claim {rng.randint(0, 10**6)}",
                rng.choice(["resolved", "failed"]),
                insight_feedback=verdicts,
                proposed_insight=proposed,
            )
        )
    return out


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)[:4000]
