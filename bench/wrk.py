"""The retrieval service under wrk (Debian's ``wrk`` package), as a pooled client or a proxy drives
it: every connection opened at once and kept alive, ``POST /v1/retrieve`` over tasks of five
namespaces. ``evomem serve`` with one process and with ``--workers 2``, at 32 and 128 connections;
QPS (the best of ``--rounds``, 1 and 2 processes run in turn), wrk's latency percentiles, and how
the connections spread over the processes
(``evomem_process_connections`` of ``/metrics``, read while wrk runs), and where the machine's CPU
went during each run, in cores: the service's processes (each retrieval process apart), its
redis-server, wrk, and everything else on the machine. On a machine shared with other work, the QPS
of two processes is bounded by the cores they get, not by how they split the connections: the
rows' ``qps_per_service_core`` (QPS over the cores the service's retrieval processes used) shows
whether a process does the same work for the same CPU with one process or two. ``--check`` holds
the run to issue 36's acceptance (2 processes ≥ 1.7× the QPS of one, none holding more than 60%).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import psutil

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


def _cpu_seconds(procs: Sequence[psutil.Process]) -> dict[int, float]:
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:  # gone: counted as nothing from here
            continue
        out[p.pid] = t.user + t.system
    return out


def _machine_busy_seconds() -> float:
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


class CpuMeter:
    """Where the machine's CPU goes while wrk runs, in cores (CPU seconds over wall seconds): each of
    the service's retrieval processes, its supervisor, its redis-server, wrk (from this process's
    children's rusage: wrk is the only one that exits meanwhile), and the rest of the machine."""

    def __init__(self, service_pid: int, data_dir: Path | None = None) -> None:
        top = psutil.Process(service_pid)
        self.procs = [top, *top.children(recursive=True)]
        if data_dir is not None:  # the embedded redis-server runs on its own (a daemon), named by its socket
            mine = {p.pid for p in self.procs}
            for p in psutil.process_iter(["cmdline"]):
                if p.pid not in mine and str(data_dir) in " ".join(p.info["cmdline"] or ()):
                    self.procs.append(p)
        self.role: dict[int, str] = {}
        for p in self.procs:
            try:
                cmdline = " ".join(p.cmdline())
            except psutil.Error:
                continue
            if "redis-server" in cmdline:
                self.role[p.pid] = "redis"
            elif p.pid == service_pid and "evomem.service.processes" not in cmdline:
                self.role[p.pid] = "supervisor"  # or the one process, without --workers
            else:
                self.role[p.pid] = "process"
        self.started = 0.0

    def start(self) -> None:
        self._before = _cpu_seconds(self.procs)
        self._machine = _machine_busy_seconds()
        self._children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.started = time.monotonic()

    def stop(self) -> dict[str, Any]:
        wall = time.monotonic() - self.started
        after = _cpu_seconds(self.procs)
        machine = _machine_busy_seconds() - self._machine
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        wrk = (ru.ru_utime - self._children.ru_utime) + (ru.ru_stime - self._children.ru_stime)
        used = {pid: after[pid] - self._before.get(pid, 0.0) for pid in after}
        processes = [round(v / wall, 3) for pid, v in sorted(used.items()) if self.role.get(pid) == "process"]
        if not processes:  # one process alone: it is the service
            processes = [round(v / wall, 3) for pid, v in used.items() if self.role.get(pid) == "supervisor"]
            supervisor = 0.0
        else:
            supervisor = sum(v for pid, v in used.items() if self.role.get(pid) == "supervisor") / wall
        redis = sum(v for pid, v in used.items() if self.role.get(pid) == "redis") / wall
        ours = sum(used.values()) + wrk
        return {
            "wall_s": round(wall, 2),
            "processes": processes,
            "service": round(sum(processes), 3),
            "supervisor": round(supervisor, 3),
            "redis": round(redis, 3),
            "wrk": round(wrk / wall, 3),
            "machine_busy": round(machine / wall, 3),
            "other": round(max(0.0, machine - ours) / wall, 3),
        }


def run_wrk(
    host: str,
    port: int,
    script: Path,
    connections: int,
    seconds: int,
    service_pid: int | None = None,
    data_dir: Path | None = None,
) -> dict[str, Any]:
    """wrk with one thread and ``connections`` kept-alive connections; the spread over the service's
    processes read while it runs, and (given ``service_pid``) where the CPU went meanwhile."""
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

    meter = CpuMeter(service_pid, data_dir) if service_pid is not None else None
    reader = threading.Thread(target=read_spread)
    reader.start()
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script)]
    cpu: dict[str, Any] | None = None
    try:
        if meter is not None:
            meter.start()
        done = subprocess.run([*cmd, f"http://{host}:{port}"], capture_output=True, text=True, check=True)
        if meter is not None:
            cpu = meter.stop()
    finally:
        stop.set()
        reader.join()
    out = done.stdout
    qps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    latency = dict(re.findall(r"^\s+(50|90|99)%\s+(\S+)$", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    total = sum(spread.values())
    row: dict[str, Any] = {
        "connections": connections,
        "qps": qps,
        "latency": latency,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "connections_per_process": spread,
        "largest_share": round(max(spread.values()) / total, 3) if total else None,
    }
    if cpu is not None:
        row["cpu_cores"] = cpu
        row["qps_per_service_core"] = round(qps / cpu["service"], 1) if cpu["service"] > 0 else None
    return row


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
    out.write(
        f"wrk: {args.tasks:,} tasks, connections {levels}, {args.seconds} s a run; "
        f"{machine['cores']} cores, load {machine['loadavg_at_start']}\n"
    )
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
                        pid = service.proc.pid
                        r = run_wrk(service.host, service.port, script, c, args.seconds, pid, data)
                        tries.setdefault(f"{workers}x{c}", []).append(r)
                        r["loadavg"] = round(os.getloadavg()[0], 2)
                        cpu = r["cpu_cores"]
                        out.write(
                            f"  round {round_ + 1}, {workers} process(es), {c} connections: {r['qps']:,.0f} "
                            f"QPS, p50 {r['latency'].get('50')}, spread {r['connections_per_process']}; "
                            f"cores: processes {cpu['processes']}, redis {cpu['redis']}, wrk {cpu['wrk']}, "
                            f"other {cpu['other']}; load {r['loadavg']}\n"
                        )
                        out.flush()
        for key, runs in tries.items():  # each configuration's best round, and every round's QPS
            rows[key] = {**max(runs, key=lambda r: r["qps"]), "qps_rounds": [r["qps"] for r in runs]}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    check_list = []
    efficiency: list[dict[str, Any]] = []
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
        one, two = rows[f"1x{c}"].get("qps_per_service_core"), rows[f"2x{c}"].get("qps_per_service_core")
        if one and two:  # the work a core of the service does, with two processes against one: not a target
            efficiency.append({"connections": c, "ratio": round(two / one, 3)})
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
        "qps_per_service_core_2_over_1": efficiency,
        "checks": check_list,
    }
    merge_results(args.out, RESULTS_KEY, doc)
    for e in efficiency:
        out.write(f"QPS per core of the service, 2 processes over 1, at {e['connections']}: {e['ratio']}\n")
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
