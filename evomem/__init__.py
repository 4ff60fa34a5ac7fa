"""evomem: failure-aware editable graph memory for fleets of LLM agents."""

from evomem.consolidation import ConsolidationReport
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
from evomem.memory import InsightView, Memory
from evomem.retrieval import ScoredInsight
from evomem.retriever import Retrieval
from evomem.settings import Settings
from schemas import TaskEvent

__version__ = "0.1.0"

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
