"""API tokens managed at run time (``evomem tokens create | list | revoke``), beside the static
``EVOMEM_TOKENS``. Only a SHA-256 of each token is stored: a token is shown once, when it is made.

All tokens live in one hash, ``em:tokens`` (sha256 -> record): a lookup is one ``HGET``, a listing one
``HGETALL``. The service caches what it looked up for ``TENANCY_CACHE_S`` seconds, so a new token
works, and a revoked one stops working, within that time and without a restart.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from dataclasses import asdict, dataclass

import redis
from pydantic import TypeAdapter, ValidationError

from evomem import keys
from evomem.adapters.redis.connection import Client, mapped
from evomem.adapters.redis.recent import RecentCache
from evomem.errors import EvomemError, InvalidEventError, NotFoundError
from schemas.models import Namespace

TOKEN_PREFIX = "emk_"
ALL = "*"


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: str
    name: str
    namespaces: tuple[str, ...]
    created_at: str


_NAMESPACE: TypeAdapter[str] = TypeAdapter(Namespace)


def check_namespace(namespace: str) -> str:
    try:
        return _NAMESPACE.validate_python(namespace)
    except ValidationError as exc:
        raise InvalidEventError("namespace", f"{namespace!r}: {exc.errors()[0]['msg']}") from None


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    def __init__(self, client: Client, ttl_s: float = 2.0, max_entries: int = 10_000) -> None:
        self.client = mapped(client)
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._cache: RecentCache[TokenRecord | None] = RecentCache(ttl_s, max_entries)
        self._any: tuple[float, bool] = (-1e9, False)
        self._lock = threading.Lock()

    @property
    def hits(self) -> int:
        return self._cache.hits

    @property
    def misses(self) -> int:
        return self._cache.misses

    # -- management ---------------------------------------------------------------------------------
    def create(self, namespaces: list[str], name: str = "") -> tuple[str, TokenRecord]:
        """A new token for these namespaces (``*``: all). Returns the token, which is not kept."""
        if not namespaces:
            raise InvalidEventError("namespaces", "a token needs at least one namespace (or *)")
        checked = tuple(sorted({ns if ns == ALL else check_namespace(ns) for ns in namespaces}))
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = TokenRecord(
            id="tok_" + secrets.token_hex(6),
            name=name[:128],
            namespaces=checked,
            created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        self.client.hset(keys.TOKENS, digest(token), json.dumps(asdict(record)))
        self._drop_cache()
        return token, record

    def list(self) -> list[TokenRecord]:
        records = [_record(v) for v in self.client.hgetall(keys.TOKENS).values()]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def revoke(self, token_id: str) -> TokenRecord:
        """Revoke by id (as ``list`` shows it)."""
        for h, raw in self.client.hgetall(keys.TOKENS).items():
            record = _record(raw)
            if record.id == token_id:
                self.client.hdel(keys.TOKENS, h)
                self._drop_cache()
                return record
        raise NotFoundError(f"no token {token_id!r}")

    # -- lookups (the service's) ----------------------------------------------------------------------
    def lookup(self, token: str) -> TokenRecord | None:
        """The record of a token, or None; cached (found or not) for ``ttl_s``."""
        h = digest(token)
        now = time.monotonic()
        hit, fresh = self._cache.get(h, now)
        if fresh:
            assert hit is not None
            return hit[1]
        try:
            raw = self.client.hget(keys.TOKENS, h)
        except (EvomemError, redis.RedisError, OSError):
            return hit[1] if hit is not None else None  # Redis away: what was known, else no
        record = _record(raw) if raw is not None else None
        self._cache.put(h, record, now)
        return record

    def any(self) -> bool:
        """Whether any run-time token exists (cached for ``ttl_s``)."""
        now = time.monotonic()
        at, value = self._any
        if now - at < self.ttl_s:
            return value
        try:
            value = bool(self.client.hlen(keys.TOKENS))
        except (EvomemError, redis.RedisError, OSError):
            return value
        self._any = (now, value)
        return value

    def _drop_cache(self) -> None:
        with self._lock:
            self._cache.drop()
            self._any = (-1e9, False)


def _record(raw: bytes | str) -> TokenRecord:
    doc = json.loads(raw)
    return TokenRecord(doc["id"], doc.get("name", ""), tuple(doc["namespaces"]), doc.get("created_at", ""))


__all__ = ["TOKEN_PREFIX", "TokenRecord", "TokenStore", "digest"]
