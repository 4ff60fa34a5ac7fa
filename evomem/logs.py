"""Logging, configured in one place: structlog key-value events, JSON off a TTY, console on one.

Standard-library loggers (celery, httpx, qdrant) go through the same renderer.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def get_logger(name: str) -> Any:
    """A structlog logger that always goes through the standard library's ``logging``: silent below
    WARNING unless the application configures logging (``configure_logging`` does, for the CLI and
    the workers), so the library never prints on its own."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            structlog.stdlib.render_to_log_kwargs,
        ],
    )


def configure_logging(level: str = "INFO", json: bool | None = None) -> None:
    render_json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if render_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
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


__all__ = ["configure_logging"]
