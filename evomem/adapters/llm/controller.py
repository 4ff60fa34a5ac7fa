"""The LLM graph controller (paper §3.4): batched, concurrent, rate-limited, validated, retried.

Events are grouped by namespace (one tenant's insights never appear in another's prompt) and cut
into calls of ``LLM_EVENTS_PER_CALL``; up to ``LLM_CONCURRENCY`` calls run at once. Per call:

* the shared rate limit is taken first (requests and estimated tokens);
* a transient failure (429, 5xx, timeout, connection) is retried up to ``LLM_TRANSIENT_ATTEMPTS``
  times with jittered exponential backoff, or after the endpoint's Retry-After (which also holds
  back every other worker); past that, or past the batch's time budget, the call's events fail
  *transiently* and stay pending, and every worker pauses ``LLM_BACKOFF_MAX_S`` before its next
  call (a refusal such as 401 is not retried at once, and pauses them too);
* each event's entry is validated on its own (``answers``); refused ones are asked again, with the
  reasons shown to the model, until ``LLM_MAX_ATTEMPTS``; then that event fails for good and goes
  to the dead letters. Accepted events of the same call are not asked again.

Structured output is asked for in the strictest form the endpoint accepts: JSON schema, else JSON
mode carrying the call's own schema (a grammar on llama.cpp), else plain JSON mode; a refusal moves
this controller one step down for good (the prompt spells the shape out either way). A call asks
for ``LLM_COMPLETION_TOKENS_PER_EVENT`` per event it carries, at most ``LLM_MAX_TOKENS``, and the
calls in flight and events per call adapt to the endpoint (``adaptive``). An event that dies takes
the model's last answer for it (its entry, else the whole answer), cut short, into its reason.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from evomem.adapters.llm.adaptive import AdaptiveLimits
from evomem.adapters.llm.answers import DuplicateCheck, entry_text, read_answer
from evomem.adapters.llm.endpoint import (
    FALLBACK,
    ChatEndpoint,
    ChatReply,
    ContextTooLong,
    EndpointError,
    RequestRejected,
    ResponseFormatUnsupported,
    ResponseMode,
)
from evomem.adapters.llm.prompt import PROMPT_VERSION, SYSTEM_PROMPT, PromptBatch, build_batch, correction
from evomem.adapters.llm.ratelimit import RateLimiter
from evomem.adapters.llm.token_count import TokenCounter, token_counter
from evomem.adapters.llm.usage import UsageRecorder
from evomem.adapters.redis.connection import Client
from evomem.backoff import capped_doubling
from evomem.core.decisions import Decision, DecisionFailure, DecisionInput
from evomem.logs import get_logger
from evomem.settings import Settings
from schemas import ControllerDecision

log = get_logger("evomem.llm")

#: Share of the worker's batch time limit that LLM calls, waits and retries may take, so that a
#: batch ends (and acks what it decided) before its task is killed.
TIME_BUDGET_SHARE = 0.75
#: Completion tokens a call may take beyond its events' share (the ``{"events": [...]}`` around them).
COMPLETION_OVERHEAD_TOKENS = 16
#: Characters of the model's answer kept in a refused event's reason and log line.
ANSWER_CHARS = 300


class Chat(Protocol):
    model: str

    def complete(
        self,
        system: str,
        user: str,
        mode: ResponseMode,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatReply: ...


class LLMController:
    judges_additions = True

    def __init__(
        self,
        settings: Settings,
        chat: Chat,
        limiter: RateLimiter,
        usage: UsageRecorder,
        counter: TokenCounter,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.chat = chat
        self.limiter = limiter
        self.usage = usage
        self.counter = counter
        self.duplicates = DuplicateCheck(settings.duplicate_threshold)
        self.name = f"llm:{chat.model}:prompt-v{PROMPT_VERSION}"
        self.rng = rng or random.Random()
        self._mode: ResponseMode = (
            "json_schema" if settings.llm_response_format == "auto" else settings.llm_response_format
        )
        self.limits = AdaptiveLimits(settings.llm_concurrency, settings.llm_events_per_call)
        self._lock = threading.Lock()
        self.sleep = time.sleep

    @classmethod
    def from_settings(cls, settings: Settings, client: Client) -> LLMController:
        chat = ChatEndpoint(settings)
        scope = f"{settings.llm_base_url or 'default'}|{settings.llm_model}"
        limiter = RateLimiter(client, scope, settings.llm_rpm, settings.llm_tpm)
        return cls(
            settings,
            chat,
            limiter,
            UsageRecorder(client),
            token_counter(settings.llm_tokenizer, settings.llm_model),
        )

    # -- the port ------------------------------------------------------------------------------
    def decide(self, inputs: Sequence[DecisionInput]) -> list[Decision]:
        deadline = time.monotonic() + TIME_BUDGET_SHARE * self.settings.batch_time_limit_s
        chunks = self.chunks(inputs)
        results: dict[int, Decision] = {}
        workers = min(self.settings.llm_concurrency, len(chunks))  # the limits hold them back further
        if workers <= 1:
            for chunk in chunks:
                results.update(self._decide_chunk(chunk, inputs, deadline))
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evomem-llm") as pool:
                for part in pool.map(lambda c: self._decide_chunk(c, inputs, deadline), chunks):
                    results.update(part)
        return [results[i] for i in range(len(inputs))]

    def chunks(self, inputs: Sequence[DecisionInput]) -> list[list[int]]:
        """Indices of ``inputs`` per call: one namespace a call, ``LLM_EVENTS_PER_CALL`` at most (fewer
        once the endpoint showed it cannot take that many)."""
        by_ns: dict[str, list[int]] = {}
        for i, inp in enumerate(inputs):
            by_ns.setdefault(inp.event.namespace, []).append(i)
        size = self.limits.events_per_call
        return [idx[k : k + size] for idx in by_ns.values() for k in range(0, len(idx), size)]

    # -- one call's events ---------------------------------------------------------------------
    def _decide_chunk(
        self, chunk: list[int], inputs: Sequence[DecisionInput], deadline: float
    ) -> dict[int, Decision]:
        s = self.settings
        batch = build_batch([inputs[i] for i in chunk], self.counter, s.llm_event_tokens)
        done: dict[int, Decision] = {}
        refused: dict[int, str] = {}
        answered: dict[int, str] = {}  # the model's last answer to each refused event
        invalid = dict.fromkeys(batch.numbers, 0)
        transient = 0
        while pending := [n for n in batch.numbers if n not in done]:
            if time.monotonic() >= deadline:  # the batch must end in time; these wait for a redelivery
                failure = DecisionFailure("the batch's time for LLM calls ran out", transient=True)
                done.update(dict.fromkeys(pending, failure))
                break
            sent = pending[: self.limits.events_per_call]
            user = batch.render(sent)
            if any(n in refused for n in sent):
                user += "\n\n" + correction({n: refused[n] for n in sent if n in refused})
            try:
                reply = self._call(user, batch, sent, repair=bool(refused), deadline=deadline)
            except EndpointError as exc:
                transient += 1
                self.usage.record_failure(f"transient:{exc.kind}", len(sent))
                if exc.kind == "timeout":
                    self.limits.timed_out()
                wait = self._backoff(transient, exc)
                give_up = not exc.retry_now or transient >= s.llm_transient_attempts
                if not give_up and wait > deadline - time.monotonic():
                    # wait out the budget: a redelivery sooner would only spend one of the event's deliveries
                    self.sleep(max(0.0, deadline - time.monotonic()))
                    give_up = True
                if give_up:
                    log.warning(
                        "llm.call_gave_up",
                        kind=exc.kind,
                        attempts=transient,
                        events=len(pending),
                        error=str(exc),
                    )
                    if exc.kind != "rate_limit_wait":
                        # a circuit breaker: every worker pauses, so an outage spends an event's
                        # deliveries no faster than one per LLM_BACKOFF_MAX_S
                        self.limiter.block(s.llm_backoff_max_s)
                    failure = DecisionFailure(f"{exc} (after {transient} tries)", transient=True)
                    done.update(dict.fromkeys(pending, failure))
                    break
                log.info("llm.call_retry", kind=exc.kind, attempt=transient, wait_s=round(wait, 3))
                self.sleep(wait)
                continue
            except ContextTooLong as exc:
                self.usage.record_failure("context", len(sent))
                if len(sent) > 1:  # the same events again, fewer to a call
                    self.limits.too_long(len(sent))
                    continue
                done[sent[0]] = DecisionFailure(f"{exc} (the event alone)", transient=False)
                continue
            except RequestRejected as exc:
                answers: dict[int, ControllerDecision | str] = dict.fromkeys(sent, str(exc))
                self.usage.record_failure("rejected", len(sent))
                for n in sent:  # no answer this time: an older one would explain nothing
                    answered.pop(n, None)
            else:
                answers = read_answer(
                    reply.text, reply.finish_reason, batch, sent, self.name, self.duplicates
                )
                answered.update(
                    {n: entry_text(reply.text, n) for n, a in answers.items() if isinstance(a, str)}
                )
            for n, answer in answers.items():
                if isinstance(answer, ControllerDecision):
                    done[n] = answer
                    continue
                invalid[n] += 1
                refused[n] = answer
                self.usage.record_failure("invalid")
                said = shorten(answered.get(n, ""))
                log.info(
                    "llm.answer_refused",
                    event_id=str(batch.event(n).input.event.event_id),
                    attempt=invalid[n],
                    reason=answer,
                    answer=said,
                )
                if invalid[n] >= s.llm_max_attempts:
                    done[n] = DecisionFailure(
                        f"LLM answer still invalid after {invalid[n]} tries: {answer}"
                        + (f"; the model answered: {said}" if said else ""),
                        transient=False,
                    )
        return {chunk[n - 1]: d for n, d in done.items()}

    def _call(
        self, user: str, batch: PromptBatch, sent: list[int], *, repair: bool, deadline: float
    ) -> ChatReply:
        """One request: rate limit, a slot, the endpoint, the response-format fallback, the accounting."""
        budget = min(
            self.settings.llm_max_tokens,
            self.settings.llm_completion_tokens_per_event * len(sent) + COMPLETION_OVERHEAD_TOKENS,
        )
        estimate = self.counter.count(SYSTEM_PROMPT) + self.counter.count(user) + 8
        reserved = estimate + budget
        self.limiter.acquire(reserved, deadline)
        try:
            with self.limits.slot():
                reply = self._complete(user, batch.answer_schema(sent), budget)
        except EndpointError as exc:
            if exc.retry_after:
                self.limiter.block(exc.retry_after)  # every worker waits, not only this call
            self.limiter.settle(reserved, 0)
            raise
        except RequestRejected:
            self.limiter.settle(reserved, 0)
            raise
        self.limits.answered()
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else estimate
        completion_tokens = (
            reply.completion_tokens if reply.completion_tokens is not None else self.counter.count(reply.text)
        )
        self.limiter.settle(reserved, prompt_tokens + completion_tokens)
        self.usage.record_call(
            reply.model,
            "repair" if repair else "decide",
            [str(batch.event(n).input.event.event_id) for n in sent],
            prompt_tokens,
            completion_tokens,
        )
        return reply

    def _complete(self, user: str, schema: dict[str, Any], budget: int) -> ChatReply:
        """The request in the current response format; on a refusal of it (with ``auto``), the
        next format, for this call and every later one."""
        while True:
            mode = self._mode
            try:
                return self.chat.complete(SYSTEM_PROMPT, user, mode, schema, budget)
            except ResponseFormatUnsupported as exc:
                fallback = FALLBACK.get(mode)
                if fallback is None or self.settings.llm_response_format != "auto":
                    raise
                with self._lock:
                    if self._mode == mode:  # calls in flight may have stepped down already
                        self._mode = fallback
                        log.warning(
                            "llm.response_format_refused",
                            model=self.chat.model,
                            refused=mode,
                            fallback=fallback,
                            error=str(exc),
                        )

    def _backoff(self, attempt: int, exc: EndpointError) -> float:
        """Retry-After when the endpoint gave one (capped), else exponential with equal jitter."""
        s = self.settings
        if exc.retry_after is not None:
            return float(exc.retry_after) + self.rng.uniform(0, 0.05 * s.llm_backoff_base_s)
        ceiling = capped_doubling(attempt, s.llm_backoff_base_s, s.llm_backoff_max_s)
        return float(ceiling / 2 + self.rng.uniform(0, ceiling / 2))

    def close(self) -> None:
        close = getattr(self.chat, "close", None)
        if close is not None:
            close()


def shorten(text: str, limit: int = ANSWER_CHARS) -> str:
    """A model's answer for a reason or a log line: one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


__all__ = ["TIME_BUDGET_SHARE", "Chat", "LLMController", "shorten"]
