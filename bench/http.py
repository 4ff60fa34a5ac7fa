"""evomem bench_http: the retrieval service under load. POST /v1/retrieve driven from a separate process
over loopback (keep-alive connections, concurrency 1, 16, 64), the same retrieve() in process beside it,
a scale curve of in-process retrieve() over the number of insights, and a profile of one request.
Datasets are bench.py's, loaded through the real write path on the embedded stack. Figures are printed
and merged under "http" and "scale" in bench/results.json; bench/README.md says how to read them."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import logging
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from pydantic import SecretStr

from bench import common, scale_service
from bench import retrieval as bench
from evomem import Memory, keys
from evomem.adapters.redis.connection import EmbeddedRedis
from evomem.errors import TransientError
from evomem.ops.progress import add_flag, wanted
from evomem.pipeline.retrieve import STAGES as RETRIEVE_STAGES
from evomem.service.server import EvomemHTTPServer, build_server
from evomem.settings import Settings
from evomem.testing.serve import service_process

DEFAULT_QUERIES = 100_000
DEFAULT_INSIGHTS = 20_000
DEFAULT_CONCURRENCY = (1, 16, 64)
DEFAULT_SCALE = (10_000, 100_000, 1_000_000)
#: Query nodes in every dataset of the scale curve: the headline's, so that only the insights vary.
DEFAULT_SCALE_QUERIES = 100_000
VARIANTS = ("shipped", "current", "workers", "baseline")
HTTP_KEY, SCALE_KEY = "http", "scale"
RETRIEVE_PATH = "/v1/retrieve"
_TASK_SEED_OFFSET = 7919  # the retrieval benchmark's: its timed tasks come from the same generator seed


@dataclass(frozen=True)
class Plan:
    """What one run measures; ``--quick`` shrinks every count."""

    queries: int
    insights: int
    concurrency: tuple[int, ...]
    requests: int
    warmup: int
    level_seconds: float
    profile_requests: int
    scale: tuple[int, ...]
    scale_queries: int
    scale_iterations: int
    scale_budget_s: float
    variants: tuple[str, ...]
    connect_burst: int
    serve_workers: int = 2
    settings: tuple[tuple[str, str], ...] = ()
    """``--set`` FIELD=VALUE pairs: the Settings of every memory and server the run starts."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queries", type=int, default=DEFAULT_QUERIES, help="query nodes (default: %(default)s)"
    )
    parser.add_argument(
        "--insights", type=int, default=DEFAULT_INSIGHTS, help="insights (default: %(default)s)"
    )
    parser.add_argument(
        "--concurrency",
        default=",".join(map(str, DEFAULT_CONCURRENCY)),
        help="connections (HTTP) and threads (in process) at each level (default: %(default)s)",
    )
    parser.add_argument(
        "--requests", type=int, default=2000, help="timed requests per level and mode (default: %(default)s)"
    )
    parser.add_argument(
        "--warmup", type=int, default=100, help="untimed requests per level (default: %(default)s)"
    )
    parser.add_argument(
        "--level-seconds",
        type=float,
        default=30.0,
        help="a level stops after this long even if --requests are not all done (default: %(default)s)",
    )
    parser.add_argument(
        "--profile-requests",
        type=int,
        default=300,
        help="requests in the one-request profile (default: %(default)s)",
    )
    parser.add_argument(
        "--variants",
        default="shipped",
        help="shipped: the service in this process (its stages are profiled); current: `evomem serve` "
        "of this tree in its own process; workers: `evomem serve --workers N` of this tree (N: "
        "--serve-workers); baseline: `evomem serve` of the commit --baseline names, for a "
        "before/after comparison in one run (default: %(default)s)",
    )
    parser.add_argument(
        "--serve-workers",
        type=int,
        default=2,
        help="processes of the `workers` variant (default: %(default)s)",
    )
    parser.add_argument(
        "--skip-http",
        action="store_true",
        help="only the scale curve: no HTTP levels (the last ones stay in the results file)",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="REF",
        help="a commit of this repository whose server the `baseline` variant runs (needs git)",
    )
    parser.add_argument(
        "--scale",
        default=",".join(map(str, DEFAULT_SCALE)),
        help="insight counts of the scale curve; empty: no curve (default: %(default)s)",
    )
    parser.add_argument(
        "--scale-queries",
        type=int,
        default=DEFAULT_SCALE_QUERIES,
        help="query nodes in every dataset of the curve (default: %(default)s)",
    )
    parser.add_argument(
        "--scale-iterations",
        type=int,
        default=1000,
        help="timed retrieve() calls per point (default: %(default)s)",
    )
    parser.add_argument(
        "--scale-budget-s",
        type=float,
        default=900.0,
        help="skip a point whose load, predicted from the smaller points, would take longer "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--connect-burst",
        type=int,
        default=64,
        help="also time this many connections opened back to back; 0: no (default: %(default)s)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a Settings field for every memory and server process of the run, the baseline's too "
        "(as EVOMEM_FIELD; a commit that has no such field ignores it), e.g. evidence_search=0",
    )
    parser.add_argument(
        "--out", type=Path, default=common.DEFAULT_OUT, help="results file (default: %(default)s)"
    )
    parser.add_argument(
        "--results-key",
        default=HTTP_KEY,
        help="the key of the results file the HTTP figures go under, e.g. http_aligned for a run with "
        "--set that must not replace the default configuration's (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=7, help="dataset seed (default: %(default)s)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke test, under 30 s: tiny datasets and counts"
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="where the stores go (default: a temp dir)"
    )
    add_flag(parser)  # --progress / --no-progress (default: only on a terminal)


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(
            int(s.replace("_", "").replace("k", "000").replace("M", "000000"))
            for s in text.split(",")
            if s.strip()
        )
    except ValueError:
        raise SystemExit(f"{what}: not a list of integers: {text!r}") from None


#: Settings every process of a run gets from the run itself (its stores, tokens and ports).
_RUN_OWNS = frozenset(
    {"data_dir", "redis_url", "qdrant_url", "url", "token", "tokens", "http_port", "http_workers"}
)


def make_plan(args: argparse.Namespace) -> Plan:
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    if not variants or set(variants) - set(VARIANTS):
        raise SystemExit(f"--variants: a list of {', '.join(VARIANTS)}")
    settings = common.settings_overrides(args.set)
    if reserved := {f for f, _ in settings} & _RUN_OWNS:
        raise SystemExit(f"--set {', '.join(sorted(reserved))}: the benchmark sets these itself")
    if args.quick:
        return Plan(
            queries=2_000,
            insights=1_000,
            concurrency=(1, 16, 64),
            requests=60,
            warmup=10,
            level_seconds=3.0,
            profile_requests=40,
            scale=(500, 1_000, 2_000),
            scale_queries=1_000,
            scale_iterations=60,
            scale_budget_s=args.scale_budget_s,
            variants=variants,
            connect_burst=0,
            serve_workers=args.serve_workers,
            settings=settings,
        )
    concurrency = _ints(args.concurrency, "--concurrency")
    if not concurrency or min(concurrency) < 1 or min(args.requests, args.queries, args.insights) < 1:
        raise SystemExit("--concurrency, --requests, --queries and --insights must be positive")
    return Plan(
        queries=args.queries,
        insights=args.insights,
        concurrency=concurrency,
        requests=args.requests,
        warmup=args.warmup,
        level_seconds=args.level_seconds,
        profile_requests=args.profile_requests,
        scale=_ints(args.scale, "--scale"),
        scale_queries=args.scale_queries,
        scale_iterations=args.scale_iterations,
        scale_budget_s=args.scale_budget_s,
        variants=variants,
        connect_burst=args.connect_burst,
        serve_workers=args.serve_workers,
        settings=settings,
    )


# --------------------------------------------------------------------------------------------------
# Tasks, tokens, statistics.

Task = tuple[str, str]  # (namespace, text)


class Tasks:
    """Distinct tasks from another seed of the dataset's generator, handed out in order, so that no
    two timed calls of a run share a text."""

    def __init__(self, seed: int, n: int) -> None:
        self._tasks = bench.distinct_tasks(seed, n)
        self._next = 0

    def take(self, n: int) -> list[Task]:
        out = self._tasks[self._next : self._next + n]
        self._next += n
        if len(out) < n:  # only if the generator ran out of distinct texts: repeat rather than fail
            out += [self._tasks[i % len(self._tasks)] for i in range(n - len(out))]
        return out


def tokens_for(namespaces: Sequence[str]) -> dict[str, str]:
    """One bearer token per namespace, as tenants have: every request is authenticated."""
    return {ns: f"bench-{ns}-token" for ns in namespaces}


def token_spec(tokens: dict[str, str]) -> str:
    return ";".join(f"{tok}={ns}" for ns, tok in tokens.items())


def latency_stats(samples_ns: Sequence[int], elapsed_s: float) -> dict[str, float]:
    out: dict[str, float] = dict(common.summarise(samples_ns)) if samples_ns else {}
    out["requests"] = len(samples_ns)
    out["qps"] = round(len(samples_ns) / elapsed_s, 1) if elapsed_s > 0 else 0.0
    return out


# --------------------------------------------------------------------------------------------------
# The load generator: a separate process, asyncio streams, one kept-alive connection per unit of
# concurrency, closed loop (each connection sends its next request when the previous answer is in).


def request_bytes(host: str, port: int, task: Task, token: str) -> bytes:
    ns, text = task
    body = json.dumps({"query": text, "namespace": ns}).encode()
    head = (
        f"POST {RETRIEVE_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


@dataclass
class _Phase:
    latencies_ns: list[int] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    served: int = 0
    elapsed_s: float = 0.0
    cpu_s: float = 0.0


async def _phase(
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]],
    requests: list[bytes],
    deadline: float | None,
) -> _Phase:
    result = _Phase()
    pending = iter(requests)
    clock = time.perf_counter_ns

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for req in pending:  # the shared iterator: whichever connection is free takes the next request
            t0 = clock()
            writer.write(req)
            status, body = await _read_response(reader)
            result.latencies_ns.append(clock() - t0)
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status == 200:
                result.served += len(json.loads(body)["insights"])
            if deadline is not None and time.perf_counter() > deadline:
                return

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(connection(r, w) for r, w in conns))
    result.elapsed_s, result.cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    return result


async def _drive(job: dict[str, Any]) -> dict[str, Any]:
    host, port, c = job["host"], int(job["port"]), int(job["concurrency"])
    if job.get("kind") == "connect_burst":
        return await _connect_burst(host, port, c)
    tokens: dict[str, str] = job["tokens"]
    reqs = [request_bytes(host, port, (ns, text), tokens[ns]) for ns, text in job["tasks"]]
    warm, timed = reqs[: job["warmup"]] or reqs[:1], reqs[job["warmup"] :]
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        # ramp up one connection at a time, each answering one warm-up request before the next
        # connects: the server's accept queue (listen backlog 5) never overflows (see connect_burst)
        for i in range(c):
            conns.append(await asyncio.open_connection(host, port))  # asyncio sets TCP_NODELAY
            await _phase(conns[-1:], [warm[i % len(warm)]], None)
        await _phase(conns, warm, None)
        deadline = time.perf_counter() + float(job["max_seconds"])
        res = await _phase(conns, timed, deadline)
    finally:
        for _, w in conns:
            w.close()
    return {
        "latencies_ns": res.latencies_ns,
        "statuses": res.statuses,
        "served": res.served,
        "elapsed_s": res.elapsed_s,
        "client_cpu_s": res.cpu_s,
        "connections": c,
    }


async def _connect_burst(host: str, port: int, c: int) -> dict[str, Any]:
    """``c`` connections opened back to back, as a fleet of agents starting at once would: the time
    each takes to be established."""
    times: list[float] = []
    conns = []
    t0 = time.perf_counter()
    for _ in range(c):
        t = time.perf_counter()
        conns.append(await asyncio.open_connection(host, port))
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - t0
    for _, w in conns:
        w.close()
    return {
        "connections": c,
        "total_s": round(total, 3),
        "slowest_s": round(max(times), 3),
        "over_0_5_s": sum(t > 0.5 for t in times),
    }


def loadgen_main() -> int:
    """The load generator process: one job a line on stdin (JSON), its samples a line on stdout."""
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(asyncio.run(_drive(json.loads(line)))) + "\n")
            sys.stdout.flush()
    return 0


class LoadGenerator:
    """The load generator process, started once and given one job per level."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = tokens
        env = common.child_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.http", "--loadgen"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def run(
        self, target: Target, tasks: list[Task], *, concurrency: int, warmup: int, max_seconds: float
    ) -> dict[str, Any]:
        job = {
            "host": target.host,
            "port": target.port,
            "concurrency": concurrency,
            "warmup": warmup,
            "max_seconds": max_seconds,
            "tokens": self.tokens,
            "tasks": tasks,
        }
        out = self._ask(job)
        out["statuses"] = {int(k): v for k, v in out["statuses"].items()}
        return out

    def _ask(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the load generator exited ({self.proc.wait()}); its stderr is above")
        out: dict[str, Any] = json.loads(line)
        return out

    def connect_burst(self, target: Target, concurrency: int) -> dict[str, Any]:
        job = {"kind": "connect_burst", "host": target.host, "port": target.port, "concurrency": concurrency}
        return self._ask(job)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# --------------------------------------------------------------------------------------------------
# The servers: "shipped" is the service of evomem/service in this process, in a thread (its stages
# can be timed); "current" and "baseline" are `evomem serve` processes of this source tree and of
# an older commit (--baseline REF), each on its own copy of the Qdrant store, started and warmed the
# same way, so that the two compare like for like in one run.


class Target:
    """A server the load generator can drive, and the CPU time of the process that serves it."""

    def __init__(self, host: str, port: int, pid: int | None = None) -> None:
        self.host, self.port, self.pid = host, port, pid

    def cpu_s(self) -> float:
        """CPU time of the serving process and of the processes it started (``--workers``)."""
        if self.pid is None:
            return time.process_time()
        return sum(_cpu_s(pid) for pid in (self.pid, *_children(self.pid)))


def _cpu_s(pid: int) -> float:
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


@contextlib.contextmanager
def running_server(settings: Settings, mem: Memory) -> Iterator[EvomemHTTPServer]:
    server = build_server(settings, mem.runtime)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="bench-http-server")
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def baseline_tree(ref: str, into: Path) -> Path:
    """The ``evomem`` and ``schemas`` packages of commit ``ref`` of this repository, under ``into``."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", ref, "evomem", "schemas"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"--baseline {ref}: git archive failed: {archive.stderr.decode().strip()}")
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


@contextlib.contextmanager
def server_process(
    name: str,
    source: Path,
    settings: Settings,
    mem: Memory,
    root: Path,
    tokens: dict[str, str],
    workers: int = 1,
    overrides: Sequence[tuple[str, str]] = (),
) -> Iterator[Target]:
    """``serve()`` of the tree at ``source`` in its own process, on a copy of the loaded Qdrant store
    (the embedded store is held by one process) and the same Redis. Another commit's tree may keep
    its read model in another layout (which it refuses to open): it builds its own from the change
    feed, and is driven once it has caught up."""
    assert mem.projector is not None
    data = root / f"serve-{name}"
    cursor_key = keys.projector_cursor(f"edge:{(data / 'qdrant').resolve()}")
    rebuild = source.resolve() != Path(__file__).resolve().parents[1]
    if rebuild:
        (data / "qdrant").mkdir(parents=True)
        mem.redis.delete(cursor_key)
    else:
        shutil.copytree(settings.data_dir / "qdrant", data / "qdrant")
        # the copy is in step with the feed: start its projector where the original's is
        mem.redis.set(cursor_key, mem.projector.cursor)
    env = common.child_env(overrides)
    socket_path = mem.redis.connection_pool.connection_kwargs.get("path")
    env.update(
        PYTHONPATH=str(source),
        EVOMEM_DATA_DIR=str(data),
        EVOMEM_REDIS_URL=f"unix://{socket_path}" if socket_path else str(settings.redis_url),
        EVOMEM_TOKENS=token_spec(tokens),
        EVOMEM_HTTP_PORT="0",
    )
    code = "from evomem.settings import Settings; from evomem.service.server import serve; serve(Settings())"
    if workers > 1:  # the supervisor copies the store for its other processes itself
        env["EVOMEM_HTTP_WORKERS"] = str(workers)
        code = (
            "from evomem.settings import Settings; from evomem.service.processes import serve_workers; "
            "serve_workers(Settings())"
        )
    try:
        with service_process(
            ["-c", code], env, cwd=data, what=f"the {name} server", stop_timeout_s=30
        ) as service:
            if rebuild:
                _caught_up(mem, cursor_key, service.proc)
            yield Target(service.host, service.port, service.proc.pid)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _stream_id(raw: bytes | str | None) -> tuple[int, int]:
    text = raw.decode() if isinstance(raw, bytes) else (raw or "0-0")
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _caught_up(mem: Memory, cursor_key: str, proc: subprocess.Popen[str], limit_s: float = 3600) -> None:
    """Until the projector of a server that builds its read model from the feed has applied all of
    it (its cursor, which it keeps in Redis, at the feed's last entry)."""
    last = _stream_id(mem.redis.xinfo_stream(keys.CHANGES_STREAM)["last-generated-id"])
    deadline = time.monotonic() + limit_s
    while _stream_id(mem.redis.get(cursor_key)) < last:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server on its own read model did not catch up ({proc.poll()})")
        time.sleep(0.5)  # the projector applies the feed in batches; its cursor is only in Redis


def measure_http(
    target: Target,
    gen: LoadGenerator,
    variant: str,
    tasks: list[Task],
    *,
    concurrency: int,
    warmup: int,
    max_seconds: float,
) -> dict[str, Any]:
    gc.collect()
    cpu0 = target.cpu_s()
    raw = gen.run(target, tasks, concurrency=concurrency, warmup=warmup, max_seconds=max_seconds)
    server_cpu = target.cpu_s() - cpu0  # the serving process: loop, worker threads, projector, records
    lat: list[int] = raw["latencies_ns"]
    ok = raw["statuses"].get(200, 0)
    out = {
        "mode": "http",
        "variant": variant,
        "concurrency": concurrency,
        "warmup": warmup,
        **latency_stats(lat, raw["elapsed_s"]),
        "errors": sum(n for s, n in raw["statuses"].items() if s != 200),
        "served_mean": round(raw["served"] / ok, 2) if ok else 0.0,
        "elapsed_s": round(raw["elapsed_s"], 3),
        "server_cpu_ms_per_request": round(server_cpu * 1000 / (len(lat) + warmup + concurrency), 3),
        "client_cpu_ms_per_request": round(raw["client_cpu_s"] * 1000 / max(len(lat), 1), 3),
        "stopped_by_time": len(lat) < len(tasks) - warmup,
    }
    return out


def measure_in_process(
    mem: Memory, tasks: list[Task], *, concurrency: int, warmup: int, max_seconds: float
) -> dict[str, Any]:
    """The same calls without HTTP: ``Memory.retrieve`` from ``concurrency`` threads, closed loop."""
    for ns, text in tasks[:warmup]:
        mem.retrieve(text, ns)
    timed = tasks[warmup:]
    lock = threading.Lock()
    position = 0
    samples: list[int] = []
    served = 0
    clock = time.perf_counter_ns
    deadline = time.perf_counter() + max_seconds

    def worker() -> None:
        nonlocal position, served
        mine: list[int] = []
        n_served = 0
        while time.perf_counter() < deadline:
            with lock:
                i, position = position, position + 1
            if i >= len(timed):
                break
            ns, text = timed[i]
            t0 = clock()
            r = mem.retrieve(text, ns)
            mine.append(clock() - t0)
            n_served += len(r.insights)
        with lock:
            samples.extend(mine)
            served += n_served

    gc.collect()
    cpu0, t0 = time.process_time(), time.perf_counter()
    if concurrency == 1:
        worker()
    else:
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "mode": "in_process",
        "variant": "-",
        "concurrency": concurrency,
        "warmup": warmup,
        **latency_stats(samples, elapsed),
        "errors": 0,
        "served_mean": round(served / len(samples), 2) if samples else 0.0,
        "elapsed_s": round(elapsed, 3),
        "server_cpu_ms_per_request": round(cpu * 1000 / max(len(samples), 1), 3),
        "client_cpu_ms_per_request": None,
        "stopped_by_time": len(samples) < len(timed),
    }


# --------------------------------------------------------------------------------------------------
# The profile of one request: the stage timings the service writes in each request's canonical log
# line (``request.served``: its own stages and the retriever's), read by a logging handler and paired
# with what the client saw for the same request; then a cProfile of the event loop.

SERVER_STAGES = (
    "auth",
    "read_body",
    "validate",
    "embed",
    "similar",
    "evidence",
    "expand",
    "candidates",
    "rank",
    "retrieve_other",
    "serialise",
    "thread_hop",
    "server_other",
)
_RETRIEVE_STEPS = RETRIEVE_STAGES


class RequestLines(logging.Handler):
    """Collects the ``request.served`` lines of the service (``evomem.service`` at INFO while it is
    attached); ``on_line`` is told of each, on the event loop, before its answer is sent."""

    def __init__(self, on_line: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, Any]] = []
        self.on_line = on_line

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() != "request.served":
            return
        line = {k: v for k, v in record.__dict__.items() if k in ("route", "status") or k.endswith("_ms")}
        self.lines.append(line)
        if self.on_line is not None:
            self.on_line(line)


@contextlib.contextmanager
def request_lines(on_line: Callable[[dict[str, Any]], None] | None = None) -> Iterator[RequestLines]:
    logger = logging.getLogger("evomem.service")
    handler, level = RequestLines(on_line), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _stage_rows(lines: list[dict[str, Any]]) -> list[dict[str, int]]:
    """Canonical lines → the SERVER_STAGES (ns), each request's stages summing to its total."""
    rows = []
    for line in lines:
        r = {k[: -len("_ms")]: round(float(v) * 1e6) for k, v in line.items() if k.endswith("_ms")}
        row = {k: r.get(k, 0) for k in ("auth", "read_body", "validate", "serialise")}
        for k in _RETRIEVE_STEPS:
            row[k] = r.get(k, 0)
        row["retrieve_other"] = r.get("retrieve", 0) - sum(r.get(k, 0) for k in _RETRIEVE_STEPS)
        row["thread_hop"] = r.get("work", 0) - sum(r.get(k, 0) for k in ("validate", "retrieve", "serialise"))
        row["server_total"] = r.get("total", 0)
        row["server_other"] = row["server_total"] - sum(row[k] for k in SERVER_STAGES if k != "server_other")
        rows.append(row)
    return rows


def profile_requests(
    server: EvomemHTTPServer, gen: LoadGenerator, variant: str, tasks: list[Task], warmup: int
) -> dict[str, Any]:
    """One request at a time from the load generator; each request's server steps beside its latency."""
    with request_lines() as lines:
        raw = gen.run(_target(server), tasks, concurrency=1, warmup=warmup, max_seconds=120)
    # a line is written before its answer is sent: every one is in by the time the client is done
    rows = _stage_rows([r for r in lines.lines if r["route"] == "retrieve"][warmup + 1 :])
    client: list[int] = raw["latencies_ns"]
    if len(rows) != len(client):  # one record per request, in order, or the pairing below is off
        raise RuntimeError(f"{len(rows)} server records for {len(client)} timed requests")
    n = len(rows)
    for row, c in zip(rows, client, strict=True):
        row["client_total"] = c
        row["wire_and_client"] = c - row["server_total"]
    keys_ = (*SERVER_STAGES, "server_total", "wire_and_client", "client_total")
    mean_total = float(np.mean([r["client_total"] for r in rows])) if rows else 0.0
    return {
        "variant": variant,
        "requests": n,
        "stages_p50_ms": {k: round(float(np.percentile([r[k] for r in rows], 50)) / 1e6, 4) for k in keys_}
        if rows
        else {},
        "stages_mean_ms": {k: round(float(np.mean([r[k] for r in rows])) / 1e6, 4) for k in keys_}
        if rows
        else {},
        "stages_share_of_mean": {
            k: round(float(np.mean([r[k] for r in rows])) / mean_total, 3)
            for k in (*SERVER_STAGES, "wire_and_client")
        }
        if rows and mean_total
        else {},
    }


#: cProfile own time, grouped by where a function lives (substring of "file:function").
PROFILE_GROUPS = (
    (
        "uvicorn, httptools, starlette, anyio: HTTP and dispatch",
        ("uvicorn", "httptools", "starlette", "anyio"),
    ),
    ("asyncio event loop (not waiting)", ("asyncio/",)),
    ("pydantic: validate the body, build and dump the response", ("pydantic",)),
    ("Qdrant Edge (the engine, in process)", ("EdgeShard", "qdrant")),
    ("index adapter: point ids, candidate cache", ("evomem/adapters/qdrant", "uuid")),
    ("redis-py: commands, pipeline, replies", ("redis/", "hiredis")),
    ("socket I/O: Redis round trips, the response write", ("_socket.socket", "socket.py", "selectors")),
    ("embedding", ("evomem/core/hashing", "crc32", "Counter", "collections/__init__")),
    ("ranking (Eq. 7-10), text relevance", ("evomem/core/retrieval", "evomem/pipeline/retrieve")),
    ("evomem service layer", ("evomem/service",)),
    ("threads, locks, futures: hand-offs", ("threading", "concurrent/futures", "_thread")),
)
#: Where the event loop waits for the network: not time spent on a request.
_IDLE = ("select.epoll", "epoll", "_lsprof")


def cprofile_requests(
    server: EvomemHTTPServer,
    gen: LoadGenerator,
    variant: str,
    tasks: list[Task],
    warmup: int,
    top: int = 22,
) -> dict[str, Any]:
    """A cProfile of the event loop thread, which parses, dispatches, runs the retrieval (the hot
    routes run on the loop) and answers, after the warm-up requests; the loop's waits left out."""
    loop_prof = cProfile.Profile()
    seen = {"n": 0}
    n = len(tasks) - warmup

    def on_line(_: dict[str, Any]) -> None:  # on the event loop, as each answer is ready
        seen["n"] += 1
        if seen["n"] == warmup + 1:
            loop_prof.enable()
        elif seen["n"] == warmup + 1 + n:
            loop_prof.disable()

    try:
        with request_lines(on_line):
            raw = gen.run(_target(server), tasks, concurrency=1, warmup=warmup, max_seconds=120)
    finally:
        with contextlib.suppress(Exception):
            loop_prof.disable()
    stats = pstats.Stats(loop_prof)
    entries: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    total = 0.0
    groups: dict[str, float] = {}
    for (filename, _, func), v in entries.items():
        where = f"{filename}:{func}"
        if any(i in where for i in _IDLE):
            continue
        total += v[2]
        name = next((g for g, needles in PROFILE_GROUPS if any(s in where for s in needles)), "other Python")
        groups[name] = groups.get(name, 0.0) + v[2]
    buf = io.StringIO()
    printed = pstats.Stats(loop_prof, stream=buf)
    printed.strip_dirs().sort_stats("tottime").print_stats(top)
    return {
        "variant": variant,
        "requests": n,
        "client_p50_ms": round(float(np.percentile(raw["latencies_ns"], 50)) / 1e6, 4),
        "profiled_ms_per_request": round(total * 1000 / max(n, 1), 4),
        "groups_ms_per_request": {
            g: round(s * 1000 / max(n, 1), 4) for g, s in sorted(groups.items(), key=lambda kv: -kv[1])
        },
        "text": buf.getvalue(),
    }


def _target(server: EvomemHTTPServer) -> Target:
    host, port = server.server_address
    return Target(host, port)


# --------------------------------------------------------------------------------------------------
# The scale curve: in-process retrieve() p50 over the number of insights.


@contextlib.contextmanager
def reopened(settings: Settings, stats: bench.LoadStats) -> Iterator[tuple[Memory, bool]]:
    """The loaded memory opened again, as a restarted service opens it (timed as ``reopen_s``). The
    AOF replay of a large store can outlast the embedded redis-server's start timeout (``Memory.open``
    then raises): the replay goes on in the daemonized server, so wait for it, say so (the flag
    yielded beside the memory), and stop the server after."""
    t0 = time.perf_counter()
    redis = EmbeddedRedis(settings.data_dir)
    try:
        mem = Memory.open_local(settings)
        waited = False
    except TransientError:
        waited = True
        deadline = time.monotonic() + 900
        while not redis.running():
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        mem = Memory.open_local(settings)
    stats.reopen_s = time.perf_counter() - t0
    try:
        yield mem, waited
    finally:
        mem.close()
        if waited:
            redis.stop()  # started by the failed open, so no memory owns it


def scale_point(
    root: Path, n_insights: int, plan: Plan, *, seed: int, progress: bool, err: TextIO
) -> dict[str, Any]:
    data_dir = root / f"scale-{n_insights}"
    shutil.rmtree(data_dir, ignore_errors=True)
    settings = common.embedded_settings(data_dir, **dict(plan.settings))
    t0 = time.perf_counter()
    n_queries = plan.scale_queries
    stats = bench.build_dataset(settings, n_queries, n_insights, seed=seed, progress=progress, out=err)
    build_s = time.perf_counter() - t0
    w, n = plan.warmup, plan.scale_iterations
    tasks = bench.distinct_tasks(seed + _TASK_SEED_OFFSET, 2 * (w + n) + 300)
    cold_tasks, service_tasks = tasks[w + n : w + n + 300], tasks[w + n + 300 :]
    try:
        with reopened(settings, stats) as (mem, restart_waited):
            # the word-set cache, as a following process warms it at start (EVOMEM_TEXT_CACHE_WARM)
            t1 = time.perf_counter()
            warmed = mem.retriever.warm() if mem.settings.text_cache_warm else 0
            warm_s = time.perf_counter() - t1
            gc.collect()

            def call(i: int) -> None:
                ns, text = tasks[i]
                mem.retrieve(text, ns)

            # first pass: right after the restart (and the warm-up), tasks not seen before; repeat
            # pass: the same tasks again (what the process cached on the first one)
            first = common.time_calls(call, w, n)
            repeat = common.time_calls(lambda i: call(w + i), 0, n)
            cold = bench.stage_breakdown(mem, cold_tasks)  # tasks not seen before
            recall = scale_service.exact_recall(mem, cold_tasks)
            warm = bench.stage_breakdown(mem, tasks[w : w + 300])  # tasks of the passes above
            assert mem.index is not None
            facts = {
                "index_insights": mem.index.count("insight"),
                "index_queries": mem.index.count("query"),
                "rss_mb_bench_process": _rss_mb(),
                "warm_s": round(warm_s, 3),
                "text_cache_warmed": warmed,
            }
        service = _service_point(settings, service_tasks, w, plan.settings)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "n_queries": plan.scale_queries,
        "n_insights": n_insights,
        "iterations": n,
        "warmup": w,
        **common.summarise(first),
        "repeat": common.summarise(repeat),
        "build_s": round(build_s, 1),
        "reopen_outlasted_redis_start_timeout": restart_waited,
        "dataset": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(stats).items()},
        **facts,
        "recall_vs_exact": recall,
        "service": service,
        # what deploy/SIZING.md reads: the retrieval process's own resident memory
        "rss_mb_after": service["memory_mb"].get("VmRSS"),
        "breakdown": cold,
        "breakdown_repeat": warm,
    }


def _service_point(
    settings: Settings, tasks: list[Task], warmup: int, overrides: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    tokens = tokens_for(list(bench.NAMESPACE_WEIGHTS))
    gen = LoadGenerator(tokens)

    def drive(host: str, port: int, level: list[Task], w: int) -> dict[str, Any]:
        return gen.run(Target(host, port), level, concurrency=1, warmup=w, max_seconds=600)

    try:
        return scale_service.service_point(settings, tasks, warmup, tokens, drive, overrides)
    finally:
        gen.close()


def _rss_mb() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def predicted_load_s(done: list[dict[str, Any]], n: int) -> float | None:
    """Load time of a point of ``n`` insights, by a line through the points measured so far."""
    if not done:
        return None
    xs = [float(p["n_insights"]) for p in done]
    ys = [float(p["build_s"]) for p in done]
    if len(done) == 1:
        return ys[0] * n / xs[0]
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(slope * n + intercept)


# --------------------------------------------------------------------------------------------------
# Output.


def format_levels(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'mode':<11}{'variant':<9}{'conc':>5}{'reqs':>7}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
        f"{'mean ms':>9}{'QPS':>8}{'srv cpu ms/req':>16}{'errors':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['mode']:<11}{r['variant']:<9}{r['concurrency']:>5}{r['requests']:>7}"
            f"{r.get('p50_ms', 0):>9.3f}{r.get('p90_ms', 0):>9.3f}{r.get('p99_ms', 0):>9.3f}"
            f"{r.get('mean_ms', 0):>9.3f}{r['qps']:>8.1f}{r['server_cpu_ms_per_request']:>16.3f}"
            f"{r['errors']:>8}"
        )
    return "\n".join(lines)


def format_profile(p: dict[str, Any]) -> str:
    lines = [
        f"one request, {p['variant']} server, {p['requests']} requests one at a time (ms):",
        f"  {'step':<16}{'p50':>8}{'mean':>8}{'share':>8}",
    ]
    for k in (*SERVER_STAGES, "server_total", "wire_and_client", "client_total"):
        share = p["stages_share_of_mean"].get(k)
        lines.append(
            f"  {k:<16}{p['stages_p50_ms'][k]:>8.3f}{p['stages_mean_ms'][k]:>8.3f}"
            + (f"{share:>8.1%}" if share is not None else "")
        )
    return "\n".join(lines)


def format_scale(points: list[dict[str, Any]]) -> str:
    head = (
        f"{'insights':>10}{'queries':>9}{'p50 ms':>9}{'p99 ms':>9}{'rep p50':>9}{'cands':>7}"
        f"{'recall':>8}{'srv p50':>9}{'srv p99':>9}{'start s':>9}{'warm s':>8}{'RSS MB':>8}{'anon MB':>9}"
        f"{'copy s':>8}"
        f"{'load s':>8}"
    )
    lines = [head, "-" * len(head)]
    for p in points:
        if "skipped" in p:
            lines.append(f"{p['n_insights']:>10,}  skipped: {p['skipped']}")
            continue
        b, r, sv = p["breakdown"], p["repeat"], p["service"]
        mem = sv["memory_mb"]
        lines.append(
            f"{p['n_insights']:>10,}{p['n_queries']:>9,}{p['p50_ms']:>9.3f}{p['p99_ms']:>9.3f}"
            f"{r['p50_ms']:>9.3f}{b['candidates_mean']:>7.0f}{p['recall_vs_exact']['recall']:>8}"
            f"{sv['p50_ms']:>9.3f}{sv['p99_ms']:>9.3f}{sv['start_s']:>9.2f}{sv.get('warm_wait_s') or 0:>8.1f}"
            f"{mem.get('VmRSS', 0):>8.0f}"
            f"{mem.get('RssAnon', 0):>9.0f}{sv['replica_copy_s'] or 0:>8.2f}{p['build_s']:>8.1f}"
        )
    lines.append(
        "  p50/p99: in process, first pass after the restart; rep: the same tasks again; recall: served"
        " against Eq. 7-10 over Redis; srv: `evomem serve` on the store, HTTP at c=1; start: until it"
        " listens (persisted replica); warm: then until its word-set cache is warm; RSS/anon: that process"
        " after; copy: a second replica"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# The run.


def _pending_records(mem: Memory) -> int | None:
    pending = getattr(mem.retriever, "_pending", None)
    return len(pending) if isinstance(pending, set) else None


def run_http(
    root: Path, plan: Plan, *, seed: int, progress: bool, out: TextIO, err: TextIO, baseline: str | None
) -> dict[str, Any]:
    namespaces = list(bench.NAMESPACE_WEIGHTS)
    tokens = tokens_for(namespaces)
    settings = common.embedded_settings(
        root / "http", tokens=SecretStr(token_spec(tokens)), http_port=0, **dict(plan.settings)
    )
    out.write(f"[HTTP and in process: {plan.queries:,} queries, {plan.insights:,} insights]\n")
    out.flush()
    stats = bench.build_dataset(settings, plan.queries, plan.insights, seed=seed, progress=progress, out=err)
    here = Path(__file__).resolve().parents[1]
    sources = {"current": here, "workers": here}
    if "baseline" in plan.variants:
        if baseline is None:
            raise SystemExit("--variants baseline needs --baseline REF (a commit of this repository)")
        sources["baseline"] = baseline_tree(baseline, root / "baseline-src")
    try:
        with reopened(settings, stats) as (mem, restart_waited), contextlib.ExitStack() as stack:
            bench.dataset_facts(mem, stats)
            per_level = plan.warmup + plan.requests
            n_tasks = 10 * plan.warmup * (1 + len(plan.variants))
            n_tasks += len(plan.concurrency) * (1 + len(plan.variants)) * per_level
            n_tasks += 2 * (plan.profile_requests + plan.warmup) + 500
            tasks = Tasks(seed + _TASK_SEED_OFFSET, n_tasks)
            server = stack.enter_context(running_server(settings, mem))
            targets = {"shipped": _target(server)}
            for name in ("current", "workers", "baseline"):
                if name in plan.variants:
                    n_proc = plan.serve_workers if name == "workers" else 1
                    targets[name] = stack.enter_context(
                        server_process(
                            name, sources[name], settings, mem, root, tokens, n_proc, plan.settings
                        )
                    )
            gen = LoadGenerator(tokens)
            try:
                measured = _measure(mem, server, targets, gen, plan, tasks, out)
            finally:
                gen.close()
            measured["retrieval_records_pending_after_run"] = _pending_records(mem)
            measured["reopen_outlasted_redis_start_timeout"] = restart_waited
            measured["in_process_breakdown"] = bench.stage_breakdown(mem, tasks.take(min(plan.requests, 500)))
            if baseline is not None:
                measured["baseline_ref"] = baseline
    finally:
        shutil.rmtree(root / "http", ignore_errors=True)
        shutil.rmtree(root / "baseline-src", ignore_errors=True)
    return {
        "n_queries": plan.queries,
        "n_insights": plan.insights,
        "namespaces": namespaces,
        "active_insights": stats.active_insights,
        "dataset": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(stats).items()},
        **measured,
    }


def _measure(
    mem: Memory,
    server: EvomemHTTPServer,
    targets: dict[str, Target],
    gen: LoadGenerator,
    plan: Plan,
    tasks: Tasks,
    out: TextIO,
) -> dict[str, Any]:
    """Per level: in process, then each HTTP variant (close in time, so their ratios hold; the
    order of the variants turns from level to level). The profiles of one request run right after
    the lowest level, before the high-concurrency ones: c=1 latency measured after a c=64 level
    stayed ~15 % higher (bench/README.md)."""
    for ns, text in tasks.take(10 * plan.warmup):  # candidate cache and page cache, once for all
        mem.retrieve(text, ns)
    for variant in plan.variants:  # the server processes warm their own caches the same way
        if variant != "shipped":  # over a few connections: each process of `workers` gets some
            gen.run(targets[variant], tasks.take(10 * plan.warmup), concurrency=4, warmup=0, max_seconds=600)
    per_level = plan.warmup + plan.requests
    rows: list[dict[str, Any]] = []
    profiled: dict[str, Any] = {}
    for n, c in enumerate(sorted(plan.concurrency)):
        rows.append(
            measure_in_process(
                mem, tasks.take(per_level), concurrency=c, warmup=plan.warmup, max_seconds=plan.level_seconds
            )
        )
        out.write(_row_line(rows[-1]))
        variants = plan.variants if n % 2 == 0 else tuple(reversed(plan.variants))
        for variant in variants:
            level, w, seconds = tasks.take(per_level), plan.warmup, plan.level_seconds
            row = measure_http(
                targets[variant], gen, variant, level, concurrency=c, warmup=w, max_seconds=seconds
            )
            rows.append(row)
            out.write(_row_line(rows[-1]))
        out.flush()
        if not profiled:
            profiled = _profiles(server, gen, plan, tasks, out)
    burst = gen.connect_burst(targets["shipped"], plan.connect_burst) if plan.connect_burst > 0 else None
    if burst:
        out.write(
            f"  {burst['connections']} connections opened back to back: {burst['total_s']:.3f} s, slowest "
            f"{burst['slowest_s']:.3f} s, {burst['over_0_5_s']} took over 0.5 s\n"
        )
    return {"levels": rows, **profiled, "connect_burst": burst}


def _profiles(
    server: EvomemHTTPServer, gen: LoadGenerator, plan: Plan, tasks: Tasks, out: TextIO
) -> dict[str, Any]:
    """Stage timings and the cProfile of the in-thread server (the one whose stages can be seen)."""
    n = plan.profile_requests
    out.write(f"  profiling one request (shipped, {n} requests)\n")
    out.flush()
    profile = profile_requests(server, gen, "shipped", tasks.take(plan.warmup + n), plan.warmup)
    cprof = cprofile_requests(server, gen, "shipped", tasks.take(plan.warmup + n), plan.warmup)
    return {"profile": [profile], "cprofile": cprof}


def _row_line(r: dict[str, Any]) -> str:
    label = "in process" if r["mode"] == "in_process" else f"HTTP {r['variant']}"
    return (
        f"  {label:<14} c={r['concurrency']:<3} p50 {r.get('p50_ms', 0):8.3f} ms  "
        f"p99 {r.get('p99_ms', 0):8.3f} ms"
        f"  {r['qps']:7.1f} QPS  ({r['requests']} requests, {r['errors']} errors)\n"
    )


def run_scale(
    root: Path, plan: Plan, *, seed: int, progress: bool, out: TextIO, err: TextIO
) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    for n in plan.scale:
        predicted = predicted_load_s([p for p in points if "skipped" not in p], n)
        if predicted is not None and predicted > plan.scale_budget_s:
            note = f"load predicted to take {predicted:.0f} s > --scale-budget-s {plan.scale_budget_s:.0f}"
            points.append({"n_queries": plan.scale_queries, "n_insights": n, "skipped": note})
            out.write(f"[scale: {n:,} insights] skipped: {note}\n")
            continue
        out.write(f"[scale: {plan.scale_queries:,} queries, {n:,} insights]\n")
        out.flush()
        p = scale_point(root, n, plan, seed=seed, progress=progress, err=err)
        points.append(p)
        out.write(
            f"  retrieve p50 {p['p50_ms']:.3f} ms  p99 {p['p99_ms']:.3f} ms  "
            f"({p['breakdown']['candidates_mean']:.0f} candidates a call, load {p['build_s']:.0f} s)\n"
        )
        out.flush()
    return points


def run(args: argparse.Namespace) -> int:
    out: TextIO = sys.stdout
    err: TextIO = sys.stderr
    plan = make_plan(args)
    machine = common.machine_info()
    started = datetime.now(UTC)
    out.write(
        f"evomem bench_http: {machine['cores']} cores, {machine['cpu']}, python {machine['python']}, "
        f"qdrant-edge-py {machine['qdrant_edge_py']}, load average {machine['loadavg_at_start']}\n"
    )
    root = Path(tempfile.mkdtemp(prefix="evomem-bench-http-")) if args.data_dir is None else args.data_dir
    progress = wanted(args.progress, err)
    try:
        http = (
            None
            if args.skip_http
            else run_http(
                root, plan, seed=args.seed, progress=progress, out=out, err=err, baseline=args.baseline
            )
        )
        scale = run_scale(root, plan, seed=args.seed, progress=progress, out=out, err=err)
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    shared = {
        "schema": 1,
        "timestamp": started.isoformat(timespec="seconds"),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": " ".join(["python -m bench.http", *sys.argv[1:]]),
        "plan": asdict(plan),
        "quick": bool(args.quick),
        "machine": {**machine, "loadavg_at_end": list(os.getloadavg())},
    }
    measured = [p for p in scale if "skipped" not in p]
    ratio = repeat_ratio = service_ratio = None
    if len(measured) > 1:
        small, large = measured[0], measured[-1]
        ratio = _ratio(large["p50_ms"], small["p50_ms"])
        repeat_ratio = _ratio(large["repeat"]["p50_ms"], small["repeat"]["p50_ms"])
        service_ratio = _ratio(large["service"]["p50_ms"], small["service"]["p50_ms"])
    scale_targets = {
        "scale_p50_ratio_largest_to_smallest": ratio,
        "scale_repeat_p50_ratio_largest_to_smallest": repeat_ratio,
        "scale_service_p50_ratio_largest_to_smallest": service_ratio,
        "scale_largest_measured": measured[-1]["n_insights"] if measured else None,
        "scale_target_ratio": 3.0,
    }
    if http is not None:
        _report_http(args.out, args.results_key, shared, http, plan, scale_targets, out)
    if scale:  # a run without a curve (--scale "") leaves the last one in the file
        common.merge_results(
            args.out,
            SCALE_KEY,
            {
                **shared,
                "points": scale,
                "p50_ratio_largest_to_smallest": ratio,
                "repeat_p50_ratio_largest_to_smallest": repeat_ratio,
                "service_p50_ratio_largest_to_smallest": service_ratio,
            },
        )
        out.write("scale curve:\n" + format_scale(scale) + "\n\n")
        out.write(
            f"p50 largest/smallest scale point: in process {ratio}, repeat pass {repeat_ratio}, "
            f"the service process {service_ratio} (target ≤ 3)\n"
        )
    merged = [k for k, done in ((args.results_key, http is not None), (SCALE_KEY, bool(scale))) if done]
    out.write(f"merged under {', '.join(map(repr, merged)) or 'nothing'} in {args.out}\n")
    return 0


def _report_http(
    path: Path,
    key: str,
    shared: dict[str, Any],
    http: dict[str, Any],
    plan: Plan,
    scale_targets: dict[str, Any],
    out: TextIO,
) -> None:
    levels = http["levels"]
    targets: dict[str, Any] = {
        "in_process_p50_ms": _p50(levels, "in_process", "-", 1),
        "in_process_target_ms": 2.0,
        "http_p50_ms": {v: _p50(levels, "http", v, 1) for v in plan.variants},
        "http_target_ms": 5.0,
        **scale_targets,
    }
    if {"current", "workers"} <= set(plan.variants):
        top = max(plan.concurrency)
        one, many = _row(levels, "current", top), _row(levels, "workers", top)
        targets["workers"] = {
            "processes": plan.serve_workers,
            "concurrency": top,
            "qps_ratio": _ratio(many["qps"], one["qps"]) if one and many else None,
            "qps_target_ratio": 1.7,
            "p50_c1_ratio": _ratio(
                _p50(levels, "http", "workers", 1) or 0, _p50(levels, "http", "current", 1) or 0
            ),
            "p50_c1_target_ratio": 1.2,
        }
    if {"current", "baseline"} <= set(plan.variants):
        # this tree's `evomem serve` against the --baseline commit's, in the same run and settings
        qps = {}
        for c in plan.concurrency:
            now, then = _row(levels, "current", c), _row(levels, "baseline", c)
            qps[str(c)] = _ratio(now["qps"], then["qps"]) if now and then else None
        targets["baseline"] = {
            "ref": http.get("baseline_ref"),
            "settings": dict(plan.settings),
            "p50_c1_ratio": _ratio(
                _p50(levels, "http", "current", 1) or 0, _p50(levels, "http", "baseline", 1) or 0
            ),
            "p50_c1_target_ratio": 1.2,
            "qps_ratio": qps,
            "qps_target_ratio": 1.0,
        }
    common.merge_results(
        path,
        key,
        {
            **shared,
            **{k: v for k, v in http.items() if k != "cprofile"},
            "cprofile": {k: v for k, v in http["cprofile"].items() if k != "text"},
            "targets": targets,
        },
    )
    out.write("\n" + format_levels(levels) + "\n\n")
    for p in http["profile"]:
        out.write(format_profile(p) + "\n\n")
    cp = http["cprofile"]
    out.write(
        f"cProfile of the event loop thread ({cp['variant']}, {cp['requests']} requests; "
        f"{cp['profiled_ms_per_request']:.3f} ms a request under the profiler, client p50 "
        f"{cp['client_p50_ms']:.3f} ms), own time by where it is spent, ms a request:\n"
    )
    for g, ms in cp["groups_ms_per_request"].items():
        out.write(f"  {ms:8.3f}  {g}\n")
    out.write(cp["text"] + "\n")
    out.write(
        f"targets: in-process p50 {targets['in_process_p50_ms']} ms (≤ 2), HTTP p50 "
        f"{targets['http_p50_ms']} ms (≤ 5)\n"
    )
    if "baseline" in targets:
        b = targets["baseline"]
        given = ", ".join(f"{k}={v}" for k, v in b["settings"].items()) or "the defaults"
        out.write(
            f"current against {b['ref']} ({given}): p50 at c=1 ×{b['p50_c1_ratio']} (≤ 1.2), QPS "
            + ", ".join(f"c={c} ×{r}" for c, r in b["qps_ratio"].items())
            + " (≥ 1)\n"
        )
    if "workers" in targets:
        w = targets["workers"]
        out.write(
            f"{w['processes']} processes against 1: QPS at c={w['concurrency']} ×{w['qps_ratio']} (≥ 1.7), "
            f"p50 at c=1 ×{w['p50_c1_ratio']} (≤ 1.2)\n"
        )


def _row(levels: list[dict[str, Any]], variant: str, concurrency: int) -> dict[str, Any] | None:
    for r in levels:
        if (r["mode"], r["variant"], r["concurrency"]) == ("http", variant, concurrency):
            return r
    return None


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def _p50(levels: list[dict[str, Any]], mode: str, variant: str, concurrency: int) -> float | None:
    for r in levels:
        if (r["mode"], r["variant"], r["concurrency"]) == (mode, variant, concurrency):
            p50: float = r["p50_ms"]
            return p50
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--loadgen"]:
        return loadgen_main()
    parser = argparse.ArgumentParser(prog="python -m bench.http", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
