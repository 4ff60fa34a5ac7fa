"""The retrieval service under wrk (Debian's ``wrk`` package), as a pooled client or a proxy drives
it: every connection opened at once and kept alive, ``POST /v1/retrieve`` over tasks of five
namespaces. ``evomem serve`` with one process and with ``--workers 2``, at 32 and 128 connections;
QPS (the best of ``--rounds``, 1 and 2 processes run in turn), wrk's latency percentiles, and how
the connections spread over the processes
(``evomem_process_connections`` of ``/metrics``, read while wrk runs). ``--check`` holds the run to
issue 36's acceptance (2 processes ≥ 1.7× the QPS of one, none holding more than 60%).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from bench.common import DEFAULT_OUT, child_env, embedded_settings, machine_info, merge_results
from bench.world import World
from evomem import Memory
from evomem.testing.serve import service_process

RESULTS_KEY = "wrk"
RESULTS_SCHEMA = 1
NAMESPACES = 5
_LUA = """
local bodies = {}
for line in io.lines("%s") do bodies[#bodies + 1] = line end
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = i %% #bodies + 1
  return wrk.format(nil, "/v1/retrieve", nil, bodies[i])
end
"""


def build(data: Path, tasks: int, seed: int) -> list[str]:
    """A memory of ``tasks`` tasks over five namespaces (reported, consolidated); the bodies of the
    retrievals wrk sends (one JSON a line)."""
    world = World(NAMESPACES, seed)
    mem = Memory.open(embedded_settings(data, controller="rules", embedder="hashing"))
    assert isinstance(mem, Memory)
    bodies: list[str] = []
    try:
        for i in range(tasks):
            t = world.task()
            ns = f"fleet-{t.tenant}"
            mem.report(
                None,
                namespace=ns,
                query=t.text,
                status="resolved" if i % 3 else "failed",
                proposed_insight=f"For {t.text[:40]}: check the record first.",
            )
            if i % 500 == 499:
                mem.consolidate()
            if len(bodies) < 2_000:
                bodies.append(json.dumps({"query": t.text, "namespace": ns}))
        mem.consolidate()
    finally:
        mem.close()
    return bodies


def _metrics_connections(host: str, port: int) -> dict[str, float]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    found = re.findall(r'^evomem_process_connections\{process="(\d+)"\} ([0-9.e+]+)$', text, re.M)
    return {k: float(v) for k, v in found}


def run_wrk(host: str, port: int, script: Path, connections: int, seconds: int) -> dict[str, Any]:
    """wrk with one thread and ``connections`` kept-alive connections; the spread over the service's
    processes read while it runs."""
    spread: dict[str, float] = {}
    stop = threading.Event()

    def read_spread() -> None:  # the fullest of readings a second apart (a reading waits its turn)
        stop.wait(1.0)
        while not stop.is_set():
            found = _metrics_connections(host, port)
            if sum(found.values()) > sum(spread.values()):
                spread.clear()
                spread.update(found)
            stop.wait(1.0)

    reader = threading.Thread(target=read_spread)
    reader.start()
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script)]
    try:
        done = subprocess.run([*cmd, f"http://{host}:{port}"], capture_output=True, text=True, check=True)
    finally:
        stop.set()
        reader.join()
    out = done.stdout
    qps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    latency = dict(re.findall(r"^\s+(50|90|99)%\s+(\S+)$", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    total = sum(spread.values())
    return {
        "connections": connections,
        "qps": qps,
        "latency": latency,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "connections_per_process": spread,
        "largest_share": round(max(spread.values()) / total, 3) if total else None,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks in the memory (five namespaces)")
    parser.add_argument("--connections", default="32,128", help="wrk connections, comma-separated")
    parser.add_argument("--seconds", type=int, default=15, help="each wrk run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each configuration; the best is kept")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 500 tasks, 3 s runs")
    parser.add_argument("--check", action="store_true", help="exit 1 unless issue 36's acceptance holds")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    if args.quick:
        args.tasks, args.seconds, args.rounds = 500, 3, 1
    levels = [int(c) for c in args.connections.split(",") if c]
    machine = machine_info()
    started = datetime.now(UTC)
    out.write(f"wrk: {args.tasks:,} tasks, connections {levels}, {args.seconds} s a run\n")
    out.flush()
    root = Path(tempfile.mkdtemp(prefix="evomem-wrk-"))
    rows: dict[str, dict[str, Any]] = {}
    try:
        data = root / "data"
        bodies = build(data, args.tasks, args.seed)
        (root / "bodies.jsonl").write_text("\n".join(bodies) + "\n")
        script = root / "retrieve.lua"
        script.write_text(_LUA % (root / "bodies.jsonl"))
        tries: dict[str, list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):  # 1 and 2 processes in turn: a load from elsewhere hits both
            for workers in (1, 2):
                env = child_env()
                env.update(EVOMEM_DATA_DIR=str(data))
                cmd = ["-m", "evomem.cli", "serve", "--port", "0", "--workers", str(workers)]
                with service_process(cmd, env, what=f"evomem serve --workers {workers}") as service:
                    for c in levels:
                        r = run_wrk(service.host, service.port, script, c, args.seconds)
                        tries.setdefault(f"{workers}x{c}", []).append(r)
                        out.write(
                            f"  round {round_ + 1}, {workers} process(es), {c} connections: {r['qps']:,.0f} "
                            f"QPS, p50 {r['latency'].get('50')}, spread {r['connections_per_process']}\n"
                        )
                        out.flush()
        for key, runs in tries.items():  # each configuration's best round, and every round's QPS
            rows[key] = {**max(runs, key=lambda r: r["qps"]), "qps_rounds": [r["qps"] for r in runs]}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    check_list = []
    for c in levels:
        ratio = rows[f"2x{c}"]["qps"] / rows[f"1x{c}"]["qps"]
        share = rows[f"2x{c}"]["largest_share"]
        check_list.append(
            {
                "name": f"2 processes ≥ 1.7× the QPS of one at {c}",
                "value": round(ratio, 3),
                "passed": ratio >= 1.7,
            }
        )
        check_list.append(
            {
                "name": f"no process holds more than 60% of {c} connections",
                "value": share,
                "passed": share is not None and share <= 0.6,
            }
        )
    doc: dict[str, Any] = {
        "schema": RESULTS_SCHEMA,
        "timestamp": started.isoformat(timespec="seconds"),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": shlex.join(["python", "-m", "bench.wrk", *sys.argv[1:]]),
        "machine": {**machine, "loadavg_at_end": list(os.getloadavg())},
        "config": {
            "tasks": args.tasks,
            "connections": levels,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "threads": 1,
        },
        "runs": rows,
        "checks": check_list,
    }
    merge_results(args.out, RESULTS_KEY, doc)
    for check in check_list:
        out.write(f"{'PASS' if check['passed'] else 'FAIL'}  {check['name']}: {check['value']}\n")
    out.write(f"\nmerged under {RESULTS_KEY!r} in {args.out}\n")
    return 1 if args.check and not all(c["passed"] for c in check_list) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wrk", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
