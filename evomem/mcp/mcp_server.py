"""``evomem mcp``: the memory as a Model Context Protocol server (the official ``mcp`` SDK), over stdio
or streamable HTTP, with its tools — retrieve insights, report an outcome, inspect an insight, and
the operator's: revert edits, pin an insight, list and decide the edits held for review.

Over HTTP every request carries a bearer token checked exactly as the HTTP service checks it (the
same ``TokenAuth``); the SDK binds each MCP session to the token that opened it. Over stdio the
process has one principal: its ``EVOMEM_TOKEN`` when tokens are configured, narrowed to
``EVOMEM_MCP_NAMESPACE`` when that is set.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Callable, Collection, Iterator
from typing import Annotated, Any, Literal

import anyio
import uvicorn
from mcp.server import MCPServer
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evomem.errors import ConfigError, EvomemError, StoreLockedError
from evomem.logs import get_logger
from evomem.mcp.backend import (
    ControlOut,
    InsightOut,
    ReportOut,
    RetrieveOut,
    ReviewsOut,
    ToolBackend,
    VerdictIn,
    describe,
)
from evomem.results import EventState
from evomem.runfiles import service_url
from evomem.sdk import Memory, RemoteMemory
from evomem.sdk.remote import acting_for
from evomem.service.auth import OPEN, Principal, TokenAuth, Unauthorized
from evomem.service.http_edge import EdgeLimits, uvicorn_config
from evomem.settings import Settings

log = get_logger("evomem.mcp")

MCP_PATH = "/mcp"
INSTRUCTIONS = (
    "Long-term memory shared by a fleet of agents. Before a task call retrieve_insights with the task "
    "and put its prompt in your context; after the task call report_outcome with the retrieval_id, "
    "whether the task was resolved or failed, a verdict on each insight you were given (helpful, "
    "harmful, or partial with a reworded text), and optionally one new insight worth keeping."
)


class Tools:
    """The MCP server's tools, bound to a backend and to how a caller's principal is found."""

    def __init__(
        self, backend: ToolBackend, principal: Principal, auth: TokenAuth | None, *, forward: bool = False
    ) -> None:
        self.backend = backend
        self.principal = principal  # stdio's, or open HTTP's
        self.auth = auth  # HTTP with tokens: each request's own principal
        # HTTP in front of a service, with no tokens of its own: each caller's token goes on to the
        # service, which checks it; the process's own EVOMEM_TOKEN is never lent to a caller
        self.forward = forward

    def _run(self, ctx: Context[Any, Any], fn: Any) -> Any:
        if not self.forward:
            return _run(fn)
        request = ctx.request_context.request
        headers = getattr(request, "headers", None)
        with acting_for(headers.get("authorization") if headers is not None else None):
            return _run(fn)

    def caller(self, ctx: Context[Any, Any]) -> Principal:
        """The principal of this call: the token of its HTTP request, or the process's own."""
        request = ctx.request_context.request
        user = getattr(request, "scope", {}).get("user") if request is not None else None
        if isinstance(user, AuthenticatedUser):
            claims = user.access_token.claims or {}
            return Principal(user.access_token.client_id, frozenset(claims.get("namespaces", ())))
        if request is not None and self.auth is not None and self.auth.enabled:
            raise ToolError("unauthorised")  # never reached through BearerGate; refuse rather than open
        return self.principal

    def register(self, server: MCPServer[Any]) -> None:
        server.add_tool(
            self.retrieve_insights,
            annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
            structured_output=True,
        )
        server.add_tool(
            self.report_outcome,
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False),
            structured_output=True,
        )
        server.add_tool(
            self.revert_edits,
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False),
            structured_output=True,
        )
        server.add_tool(
            self.pin_insight,
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False),
            structured_output=True,
        )
        server.add_tool(
            self.list_reviews,
            annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
            structured_output=True,
        )
        server.add_tool(
            self.review_edit,
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False),
            structured_output=True,
        )
        server.add_tool(
            self.inspect_insight,
            annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
            structured_output=True,
        )
        server.add_tool(
            self.event_state,
            annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
            structured_output=True,
        )

    def retrieve_insights(
        self,
        ctx: Context[Any, Any],
        query: Annotated[str, Field(description="the task at hand, as you would state it")],
        namespace: Annotated[
            str | None, Field(description="the memory to read; default: the one this connection is bound to")
        ] = None,
        budget: Annotated[int | None, Field(ge=1, le=100, description="insights at most")] = None,
    ) -> Annotated[CallToolResult, RetrieveOut]:
        """Insights learned from similar past tasks, ranked by how often they helped minus how often
        they misled; the result's prompt is ready to put in your context, each insight with its id."""
        out = self._run(ctx, lambda: self.backend.retrieve(self.caller(ctx), query, namespace, budget))
        return _result(out.prompt, out)

    def report_outcome(
        self,
        ctx: Context[Any, Any],
        status: Annotated[Literal["resolved", "failed"], Field(description="how the task ended")],
        retrieval_id: Annotated[
            str | None, Field(description="the retrieval_id of retrieve_insights for this task")
        ] = None,
        query: Annotated[
            str | None, Field(description="the task; may be left out when retrieval_id is given")
        ] = None,
        namespace: Annotated[str | None, Field(description="default: the retrieval's namespace")] = None,
        verdicts: Annotated[
            list[VerdictIn] | None, Field(description="a verdict on each insight you were given")
        ] = None,
        proposed_insight: Annotated[
            str | None, Field(description="one new, general lesson from this task worth keeping")
        ] = None,
        final_answer: str | None = None,
        feedback: Annotated[str | None, Field(description="what the environment said of the outcome")] = None,
        trajectory: Annotated[list[str] | None, Field(description="the task's main steps")] = None,
    ) -> Annotated[CallToolResult, ReportOut]:
        """Report how a task went; the memory is edited in the background: helpful insights gain
        support, harmful ones lose it (and are archived once they mislead too often), a partial one
        is revised to your text, and a proposed insight is added unless it repeats one."""
        principal = self.caller(ctx)
        out = self._run(
            ctx,
            lambda: self.backend.report(
                principal,
                status,
                retrieval_id=retrieval_id,
                query=query,
                namespace=namespace,
                verdicts=verdicts,
                proposed_insight=proposed_insight,
                final_answer=final_answer,
                feedback=feedback,
                trajectory=trajectory,
            ),
        )
        self.backend.on_report()
        return _result(f"reported: event {out.event_id} in namespace {out.namespace}", out)

    def revert_edits(
        self,
        ctx: Context[Any, Any],
        event_id: Annotated[str | None, Field(description="the event whose edits are undone")] = None,
        since: Annotated[
            str | None,
            Field(description="or: every edit of the namespace since this ISO 8601 time (with zone)"),
        ] = None,
        insight_id: Annotated[
            str | None, Field(description="with event_id: only its edits of this insight")
        ] = None,
        namespace: Annotated[
            str | None, Field(description="default: the one this connection is bound to")
        ] = None,
        reason: str | None = None,
    ) -> Annotated[CallToolResult, ControlOut]:
        """Undo edits as new edits (nothing is deleted): a revised insight's previous version serves
        again, an archived one is active again, an added one is archived, evidence is withdrawn."""
        principal = self.caller(ctx)
        out = _run(
            lambda: self.backend.revert(
                principal,
                event_id=event_id,
                since=since,
                insight_id=insight_id,
                namespace=namespace,
                reason=reason,
            )
        )
        return _result(f"revert accepted: request {out.request_id} in namespace {out.namespace}", out)

    def pin_insight(
        self,
        ctx: Context[Any, Any],
        insight_id: Annotated[str, Field(min_length=1, max_length=128, description="an insight's id")],
        pinned: Annotated[bool, Field(description="true: pin it; false: unpin it")] = True,
        reason: str | None = None,
    ) -> Annotated[CallToolResult, ControlOut]:
        """Pin an insight known to be right: no verdict archives or revises it while it is pinned
        (their evidence is still recorded). Unpin to let them act again."""
        principal = self.caller(ctx)
        out = _run(lambda: self.backend.pin(principal, insight_id, pinned, reason))
        return _result(f"{out.action} accepted: request {out.request_id}", out)

    def list_reviews(
        self,
        ctx: Context[Any, Any],
        namespace: Annotated[
            str | None, Field(description="default: the one this connection is bound to")
        ] = None,
        state: Annotated[
            Literal["pending", "approved", "rejected"] | None, Field(description="none: every state")
        ] = "pending",
    ) -> Annotated[CallToolResult, ReviewsOut]:
        """The edits a namespace under review holds for a decision: what each would do and why it
        was held."""
        principal = self.caller(ctx)
        out = _run(lambda: self.backend.reviews(principal, namespace, state))
        text = "\n".join(
            f"{r['review_id']} {r['state']}: {r['op']} {r['insight_id'] or r['new_id']} ({r['reason']})"
            for r in out.reviews
        )
        return _result(text or f"no edits held in namespace {out.namespace}", out)

    def review_edit(
        self,
        ctx: Context[Any, Any],
        review_id: Annotated[str, Field(min_length=1, max_length=128, description="list_reviews' id")],
        approve: Annotated[bool, Field(description="true: apply the edit (once); false: reject it")],
        namespace: Annotated[
            str | None, Field(description="default: the one this connection is bound to")
        ] = None,
        reason: str | None = None,
    ) -> Annotated[CallToolResult, ControlOut]:
        """Approve (apply once) or reject an edit held for review; the first decision stands."""
        principal = self.caller(ctx)
        out = _run(lambda: self.backend.review(principal, review_id, approve, namespace, reason))
        return _result(f"{out.action} accepted: request {out.request_id} in namespace {out.namespace}", out)

    def inspect_insight(
        self,
        ctx: Context[Any, Any],
        insight_id: Annotated[str, Field(min_length=1, max_length=128, description="an insight's id")],
    ) -> Annotated[CallToolResult, InsightOut]:
        """An insight's evidence (the past tasks it helped and harmed), its state, its revision
        lineage and every edit applied to it."""
        out = self._run(ctx, lambda: self.backend.inspect(self.caller(ctx), insight_id))
        text = (
            f"[{out.id}] {out.state}, v{out.version}, helped {out.helped}, harmed {out.harmed}: {out.text}\n"
            + "lineage: "
            + " -> ".join(f"{s.id} ({s.state})" for s in out.lineage)
        )
        return _result(text, out)

    def event_state(
        self,
        ctx: Context[Any, Any],
        event_id: Annotated[str, Field(min_length=1, max_length=64, description="report_outcome's event_id")],
    ) -> Annotated[CallToolResult, EventState]:
        """Whether a reported outcome was applied yet: queued, applied (with the edits it made) or
        dead-lettered (with the reason it was refused)."""
        out = _run(lambda: self.backend.event(self.caller(ctx), event_id))
        text = f"event {out.event_id}: {out.state}"
        if out.state == "applied":
            text += " — " + (", ".join(f"{e.op} {e.outcome}" for e in out.edits) or "no edit")
        elif out.reason:
            text += f" — {out.reason}"
        return _result(text, out)


def _run(fn: Any) -> Any:
    try:
        return fn()
    except EvomemError as exc:
        raise ToolError(describe(exc)) from None


def _result(text: str, out: Any) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=out.model_dump(mode="json")
    )


class BearerGate:
    """The HTTP transport's door: the same bearer tokens as the HTTP service, checked before the SDK
    sees the request. The principal rides in ``scope["user"]`` as the SDK's ``AuthenticatedUser``,
    so the SDK binds each session to the token that opened it, and the tools read it back.

    It also holds each token to ``sessions_per_token`` open sessions (the SDK's own cap is one for
    the whole server, which one tenant could fill): a request that would open one more gets 429.
    ``live`` tells which session ids the SDK still holds (closed, expired and idle-reaped ones go)."""

    def __init__(
        self,
        app: ASGIApp,
        auth: TokenAuth,
        *,
        sessions_per_token: int | None = None,
        live: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self.app = app
        self.auth = auth
        self.sessions_per_token = sessions_per_token
        self.live = live
        self._sessions: dict[str, set[str]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        owner = ""  # open: the whole server is one owner
        if self.auth.enabled:
            header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
            try:
                principal = self.auth.authenticate(header)
            except Unauthorized as exc:
                await _refuse(
                    send, 401, str(exc), "Authorization", {b"www-authenticate": b'Bearer realm="evomem"'}
                )
                return
            token = AccessToken(
                token="",  # never kept: the principal's name identifies it
                client_id=principal.name,
                scopes=[],
                claims={"namespaces": sorted(principal.namespaces)},
            )
            scope["user"] = AuthenticatedUser(token)
            owner = principal.name
        opening = scope.get("method") == "POST" and not any(
            k == b"mcp-session-id" for k, _ in scope["headers"]
        )
        if not opening or self.sessions_per_token is None:
            await self.app(scope, receive, send)
            return
        held = self._held(owner)
        if len(held) >= self.sessions_per_token:
            message = f"this token holds {len(held)} MCP sessions, the most it may; close one (DELETE) first"
            await _refuse(send, 429, message, "Mcp-Session-Id", {b"retry-after": b"1"})
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                for k, v in message.get("headers", ()):
                    if k.lower() == b"mcp-session-id":
                        held.add(v.decode("latin-1"))
            await send(message)

        await self.app(scope, receive, watch)

    def _held(self, owner: str) -> set[str]:
        held = self._sessions.setdefault(owner, set())
        if self.live is not None:
            live = self.live()
            held.intersection_update(live)
        return held


async def _refuse(send: Send, status: int, error: str, fld: str, extra: dict[bytes, bytes]) -> None:
    body = json.dumps({"error": error, "field": fld}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + list(extra.items())})
    await send({"type": "http.response.body", "body": body})


# -- assembling and running -------------------------------------------------------------------------
def open_backend(settings: Settings) -> ToolBackend:
    """The local stores, or the service of ``EVOMEM_URL``; when the embedded store is held by a
    running service (``evomem up``), that service."""
    default = settings.mcp_namespace or "default"
    if settings.url is not None:
        return ToolBackend(RemoteMemory.from_settings(settings), default)
    try:
        memory = Memory.open_local(settings)
    except StoreLockedError:
        url = service_url(settings.data_dir)
        if url is None:
            raise
        log.info("mcp.using_service", url=url)
        return ToolBackend(RemoteMemory(url, _token(settings)), default)
    return LocalToolBackend(memory, default, consolidate=settings.mcp_consolidate)


class LocalToolBackend(ToolBackend):
    """On the local stores the server keeps the index in step and, unless told not to, consolidates
    what it is told in a thread of its own, so a desktop agent with no workers still learns."""

    def __init__(self, memory: Memory, default_namespace: str, *, consolidate: bool) -> None:
        super().__init__(memory, default_namespace)
        self.local = memory
        memory.follow()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if consolidate:
            self._thread = threading.Thread(
                target=self._consolidate, name="evomem-mcp-consolidate", daemon=True
            )
            self._thread.start()

    def on_report(self) -> None:
        self._wake.set()

    def _consolidate(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.local.consolidate()
            except Exception as exc:  # the next report tries again; workers may do it meanwhile
                log.warning("mcp.consolidate_failed", error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        super().close()


def _token(settings: Settings) -> str | None:
    return settings.token.get_secret_value() if settings.token else None


def make_auth(settings: Settings, backend: ToolBackend | None = None) -> TokenAuth:
    """``EVOMEM_TOKENS``, plus the run-time tokens when the backend is the local stores."""
    auth = TokenAuth(settings.tokens.get_secret_value() if settings.tokens else None)
    if isinstance(backend, LocalToolBackend):
        auth.attach(backend.local.runtime.tokens)
    return auth


def stdio_principal(settings: Settings, auth: TokenAuth, remote: bool) -> Principal:
    """Over stdio the process is one caller: with tokens configured, the one of ``EVOMEM_TOKEN``
    (against a service, the service checks it); narrowed to ``EVOMEM_MCP_NAMESPACE`` if set."""
    principal = OPEN
    if auth.enabled and not remote:
        token = _token(settings)
        if token is None:
            raise ConfigError("tokens are required here: give this process its EVOMEM_TOKEN")
        try:
            principal = auth.authenticate(f"Bearer {token}")
        except Unauthorized:
            raise ConfigError("EVOMEM_TOKEN is not one of EVOMEM_TOKENS nor a run-time token") from None
    return bind_namespace(principal, settings.mcp_namespace)


def bind_namespace(principal: Principal, namespace: str | None) -> Principal:
    if namespace is None:
        return principal
    if not principal.may(namespace):
        raise ConfigError(f"EVOMEM_MCP_NAMESPACE {namespace!r} is not one of this token's namespaces")
    return Principal(principal.name, frozenset({namespace}))


def build(
    backend: ToolBackend, principal: Principal, auth: TokenAuth | None = None, *, forward: bool = False
) -> MCPServer[Any]:
    """The MCP server with its tools; ``auth`` set for HTTP callers who bring their own token,
    ``forward`` for HTTP callers whose token goes on to the service of a remote backend."""
    from evomem import __version__

    server: MCPServer[Any] = MCPServer("evomem", version=__version__, instructions=INSTRUCTIONS)
    Tools(backend, principal, auth, forward=forward).register(server)
    return server


def http_app(server: MCPServer[Any], settings: Settings, auth: TokenAuth) -> ASGIApp:
    """The streamable HTTP app at ``/mcp`` behind the bearer gate. Without tokens it is open and,
    like the HTTP service, for loopback only: the SDK's DNS-rebinding guard checks Host and Origin."""
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=settings.http_host,
        max_request_body_size=settings.http_max_body_bytes,
    )
    manager = server.session_manager
    # the SDK keeps no public view of its open sessions; its registry is read, never written
    live: Callable[[], Collection[str]] = lambda: manager._server_instances.keys()  # noqa: E731
    return BearerGate(app, auth, sessions_per_token=settings.mcp_sessions_per_token, live=live)


def serve_stdio(settings: Settings) -> None:
    backend = open_backend(settings)
    try:
        principal = stdio_principal(settings, make_auth(settings, backend), remote=backend.remote)
        anyio.run(build(backend, principal).run_stdio_async)
    finally:
        backend.close()


class MCPHTTPServer:
    """The streamable HTTP app under uvicorn on a socket bound first (a port in use fails fast and
    opens nothing); ``serve_forever`` runs it in any thread, ``shutdown`` stops it."""

    def __init__(self, settings: Settings, port: int, backend: ToolBackend | None = None) -> None:
        from evomem.service.routes import LOOPBACK_HOSTS
        from evomem.service.server import bind

        self.socket = bind(settings.http_host, port)  # first: a port in use opens nothing
        try:
            self.backend = backend or open_backend(settings)
        except BaseException:
            self.socket.close()
            raise
        self.auth = make_auth(settings, self.backend)
        if not self.auth.enabled and settings.http_host not in LOOPBACK_HOSTS:
            self.close()
            raise ConfigError(
                "without EVOMEM_TOKENS the MCP server only listens on loopback; set tokens to bind "
                + settings.http_host
            )
        # in front of a service with no tokens here: forward each caller's own, lend none
        forward = self.backend.remote and not self.auth.enabled
        server = build(self.backend, bind_namespace(OPEN, settings.mcp_namespace), self.auth, forward=forward)
        config = uvicorn_config(
            http_app(server, settings, self.auth),
            EdgeLimits.from_settings(settings),
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        self._server = _Server(config)

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}{MCP_PATH}"

    def serve_forever(self) -> None:
        self._server.run(sockets=[self.socket])

    def shutdown(self) -> None:
        self._server.should_exit = True

    def close(self) -> None:
        self.socket.close()
        self.backend.close()


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: ``serve_http`` stops it so the memory closes cleanly."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve_http(settings: Settings, port: int) -> None:
    server = MCPHTTPServer(settings, port)
    previous = {
        sig: signal.signal(sig, lambda *_: server.shutdown()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        print(f"evomem MCP server on {server.url}", flush=True)
        server.serve_forever()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.close()


__all__ = [
    "MCP_PATH",
    "BearerGate",
    "MCPHTTPServer",
    "Tools",
    "bind_namespace",
    "build",
    "http_app",
    "make_auth",
    "open_backend",
    "serve_http",
    "serve_stdio",
    "stdio_principal",
]
