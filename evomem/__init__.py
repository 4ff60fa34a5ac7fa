"""evomem: failure-aware editable graph memory for fleets of LLM agents."""

import importlib.metadata as _metadata

from evomem.errors import (
    ConfigError,
    EvomemError,
    InvalidEventError,
    NotFoundError,
    QuotaExceededError,
    StoreError,
    StoreLockedError,
    TransientError,
)
from evomem.results import (
    ConsolidationReport,
    EditRecord,
    EventState,
    InsightView,
    LineageStep,
    Retrieval,
    ScoredInsight,
)
from evomem.sdk import AsyncMemory, Memory
from evomem.settings import Settings
from schemas import TaskEvent

try:  # the distribution's version (pyproject.toml), whatever installed it
    __version__: str = _metadata.version("evograph-mem")
except _metadata.PackageNotFoundError:  # imported from a tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AsyncMemory",
    "ConfigError",
    "ConsolidationReport",
    "EditRecord",
    "EventState",
    "EvomemError",
    "InsightView",
    "InvalidEventError",
    "LineageStep",
    "Memory",
    "NotFoundError",
    "QuotaExceededError",
    "Retrieval",
    "ScoredInsight",
    "Settings",
    "StoreError",
    "StoreLockedError",
    "TaskEvent",
    "TransientError",
    "__version__",
]
