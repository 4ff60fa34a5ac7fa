"""Bearer tokens mapped to namespaces: a token for one namespace can neither read nor write another."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Protocol

from evomem.errors import ConfigError, EvomemError

ALL = "*"


class TokenRecordLike(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def namespaces(self) -> list[str] | tuple[str, ...]: ...


class TokenStore(Protocol):
    """The run-time tokens (``evomem tokens``; ``Runtime.tokens`` in Redis)."""

    def any(self) -> bool: ...

    def lookup(self, token: str) -> TokenRecordLike | None: ...


class Unauthorized(EvomemError):
    """No token, or one the service does not know (HTTP 401)."""


class Forbidden(EvomemError):
    """A known token asking for a namespace it does not hold (HTTP 403)."""


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    namespaces: frozenset[str]

    def may(self, namespace: str) -> bool:
        return ALL in self.namespaces or namespace in self.namespaces

    def check(self, namespace: str) -> None:
        if not self.may(namespace):
            raise Forbidden(f"this token may not use namespace {namespace!r}")

    @property
    def admin(self) -> bool:
        return ALL in self.namespaces


OPEN = Principal("open", frozenset({ALL}))


class TokenAuth:
    """Parses ``TOKEN=ns1,ns2;TOKEN2=*`` and, once a ``TokenStore`` is attached, also knows the
    tokens made at run time (``evomem tokens``). With no token at all the service is open (and only
    listens on loopback, which ``evomem serve`` enforces); as soon as a run-time token exists it is
    not, and stays so for the life of the process: revoking every token locks everybody out rather
    than opening the service."""

    def __init__(self, spec: str | None, store: TokenStore | None = None) -> None:
        self.store = store
        self.tokens: list[tuple[bytes, Principal]] = []
        for n, part in enumerate(p for p in (spec or "").split(";") if p.strip()):
            token, sep, names = part.strip().partition("=")
            namespaces = frozenset(x.strip() for x in names.split(",") if x.strip())
            if not sep or not token or not namespaces:
                raise ConfigError(f"EVOMEM_TOKENS entry {n + 1} is not TOKEN=namespace[,namespace]")
            self.tokens.append((token.encode(), Principal(f"token-{n + 1}", namespaces)))
        self._on = bool(self.tokens)

    def attach(self, store: TokenStore) -> None:
        self.store = store

    @property
    def enabled(self) -> bool:
        if not self._on and self.store is not None and self.store.any():
            self._on = True
        return self._on

    def authenticate(self, header: str | None) -> Principal:
        if not self.enabled:
            return OPEN
        scheme, _, credentials = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():  # the scheme is case-insensitive (RFC 9110)
            raise Unauthorized("missing bearer token")
        offered = credentials.strip().encode()
        found = None
        for token, principal in self.tokens:  # compare with every token, in constant time each
            if hmac.compare_digest(token, offered):
                found = principal
        if found is None and self.store is not None:
            record = self.store.lookup(offered.decode("utf-8", "replace"))
            if record is not None:
                found = Principal(record.id, frozenset(record.namespaces))
        if found is None:
            raise Unauthorized("unknown token")
        return found


__all__ = ["OPEN", "Forbidden", "Principal", "TokenAuth", "Unauthorized"]
