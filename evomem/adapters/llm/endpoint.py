"""One OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, the local test server) via openai.

The openai client's own retries are off: the controller retries with the shared rate limiter and
its own backoff, and retries at two levels would multiply each other. Vendor exceptions are
translated here, so the controller only sees the evomem error tree:

    TransientError
     └── EndpointError        429, 408/409/5xx, timeouts, connection failures; ``retry_now`` is
                              False for a refusal (401/403/404) that no quick retry can fix
    EvomemError
     └── RequestRejected      any other 4xx: the request itself was refused
          ├── ResponseFormatUnsupported   the endpoint refused the response format, whatever the
          │                               status (llama-cpp-python answers a 500 to json_schema)
          └── ContextTooLong  the prompt and its completion budget exceed the model's context

Three response formats, from the strictest: ``json_schema`` (OpenAI's structured output, vLLM,
llama.cpp's own server), ``json_object_schema`` (JSON mode carrying a schema, which
llama-cpp-python's server compiles into a grammar), ``json_object`` (JSON mode, the shape in the
prompt alone).

No message built here carries the API key: what the endpoint says is redacted before it is kept.
"""

from __future__ import annotations

import re
import time
import weakref
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import openai
from openai.types.chat import ChatCompletionMessageParam

from evomem.adapters.llm.prompt import RESPONSE_SCHEMA
from evomem.errors import EvomemError, TransientError
from evomem.settings import Settings

ResponseMode = Literal["json_schema", "json_object_schema", "json_object"]
#: The next response format to try when the endpoint refuses one.
FALLBACK: dict[ResponseMode, ResponseMode] = {
    "json_schema": "json_object_schema",
    "json_object_schema": "json_object",
}
_FORMAT_WORDS = ("response_format", "json_schema")
_CONTEXT_WORDS = ("context_length_exceeded", "maximum context length", "context window", "context length")

_KEYLIKE = re.compile(r"\b(?:sk|key|pk|rk)-[A-Za-z0-9_\-]{6,}")
_MESSAGE_CHARS = 300


class EndpointError(TransientError):
    """The endpoint is briefly unable to answer; the same request may succeed later."""

    def __init__(
        self, kind: str, message: str, retry_after: float | None = None, retry_now: bool = True
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after
        self.retry_now = retry_now


class RequestRejected(EvomemError):
    """The endpoint refused this request (a 4xx other than 429); sending it again changes nothing."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ResponseFormatUnsupported(RequestRejected):
    """The endpoint refused the ``response_format`` it was sent: fall back to the next one."""


class ContextTooLong(RequestRejected):
    """The prompt (with the completion budget) does not fit the model's context: send fewer events."""


@dataclass(frozen=True, slots=True)
class ChatReply:
    text: str
    finish_reason: str | None
    prompt_tokens: int | None  # None when the endpoint reports no usage
    completion_tokens: int | None
    model: str


class ChatEndpoint:
    """Chat completions with structured output, errors in evomem's terms."""

    def __init__(self, settings: Settings) -> None:
        secret = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        self._secret = secret
        self.model = settings.llm_model
        self.max_tokens = settings.llm_max_tokens
        self.temperature = settings.llm_temperature
        self.timeout_s = settings.llm_timeout_s
        self.client = openai.OpenAI(
            base_url=settings.llm_base_url,
            api_key=secret or "unused",  # local servers need none; the client insists on one
            timeout=openai.Timeout(settings.llm_timeout_s, connect=min(5.0, settings.llm_timeout_s)),
            max_retries=0,
        )
        # an endpoint dropped without close() (a worker torn down, a test) still lets go of its sockets
        self._release = weakref.finalize(self, self.client.close)

    def complete(
        self,
        system: str,
        user: str,
        mode: ResponseMode,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> ChatReply:
        """One chat completion. ``schema``: the answer's schema for ``json_object_schema`` (the
        generic ``RESPONSE_SCHEMA`` without one); ``max_tokens``: this call's completion budget
        (``LLM_MAX_TOKENS`` without one)."""
        response_format: Any
        if mode == "json_schema":
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": "memory_edits", "strict": True, "schema": RESPONSE_SCHEMA},
            }
        elif mode == "json_object_schema":
            # not in OpenAI's types: llama-cpp-python's extension of JSON mode; openai passes it on
            response_format = {"type": "json_object", "schema": schema or RESPONSE_SCHEMA}
        else:
            response_format = {"type": "json_object"}
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        try:
            completion = self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                response_format=response_format,
                # what vLLM, Ollama, llama.cpp and OpenAI's chat models all take
                max_tokens=min(max_tokens or self.max_tokens, self.max_tokens),
                temperature=self.temperature,
            )
        except openai.OpenAIError as exc:
            raise self.translate(exc) from None
        choice = completion.choices[0] if completion.choices else None
        usage = completion.usage
        return ChatReply(
            text=(choice.message.content or "") if choice is not None else "",
            finish_reason=choice.finish_reason if choice is not None else None,
            prompt_tokens=usage.prompt_tokens if usage is not None else None,
            completion_tokens=usage.completion_tokens if usage is not None else None,
            model=completion.model or self.model,
        )

    def translate(self, exc: openai.OpenAIError) -> EvomemError:
        """The evomem error for an openai one, its message redacted."""
        if isinstance(exc, openai.APITimeoutError):
            return EndpointError("timeout", f"LLM request timed out after {self.timeout_s:g} s")
        if isinstance(exc, openai.APIConnectionError):
            return EndpointError("connection", "LLM endpoint unreachable")
        if not isinstance(exc, openai.APIStatusError):
            return RequestRejected(0, f"LLM endpoint answered something unreadable ({type(exc).__name__})")
        status, full = exc.status_code, _said(exc)
        said, lowered = self.redact(full), (full + " " + _code(exc)).lower()
        retry_after = retry_after_s(exc.response.headers)
        if status == 429:
            return EndpointError(
                "rate_limited", f"LLM endpoint rate-limited the request (429): {said}", retry_after
            )
        if status not in (401, 403, 404) and any(w in lowered for w in _FORMAT_WORDS):
            # read before the status: llama-cpp-python answers 500 to a json_schema it cannot
            # validate, and retrying that as a server error would never end
            return ResponseFormatUnsupported(
                status, f"LLM endpoint refused the response format ({status}): {said}"
            )
        if status < 500 and any(w in lowered for w in _CONTEXT_WORDS):
            return ContextTooLong(
                status, f"LLM endpoint: the prompt does not fit the model's context ({status}): {said}"
            )
        if status in (408, 409) or status >= 500:
            return EndpointError("server_error", f"LLM endpoint failed ({status}): {said}", retry_after)
        if status in (401, 403, 404):
            return EndpointError(
                "refused", f"LLM endpoint refused the request ({status}): {said}", retry_now=False
            )
        return RequestRejected(status, f"LLM endpoint rejected the request ({status}): {said}")

    def redact(self, text: str) -> str:
        if self._secret and len(self._secret) >= 4:
            text = text.replace(self._secret, "***")
        return _KEYLIKE.sub("***", text)[:_MESSAGE_CHARS]

    def close(self) -> None:
        self._release()


def _said(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return str(exc.message)


def _code(exc: openai.APIStatusError) -> str:
    """The error's machine-readable code, when the endpoint gives one (``context_length_exceeded``)."""
    body = exc.body
    inner = body.get("error", body) if isinstance(body, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    return code if isinstance(code, str) else ""


def retry_after_s(headers: Any) -> float | None:
    """Seconds the endpoint asks us to wait: ``retry-after-ms``, else ``retry-after`` in seconds or
    as an HTTP date."""
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


__all__ = [
    "FALLBACK",
    "ChatEndpoint",
    "ChatReply",
    "ContextTooLong",
    "EndpointError",
    "RequestRejected",
    "ResponseFormatUnsupported",
    "ResponseMode",
    "retry_after_s",
]
