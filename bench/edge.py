"""``python -m bench.edge``: the HTTP edge probed as an attacker would, against real ``evomem serve``
and ``evomem mcp --http`` processes on loopback, with a Redis of its own:

- head flood: N connections stream one endless header line each for S seconds (reconnecting when
  the server closes them); the servers' RSS before, at its highest during, and after;
- half-open: 1,000 connections from 127.0.0.2 each send half a request head and hold it; then a
  retrieval from 127.0.0.1 (its status and time), and how many of the 1,000 were held or refused;
- stall: Redis SIGSTOPped; the times to an answer from /healthz, /openapi.json, /metrics and
  /v1/retrieve (each with its status), then SIGCONT and the time until health is 200 again.

Figures are printed and merged into ``bench/results.json`` under ``"edge"``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import DEFAULT_OUT, merge_results
from bench.probes import rss_mb
from evomem.adapters.redis.connection import EmbeddedRedis

RETRIEVE = {"query": "Verify: Mohra is a car", "namespace": "default"}


def _env(data_dir: Path, redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVOMEM_")}
    env.update(EVOMEM_DATA_DIR=str(data_dir), EVOMEM_REDIS_URL=redis_url, EVOMEM_EMBEDDER="hashing", **extra)
    return env


def _start(args: list[str], env: dict[str, str], banner: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "evomem.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if banner in line:
            return proc, line.rsplit(" ", 1)[-1].strip()
    raise RuntimeError(f"{args[0]} did not start")


def _address(url: str) -> tuple[str, int]:
    hostport = url.split("//", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


def head_flood(pid: int, url: str, connections: int, seconds: float) -> dict[str, Any]:
    address, path = _address(url), "/mcp" if url.endswith("/mcp") else "/v1/retrieve"
    before = rss_mb(pid)["rss"] or 0.0
    peak = before
    sent = [0]
    stop = time.monotonic() + seconds
    piece = b"a" * 65536

    def stream() -> None:
        while time.monotonic() < stop:
            try:
                with socket.create_connection(address, timeout=5) as sock:
                    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Flood: ".encode())
                    while time.monotonic() < stop:
                        sock.sendall(piece)
                        sent[0] += len(piece)
            except OSError:
                continue  # closed by the server (431): connect again

    threads = [threading.Thread(target=stream, daemon=True) for _ in range(connections)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_mb(pid)["rss"] or 0.0)
        time.sleep(0.1)
    after = rss_mb(pid)["rss"] or 0.0
    return {
        "connections": connections,
        "seconds": seconds,
        "client_pushed_mb": round(sent[0] / 1e6, 1),
        "rss_before_mb": before,
        "rss_peak_mb": peak,
        "rss_after_mb": after,
        "rss_growth_mb": round(peak - before, 1),
    }


def half_open(url: str, count: int) -> dict[str, Any]:
    address = _address(url)
    held, refused, failed = [], 0, 0
    for _ in range(count):
        try:
            sock = socket.create_connection(address, timeout=5, source_address=("127.0.0.2", 0))
            sock.sendall(b"POST /v1/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            held.append(sock)
        except OSError:
            failed += 1
    time.sleep(0.5)
    open_ = []
    for sock in held:
        sock.setblocking(False)
        try:
            data = sock.recv(64)
            refused += data.startswith(b"HTTP/1.1 503")
            sock.close()
        except BlockingIOError:
            open_.append(sock)
        except OSError:
            sock.close()
    t0 = time.perf_counter()
    with httpx.Client(timeout=10) as http:
        status = http.post(url + "/v1/retrieve", json=RETRIEVE).status_code
    took = time.perf_counter() - t0
    for sock in open_:
        sock.close()
    return {
        "attempted": count,
        "held_open": len(open_),
        "refused_503": refused,
        "connect_failed": failed,
        "other_client_retrieve_status": status,
        "other_client_retrieve_ms": round(took * 1000, 1),
    }


def stall(url: str, redis_pid: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=30) as http:
        http.post("/v1/retrieve", json=RETRIEVE)
        os.kill(redis_pid, signal.SIGSTOP)
        try:
            for name, method, path in (
                ("healthz", "GET", "/healthz"),
                ("openapi", "GET", "/openapi.json"),
                ("metrics", "GET", "/metrics"),
                ("retrieve", "POST", "/v1/retrieve"),
                ("retrieve_again", "POST", "/v1/retrieve"),
                ("healthz_again", "GET", "/healthz"),
            ):
                t0 = time.perf_counter()
                r = http.request(method, path, json=RETRIEVE if method == "POST" else None)
                out[name] = {"status": r.status_code, "ms": round((time.perf_counter() - t0) * 1000, 1)}
                if name.startswith("healthz"):
                    out[name]["redis"] = r.json().get("redis")
        finally:
            os.kill(redis_pid, signal.SIGCONT)
        t0 = time.perf_counter()
        while http.get("/healthz").status_code != 200 and time.perf_counter() - t0 < 60:
            time.sleep(0.05)
        out["healthy_again_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        event = {"namespace": "default", "query": "Verify: Mohra is a car", "status": "resolved"}
        out["event_after_status"] = http.post("/v1/events", content=json.dumps(event)).status_code
    return out


def run(flood_connections: int, flood_seconds: float, half_open_count: int) -> dict[str, Any]:
    """The three probes against fresh ``serve`` and ``mcp --http`` processes and their own Redis."""
    with tempfile.TemporaryDirectory() as tmp:
        redis_server = EmbeddedRedis(Path(tmp) / "redis")
        redis_url = redis_server.ensure()
        redis_pid = int(redis_server.pidfile.read_text())
        serve, serve_url = _start(
            ["serve", "--port", "0"], _env(Path(tmp) / "serve", redis_url), "retrieval service on"
        )
        mcp, mcp_url = _start(
            ["mcp", "--http", "--port", "0"], _env(Path(tmp) / "mcp", redis_url), "MCP server on"
        )
        try:
            return {
                "head_flood_serve": head_flood(serve.pid, serve_url, flood_connections, flood_seconds),
                "head_flood_mcp": head_flood(mcp.pid, mcp_url, flood_connections, flood_seconds),
                "half_open_serve": half_open(serve_url, half_open_count),
                "stall_serve": stall(serve_url, redis_pid),
            }
        finally:
            for proc in (serve, mcp):
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
                if proc.stdout is not None:
                    proc.stdout.close()
            redis_server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.edge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood-connections", type=int, default=8)
    parser.add_argument("--flood-seconds", type=float, default=40.0)
    parser.add_argument("--half-open", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    results = run(args.flood_connections, args.flood_seconds, args.half_open)
    print(json.dumps(results, indent=2))
    merge_results(args.out, "edge", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
