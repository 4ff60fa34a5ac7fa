"""A local OpenAI-compatible chat endpoint for the tests, the benchmarks and the offline demo.

``POST /v1/chat/completions`` answers the controller's prompt with a rule-based judge (resolved →
KEEP, failed → ARCHIVE, feedback saying "too broad" → REVISE, a proposed insight → ADD), in
json_schema or json_object mode, with usage counts (the conservative estimate of ``tokens``).
A caller can plug in its own judge (``LLMTestServer(judge=...)``, same signature as ``judge``): the
quality benchmark gives it the simulated world's ground truth and an error rate.
It can refuse json_schema with a 400 or, as llama-cpp-python does, a 500, and refuse a prompt
longer than a context size. It can be scripted per request with faults: 429 with Retry-After,
500, 503, 400, a response slower than the client's timeout, truncated JSON, wrong-shaped JSON,
JSON wrapped in prose; and per event: unknown insight numbers, or an answer that obeys
instructions found in the trajectory. From another process, ``POST /_test/faults`` takes a JSON
list of faults and ``POST /_test/reset`` clears them.

    python -m evomem.testing.llm_server --port 8765 --latency-ms 200
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from evomem.adapters.llm.prompt import EVENTS_HEADER, INSIGHTS_HEADER
from evomem.adapters.llm.token_count import EstimatedTokens

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "unavailable",
    "bad_request",
    "slow",
    "truncated",
    "wrong_shape",
    "prose",
    "unknown_ids",
    "obey",
]
EVENT_FAULTS = frozenset({"unknown_ids", "obey"})
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_INSIGHT_REF = re.compile(r"\binsight\s+#?(\d+)", re.I)
_STATUS = {"rate_limit": 429, "server_error": 500, "unavailable": 503, "bad_request": 400}
#: Decides one event: its document in the prompt and the prompt's insights (number → text) → the
#: event's entry in the answer ({"event", "insight_edits", "add_new_insight"}).
JudgeFn = Callable[[dict[str, Any], dict[int, str]], dict[str, Any]]
#: Answers an agent's turn (a request that carries no event to judge): the request's messages → the
#: assistant's text. The framework tests script the agent under test with it.
ReplyFn = Callable[[list[dict[str, Any]]], str]


@dataclass
class Fault:
    """What to do instead of answering well. ``match``: only requests (for per-event kinds: only
    event entries) whose text holds it; ``times``: how often it fires, ``None`` for always."""

    kind: FaultKind
    match: str | None = None
    times: int | None = None
    retry_after_s: float = 1.0
    delay_s: float = 5.0


@dataclass(frozen=True)
class Call:
    """One chat request as the server saw it."""

    mode: str
    events: tuple[int, ...]
    queries: tuple[str, ...]
    status: int
    fault: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt: str = ""
    schema: bool = False  # JSON mode carrying a schema (llama-cpp-python's grammar)
    max_tokens: int | None = None


@dataclass
class _State:
    latency_s: float
    json_schema: bool
    api_key: str | None
    judge: JudgeFn = field(default_factory=lambda: judge)
    reply: ReplyFn | None = None  # an agent's turn, when set; else every request is the controller's
    refusal_status: int = 400  # of a refused json_schema; llama-cpp-python answers 500
    context_tokens: int | None = None  # the model's context: a longer prompt is refused (400)
    faults: list[Fault] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    in_flight: int = 0  # requests of the current epoch being answered
    max_in_flight: int = 0
    epoch: int = 0  # a reset starts a new one: a request left over from before it is not counted
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)

    def new_epoch(self) -> None:
        """Count in-flight requests afresh (call with the lock held)."""
        self.epoch += 1
        self.in_flight = 0
        self.max_in_flight = 0

    def take(
        self, text: str, kinds: frozenset[str] | None = None, exclude: frozenset[str] = frozenset()
    ) -> Fault | None:
        """The first fault that applies to ``text``, used up once."""
        with self.lock:
            for f in self.faults:
                if f.kind in exclude or (kinds is not None and f.kind not in kinds):
                    continue
                if (f.match is None or f.match in text) and (f.times is None or f.times > 0):
                    if f.times is not None:
                        f.times -= 1
                    return f
        return None


# -- the judge ----------------------------------------------------------------------------------
def read_prompt(text: str) -> tuple[dict[int, str], list[dict[str, Any]]]:
    """The insights (number → text) and the event documents of a controller prompt."""
    insights: dict[int, str] = {}
    events: list[dict[str, Any]] = []
    section = None
    for line in text.split("\n"):
        if line in (INSIGHTS_HEADER, EVENTS_HEADER):
            section = line
            continue
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if section == INSIGHTS_HEADER and "insight" in doc:
            insights[int(doc["insight"])] = str(doc["text"])
        elif section == EVENTS_HEADER and "event" in doc:
            events.append(doc)
    return insights, events


def judge(doc: dict[str, Any], insights: dict[int, str]) -> dict[str, Any]:
    """A sound, conservative answer for one event, from its outcome alone."""
    failed = doc.get("status") == "failed"
    revise = "too broad" in str(doc.get("feedback") or "").lower()
    edits = []
    for n in doc.get("insights", []):
        if revise:
            text = insights.get(n, "").rstrip(". ") + ", but only when the task's own evidence confirms it."
            edits.append({"insight": n, "operation": "REVISE", "revised_insight_text": text})
        else:
            op = "ARCHIVE" if failed else "KEEP"
            edits.append({"insight": n, "operation": op, "revised_insight_text": None})
    proposed = doc.get("proposed_insight")
    known = {insights.get(n, "").strip().lower() for n in doc.get("insights", [])}
    add = bool(proposed) and str(proposed).strip().lower() not in known
    return {
        "event": doc["event"],
        "insight_edits": edits,
        "add_new_insight": {"decision": add, "new_insight_text": proposed if add else None},
    }


def corrupt(
    entry: dict[str, Any], doc: dict[str, Any], kind: str, insights: dict[int, str]
) -> dict[str, Any]:
    """An event's entry as a faulty model would write it."""
    if kind == "unknown_ids":
        wrong = max([*insights, 0]) + 100
        edits = entry["insight_edits"] or [{"operation": "KEEP", "revised_insight_text": None}]
        return {**entry, "insight_edits": [{**edits[0], "insight": wrong}, *edits[1:]]}
    # "obey": does what the trajectory says, archiving its insights and whatever else it names
    said = str(doc.get("trajectory", "")) + " " + str(doc.get("feedback", ""))
    named: list[Any] = [
        *doc.get("insights", []),
        *(int(m) for m in _INSIGHT_REF.findall(said)),
        *_UUID.findall(said),
    ]
    edits = [
        {"insight": n, "operation": "ARCHIVE", "revised_insight_text": None} for n in dict.fromkeys(named)
    ]
    return {**entry, "insight_edits": edits}


# -- HTTP ---------------------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body leave in one segment, and at once: otherwise Nagle's algorithm meets the
    # client's delayed ACK and every answer waits 40 ms more
    disable_nagle_algorithm = True
    wbufsize = 1 << 16
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # the tests' output stays readable
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "evomem-test", "object": "model"}]})
        elif self.path == "/_test/calls":
            with self.server.state.lock:
                self._send(200, {"calls": [asdict(c) for c in self.server.state.calls]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "the body is not JSON"}})
            return
        state = self.server.state
        if self.path == "/_test/faults":
            with state.lock:
                state.faults.extend(Fault(**f) for f in body)
            self._send(200, {"faults": len(state.faults)})
        elif self.path == "/_test/reset":
            with state.lock:
                state.faults.clear()
                state.calls.clear()
                state.new_epoch()
            self._send(200, {"ok": True})
        elif self.path.rstrip("/") == "/v1/chat/completions":
            with state.lock:
                epoch = state.epoch
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                self._chat(body)
            finally:
                with state.lock:
                    if state.epoch == epoch:
                        state.in_flight -= 1
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def _chat(self, body: dict[str, Any]) -> None:
        state = self.server.state
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content") or "") for m in messages)
        mode = str((body.get("response_format") or {}).get("type", "text"))
        with_schema = mode == "json_object" and "schema" in (body.get("response_format") or {})
        max_tokens = body.get("max_tokens")
        insights, events = read_prompt(prompt)
        counter = EstimatedTokens()
        prompt_tokens = sum(counter.count(str(m.get("content") or "")) + 4 for m in messages)

        def record(status: int, fault: Fault | None, completion: int = 0) -> None:
            with state.lock:
                state.calls.append(
                    Call(
                        mode,
                        tuple(int(e["event"]) for e in events),
                        tuple(str(e.get("query", "")) for e in events),
                        status,
                        fault.kind if fault else None,
                        prompt_tokens,
                        completion,
                        prompt,
                        with_schema,
                        max_tokens,
                    )
                )

        if state.api_key is not None and self.headers.get("Authorization") != f"Bearer {state.api_key}":
            given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            record(401, None)
            self._send(
                401, {"error": {"message": f"Incorrect API key provided: {given}", "code": "invalid_api_key"}}
            )
            return
        if state.stopping.wait(state.latency_s):
            return
        if mode == "json_schema" and not state.json_schema:
            record(state.refusal_status, None)
            message = (
                "response_format of type 'json_schema' is not supported by this server"
                if state.refusal_status < 500  # llama-cpp-python's 500: its request validation error
                else "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}]"
            )
            self._send(state.refusal_status, {"error": {"message": message, "param": "response_format"}})
            return
        if state.context_tokens is not None and prompt_tokens > state.context_tokens:
            record(400, None)
            self._send(
                400,
                {
                    "error": {
                        "message": f"This model's maximum context length is {state.context_tokens} tokens. "
                        f"However, you requested {prompt_tokens} tokens.",
                        "code": "context_length_exceeded",
                        "param": "messages",
                    }
                },
            )
            return
        if mode == "json_object" and "json" not in prompt.lower():
            record(400, None)
            self._send(400, {"error": {"message": "'messages' must contain the word 'json' for json_object"}})
            return
        fault = state.take(prompt, exclude=EVENT_FAULTS)
        if fault is not None and fault.kind in _STATUS:
            record(_STATUS[fault.kind], fault)
            headers = {}
            if fault.kind == "rate_limit":
                headers = {
                    "Retry-After": str(math.ceil(fault.retry_after_s)),
                    "retry-after-ms": str(int(fault.retry_after_s * 1000)),
                }
            self._send(_STATUS[fault.kind], {"error": {"message": f"injected fault: {fault.kind}"}}, headers)
            return
        late = fault is not None and fault.kind == "slow"
        if late:  # recorded on arrival: the client has usually given up before the answer leaves
            record(200, fault)
            if state.stopping.wait(fault.delay_s):  # type: ignore[union-attr]
                return
        if state.reply is not None and not events:
            content, finish = state.reply(messages), "stop"
        else:
            entries, per_event = self._entries(events, insights)
            fault = fault or per_event
            content, finish = self._content({"events": entries}, fault)
        completion = counter.count(content)
        if not late:
            record(200, fault, completion)
        self._send(
            200,
            {
                "id": "chatcmpl-evomem-test",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "evomem-test"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": finish,
                        "message": {"role": "assistant", "content": content},
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion,
                    "total_tokens": prompt_tokens + completion,
                },
            },
        )

    def _entries(
        self, events: list[dict[str, Any]], insights: dict[int, str]
    ) -> tuple[list[dict[str, Any]], Fault | None]:
        """The judge's entry for each event, faults applied; the first per-event fault that fired."""
        state = self.server.state
        entries = []
        fired: Fault | None = None
        for doc in events:
            entry = state.judge(doc, insights)
            per_event = state.take(json.dumps(doc, ensure_ascii=False), kinds=EVENT_FAULTS)
            entries.append(corrupt(entry, doc, per_event.kind, insights) if per_event else entry)
            fired = fired or per_event
        return entries, fired

    @staticmethod
    def _content(answer: dict[str, Any], fault: Fault | None) -> tuple[str, str]:
        text = json.dumps(answer, ensure_ascii=False)
        kind = fault.kind if fault else None
        if kind == "truncated":
            return text[: len(text) // 2], "length"
        if kind == "wrong_shape":  # one event in the paper's single-event shape, ids as strings
            return json.dumps(
                {"insight_edits": [{"insight_id": "1", "operation": "KEEP"}], "add_new_insight": False}
            ), "stop"
        if kind == "prose":
            return f"Sure! Here are the memory edits:\n```json\n{text}\n```\nAnything else?", "stop"
        return text, "stop"

    def _send(self, status: int, doc: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(doc).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)
            self.wfile.flush()
        except OSError:  # the client gave up (a timeout) and closed the connection
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], state: _State) -> None:
        self.state = state
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:  # a dropped client is no error here
        pass


class LLMTestServer:
    """The endpoint in a background thread: ``with LLMTestServer() as server: server.url``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        latency_s: float = 0.0,
        json_schema: bool = True,
        api_key: str | None = None,
        judge: JudgeFn | None = None,
        reply: ReplyFn | None = None,
    ) -> None:
        """``judge`` replaces the built-in rule-based ``judge`` (faults still apply on top of it);
        ``reply`` answers the requests that carry no event (an agent's turns) with its text."""
        self.state = _State(latency_s, json_schema, api_key)
        if judge is not None:
            self.state.judge = judge
        self.state.reply = reply
        self._httpd = _Server((host, port), self.state)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self._httpd.server_address[0]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{self.port}/v1"

    def start(self) -> LLMTestServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="evomem-llm-testserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.state.stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> LLMTestServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- scripting --------------------------------------------------------------------------------
    def add_fault(self, *faults: Fault) -> None:
        with self.state.lock:
            self.state.faults.extend(faults)

    def reset(
        self,
        latency_s: float | None = None,
        json_schema: bool | None = None,
        refusal_status: int = 400,
        context_tokens: int | None = None,
    ) -> None:
        """No faults, no calls recorded; optionally another latency, JSON-schema support (refused
        with ``refusal_status``) or context size."""
        with self.state.lock:
            self.state.faults.clear()
            self.state.calls.clear()
            self.state.new_epoch()
            self.state.refusal_status = refusal_status
            self.state.context_tokens = context_tokens
            if latency_s is not None:
                self.state.latency_s = latency_s
            if json_schema is not None:
                self.state.json_schema = json_schema

    @property
    def calls(self) -> list[Call]:
        with self.state.lock:
            return list(self.state.calls)

    @property
    def requests(self) -> int:
        return len(self.calls)

    @property
    def max_in_flight(self) -> int:
        """The most chat requests this server was answering at one time since the last reset."""
        return self.state.max_in_flight

    def calls_for(self, text: str) -> Iterator[Call]:
        """The calls that carried an event whose query holds ``text``."""
        return (c for c in self.calls if any(text in q for q in c.queries))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evomem.testing.llm_server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before each answer")
    parser.add_argument(
        "--no-json-schema", action="store_true", help="refuse response_format json_schema (400)"
    )
    parser.add_argument(
        "--refusal-status", type=int, default=400, help="status of that refusal (llama-cpp-python: 500)"
    )
    parser.add_argument("--api-key", help="require this bearer key")
    args = parser.parse_args(argv)
    server = LLMTestServer(
        args.host, args.port, args.latency_ms / 1000, not args.no_json_schema, args.api_key
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    server.state.refusal_status = args.refusal_status
    server.start()
    print(f"evomem LLM test server on {server.url} (EVOMEM_LLM_BASE_URL={server.url})", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["Call", "Fault", "JudgeFn", "LLMTestServer", "ReplyFn", "corrupt", "judge", "main", "read_prompt"]
