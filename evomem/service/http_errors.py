"""Errors of the HTTP layer and the one table that maps every error to a status code and a metric
outcome. Nothing else in the service chooses a status for an error."""

from __future__ import annotations

from pydantic import ValidationError

from evomem.errors import (
    EvomemError,
    InvalidEventError,
    NotFoundError,
    QuotaExceededError,
    TransientError,
    reason_of,
)
from evomem.service.auth import Forbidden, Unauthorized


class HTTPError(EvomemError):
    """An error of the request itself (its size, type, host, timing) rather than of its content."""

    field: str | None = None

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BodyTooLarge(HTTPError):
    pass


class UnsupportedMediaType(HTTPError):
    pass


class RequestTimeout(HTTPError):
    pass


class ForeignOrigin(HTTPError):
    """A browser page of another origin, or a Host that is not this loopback service (DNS rebinding)."""


#: (error class, status, outcome label of evomem_requests_total); the first class that matches wins.
STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (Unauthorized, 401, "unauthorized"),
    (Forbidden, 403, "forbidden"),
    (ForeignOrigin, 403, "forbidden"),
    (NotFoundError, 404, "not_found"),
    (RequestTimeout, 408, "timeout"),
    (BodyTooLarge, 413, "too_large"),
    (UnsupportedMediaType, 415, "unsupported_media_type"),
    (InvalidEventError, 422, "invalid"),
    (ValidationError, 422, "invalid"),
    (QuotaExceededError, 429, "quota"),
    (TransientError, 503, "unavailable"),
    (EvomemError, 500, "error"),
)

#: Statuses after which the connection is closed: the client may still be sending a body we will
#: not read (413), or is too slow to keep (408).
CLOSE_AFTER = frozenset({408, 413})


def classify(exc: BaseException, body_name: str = "event") -> tuple[int, str, str, str | None]:
    """(status, outcome, message, field) for an error; 500 with a generic message for the unknown."""
    match = next(((s, o) for cls, s, o in STATUS if isinstance(exc, cls)), None)
    if match is None:
        return 500, "error", "internal error", None
    status, outcome = match
    if isinstance(exc, InvalidEventError | ValidationError):
        message, field = reason_of(exc)
        if field == "event" and body_name != "event":  # the whole body, not an event's field
            field = body_name
            message = message.replace("event:", f"{body_name}:", 1)
        return status, outcome, message, field
    if isinstance(exc, HTTPError):
        return status, outcome, str(exc), exc.field
    return status, outcome, str(exc), None


__all__ = [
    "CLOSE_AFTER",
    "STATUS",
    "BodyTooLarge",
    "ForeignOrigin",
    "HTTPError",
    "RequestTimeout",
    "UnsupportedMediaType",
    "classify",
]
