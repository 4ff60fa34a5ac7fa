"""Token accounting of the LLM controller, in Redis so every worker adds to one tally.

Per model and per operation (``decide``: a first judgement; ``repair``: a retry after an invalid
answer) the calls and prompt/completion tokens the endpoint reported; per event its share of each
call it was in (expiring); and counts of failures by kind. ``summary()`` adds an estimated cost.
The cost is an estimate: tokens times a price per 1k tokens, from ``EVOMEM_LLM_PRICE_*`` for the
configured model, else from ``DEFAULT_PRICES``, list prices in USD as published in 2025 — check
them against your provider's bill. A model without a price shows no cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evomem import keys
from evomem.adapters.redis.connection import Client, mapped
from evomem.errors import TransientError
from evomem.logs import get_logger
from evomem.settings import Settings

#: USD per 1k (prompt, completion) tokens; list prices, an estimate, not a bill.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.00015, 0.0006),
    "gpt-4o": (0.0025, 0.01),
    "gpt-4.1": (0.002, 0.008),
    "gpt-4.1-mini": (0.0004, 0.0016),
    "gpt-4.1-nano": (0.0001, 0.0004),
}
EVENT_USAGE_TTL_S = 7 * 86_400
log = get_logger("evomem.llm")
_METRICS = ("calls", "prompt_tokens", "completion_tokens", "events")


class UsageRecorder:
    """Best effort: a tally that Redis could not take is logged and lost, never a paid decision."""

    def __init__(self, client: Client) -> None:
        self.r = mapped(client)

    def record_call(
        self, model: str, operation: str, event_ids: Sequence[str], prompt_tokens: int, completion_tokens: int
    ) -> None:
        """One call's tokens: to its model and operation, and split evenly over its events."""
        pipe = self.r.pipeline(transaction=False)
        for scope in (f"model:{model}", f"op:{operation}"):
            pipe.hincrby(keys.LLM_USAGE, f"{scope}:calls", 1)
            pipe.hincrby(keys.LLM_USAGE, f"{scope}:prompt_tokens", prompt_tokens)
            pipe.hincrby(keys.LLM_USAGE, f"{scope}:completion_tokens", completion_tokens)
            pipe.hincrby(keys.LLM_USAGE, f"{scope}:events", len(event_ids))
        n = max(1, len(event_ids))
        for i, event_id in enumerate(event_ids):
            key = keys.llm_event_usage(event_id)
            pipe.hincrby(key, "calls", 1)
            pipe.hincrby(key, "prompt_tokens", _share(prompt_tokens, n, i))
            pipe.hincrby(key, "completion_tokens", _share(completion_tokens, n, i))
            pipe.expire(key, EVENT_USAGE_TTL_S)
        self._execute(pipe)

    def record_failure(self, kind: str, events: int = 1) -> None:
        """An attempt that gave no usable answer: ``transient:<kind>``, ``invalid``, ``rejected``."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hincrby(keys.LLM_USAGE, f"failures:{kind}", events)
        self._execute(pipe)

    @staticmethod
    def _execute(pipe: Any) -> None:
        try:
            pipe.execute()
        except TransientError as exc:
            log.warning("llm.usage_not_recorded", error=type(exc).__name__)


def event_usage(client: Client, event_id: str) -> dict[str, int]:
    """Calls and tokens spent on one event ({} once expired, or if no LLM judged it)."""
    raw = client.hgetall(keys.llm_event_usage(event_id))
    return {_s(k): int(v) for k, v in raw.items()}


def price_of(model: str, settings: Settings | None = None) -> tuple[float, float] | None:
    """USD per 1k (prompt, completion) tokens of ``model``: the settings' prices apply to the
    configured model, the default table to the models it names. Endpoints report dated snapshots
    ("gpt-4o-mini-2024-07-18"), so a name matches its longest known prefix."""
    if (
        settings is not None
        and settings.llm_price_prompt_per_1k is not None
        and model.startswith(settings.llm_model)
    ):
        return settings.llm_price_prompt_per_1k, settings.llm_price_completion_per_1k or 0.0
    known = [name for name in DEFAULT_PRICES if model == name or model.startswith(name + "-")]
    return DEFAULT_PRICES[max(known, key=len)] if known else None


def summary(client: Client, settings: Settings | None = None) -> dict[str, Any]:
    """The tally for ``evomem stats``: totals, per model (with the estimated cost), per operation,
    tokens per judged event, failures by kind."""
    raw = {_s(k): int(v) for k, v in client.hgetall(keys.LLM_USAGE).items()}
    models: dict[str, dict[str, Any]] = {}
    operations: dict[str, dict[str, Any]] = {}
    failures: dict[str, int] = {}
    for field, value in raw.items():
        group, _, rest = field.partition(":")
        if group == "failures":
            failures[rest] = value
            continue
        name, _, metric = rest.rpartition(":")  # model names may hold colons ("llama3:8b")
        if group in ("model", "op") and metric in _METRICS:
            target = models if group == "model" else operations
            target.setdefault(name, dict.fromkeys(_METRICS, 0))[metric] = value
    total_cost: float | None = 0.0
    for model, m in models.items():
        price = price_of(model, settings)
        m["estimated_cost_usd"] = (
            None
            if price is None
            else round(m["prompt_tokens"] / 1000 * price[0] + m["completion_tokens"] / 1000 * price[1], 6)
        )
        total_cost = (
            None
            if total_cost is None or m["estimated_cost_usd"] is None
            else total_cost + m["estimated_cost_usd"]
        )
    totals = {metric: sum(m[metric] for m in models.values()) for metric in _METRICS if metric != "events"}
    judged = operations.get("decide", {}).get("events", 0)
    return {
        **totals,
        "events_judged": judged,
        "prompt_tokens_per_event": round(totals["prompt_tokens"] / judged, 1) if judged else None,
        "completion_tokens_per_event": round(totals["completion_tokens"] / judged, 1) if judged else None,
        "models": models,
        "operations": operations,
        "failures": failures,
        "estimated_cost_usd": None if total_cost is None else round(total_cost, 6),
        "cost_note": "an estimate: reported tokens × list price per 1k tokens (EVOMEM_LLM_PRICE_* or a "
        "default table); null where a model has no price",
    }


def reset(client: Client) -> None:
    """Forget the tally (the per-event shares expire on their own)."""
    client.delete(keys.LLM_USAGE)


def _share(total: int, n: int, i: int) -> int:
    """The i-th of n even shares of ``total`` (the first ones take the remainder)."""
    return total // n + (1 if i < total % n else 0)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


__all__ = ["DEFAULT_PRICES", "UsageRecorder", "event_usage", "price_of", "reset", "summary"]
