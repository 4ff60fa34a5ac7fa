"""evomem: failure-aware editable graph memory for fleets of LLM agents."""

import importlib.metadata as _metadata

from evomem.core.retrieval import ScoredInsight
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
from evomem.pipeline.consolidate import ConsolidationReport
from evomem.pipeline.retrieve import Retrieval
from evomem.sdk import InsightView, Memory
from evomem.settings import Settings
from schemas import TaskEvent

try:  # the distribution's version (pyproject.toml), whatever installed it
    __version__: str = _metadata.version("evograph-mem")
except _metadata.PackageNotFoundError:  # imported from a tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ConfigError",
    "ConsolidationReport",
    "EvomemError",
    "InsightView",
    "InvalidEventError",
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
