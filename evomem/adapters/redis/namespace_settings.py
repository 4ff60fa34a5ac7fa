"""Per-namespace settings: λ, the budget, the scoring, the archive policy and ratio (and k, the hops)
that one namespace sets for itself over the global ``Settings``.

Written rarely (``evomem settings set``), read on every retrieval and every consolidated event: the
resolver keeps each namespace's effective ``Settings`` for ``TENANCY_CACHE_S`` seconds, so the
retrieval path pays one dictionary lookup, and a change reaches every process within that time
(at once in the process that made it). Stored in one small hash per namespace, ``em:{ns}:settings``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import redis
from pydantic import ValidationError

from evomem import keys
from evomem.adapters.redis.connection import Client, mapped
from evomem.adapters.redis.recent import RecentCache
from evomem.errors import EvomemError, InvalidEventError
from evomem.logs import get_logger
from evomem.settings import OVERRIDABLE, NamespaceOverrides, Settings

log = get_logger("evomem.tenancy")

#: Resolves the effective settings of a namespace; ``Retriever`` and ``Consolidator`` take one.
SettingsResolver = Callable[[str], Settings]


def _field_name(name: str) -> str:
    for field, info in NamespaceOverrides.model_fields.items():
        if name in (field, info.alias):
            return field
    raise InvalidEventError(name, f"not a per-namespace setting; one of {', '.join(OVERRIDABLE)}")


class NamespaceSettings:
    """The store of per-namespace overrides and the resolver of effective settings (callable)."""

    def __init__(self, client: Client, base: Settings, ttl_s: float | None = None) -> None:
        self.client = mapped(client)
        self.base = base
        self.ttl_s = base.tenancy_cache_s if ttl_s is None else ttl_s
        self.max_entries = base.tenancy_cache_entries
        # bounded, least recently used out: a fleet of a million namespaces cannot grow it past
        # the setting
        self._cache: RecentCache[Settings] = RecentCache(self.ttl_s, self.max_entries)

    @property
    def hits(self) -> int:
        return self._cache.hits

    @property
    def misses(self) -> int:
        return self._cache.misses

    # -- resolving (the hot path) -----------------------------------------------------------------
    def __call__(self, namespace: str) -> Settings:
        now = time.monotonic()
        hit, fresh = self._cache.get(namespace, now)
        if fresh:
            assert hit is not None
            return hit[1]
        try:
            effective = self._effective(self.get(namespace))
        except (EvomemError, redis.RedisError, OSError) as exc:
            # Redis away: keep serving what was known (retrieval fails open), else the global settings
            log.debug("tenancy.settings_unreadable", namespace=namespace, error=str(exc))
            return hit[1] if hit is not None else self.base
        self._cache.put(namespace, effective, now)
        return effective

    def _effective(self, overrides: NamespaceOverrides) -> Settings:
        fields = overrides.set_fields()
        return self.base.model_copy(update=fields) if fields else self.base

    def forget(self, namespace: str | None = None) -> None:
        """Drop cached settings (all, or one namespace's): the next call reads them again."""
        self._cache.drop(namespace)

    # -- the store ----------------------------------------------------------------------------------
    def get(self, namespace: str) -> NamespaceOverrides:
        raw = self.client.hgetall(keys.namespace_settings(namespace))
        doc = {}
        for k, v in raw.items():
            try:
                doc[k.decode()] = json.loads(v)
            except (ValueError, UnicodeDecodeError):  # written by hand: ignored like an invalid value
                log.warning("tenancy.settings_invalid", namespace=namespace, error=f"{k!r} is not JSON")
        try:
            return NamespaceOverrides.model_validate(doc)
        except ValidationError as exc:  # written by hand, or by an older version: ignore what is wrong
            log.warning("tenancy.settings_invalid", namespace=namespace, error=str(exc.errors()[0]["msg"]))
            good = {k: v for k, v in doc.items() if _valid(k, v)}
            return NamespaceOverrides.model_validate(good)

    def set(self, namespace: str, values: dict[str, Any]) -> NamespaceOverrides:
        """Override some settings of a namespace; each value is checked as the global one is."""
        names = {_field_name(k): v for k, v in values.items()}
        current = self.get(namespace).set_fields()
        try:
            merged = NamespaceOverrides.model_validate({**current, **names})
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InvalidEventError(str(err["loc"][0]) if err["loc"] else "settings", err["msg"]) from None
        fields = merged.set_fields()
        # the index first, then the settings (two slots on a Redis Cluster, so no MULTI): a failure
        # in between lists a namespace with nothing overridden, never hides an override
        self.client.sadd(keys.NAMESPACES_WITH_SETTINGS, namespace)
        self.client.hset(
            keys.namespace_settings(namespace),
            mapping={k: json.dumps(fields[k]) for k in names if k in fields},
        )
        self.forget(namespace)
        return merged

    def unset(self, namespace: str, names: list[str]) -> NamespaceOverrides:
        """Back to the global value for these settings (all of them when ``names`` is empty)."""
        key = keys.namespace_settings(namespace)
        if names:
            self.client.hdel(key, *[_field_name(n) for n in names])
        else:
            self.client.delete(key)
        if not self.client.exists(key):
            self.client.srem(keys.NAMESPACES_WITH_SETTINGS, namespace)
        self.forget(namespace)
        return self.get(namespace)

    def all(self) -> dict[str, NamespaceOverrides]:
        names = sorted(n.decode() for n in self.client.smembers(keys.NAMESPACES_WITH_SETTINGS))
        return {ns: self.get(ns) for ns in names}


def _valid(name: str, value: Any) -> bool:
    try:
        NamespaceOverrides.model_validate({name: value})
    except ValidationError:
        return False
    return True


__all__ = ["NamespaceSettings", "SettingsResolver"]
