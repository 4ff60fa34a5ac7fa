"""Logging, configured in one place: structlog key-value events, JSON off a TTY, console on one.

Every evomem logger goes through the standard library's ``logging`` (``get_logger``), so the library
is silent below WARNING until an application configures logging; ``configure_logging`` (the CLI,
the workers, the service) is the one function that does, with one processor chain for evomem's
events and for the standard-library loggers of celery, httpx and qdrant alike. The ids that let an
operator follow one event are bound as context (``bound``) where a unit of work starts — a batch
(batch id, consumer), an event (event id, namespace), a request (route, principal, namespace,
retrieval id) — and every line logged inside it carries them.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

import structlog

#: What every line gets before it is rendered, whichever logger wrote it.
SHARED: tuple[structlog.types.Processor, ...] = (
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.ExtraAdder(),
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
)


def get_logger(name: str) -> Any:
    """A structlog logger over the standard library's ``logging.getLogger(name)``: the level check
    happens first (a line below the level costs nothing more), and the event's key-values travel
    to the handler ``configure_logging`` installs."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.render_to_log_kwargs,
        ],
    )


@contextlib.contextmanager
def bound(**ids: Any) -> Iterator[None]:
    """Within the block, every line logged in this context (thread or task) carries ``ids``."""
    with structlog.contextvars.bound_contextvars(**{k: v for k, v in ids.items() if v is not None}):
        yield


def bind(**ids: Any) -> None:
    """Add ``ids`` to the context of the unit of work under way (inside ``bound``)."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in ids.items() if v is not None})


def configure_logging(level: str = "INFO", json: bool | None = None) -> None:
    """The one configuration: the root handler renders evomem's events and every other library's
    records through ``SHARED``, as JSON off a TTY (or with ``json=True``) and for a console on one."""
    render_json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if render_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=list(SHARED),
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                # JSON carries a traceback as the "exception" string; the console renderer prints its own
                *([structlog.processors.format_exc_info] if render_json else []),
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


__all__ = ["SHARED", "bind", "bound", "configure_logging", "get_logger"]
