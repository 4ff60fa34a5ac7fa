"""The HTTP API on Starlette: the routes of ``api.ROUTES``, each run through one wrapper that guards
the request (origin, host, media type, body size and pace), maps any error through ``errors.STATUS``,
counts it in the metrics before the answer leaves, and writes the request's canonical log line,
``request.served``, with its stage timings (``evomem.timings``: the service's own, and the
retriever's embed, similar, expand, candidates and rank)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from anyio import CapacityLimiter, to_thread
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evomem import timings
from evomem.errors import TransientError
from evomem.logs import adopt, bind, bound, carried, get_logger
from evomem.service.api import (
    ROUTES,
    PinRequest,
    RetrieveRequest,
    RevertRequest,
    ReviewDecisionRequest,
    RouteSpec,
    openapi,
)
from evomem.service.auth import Principal
from evomem.service.http_errors import (
    CLOSE_AFTER,
    BodyTooLarge,
    ForeignOrigin,
    RequestTimeout,
    UnsupportedMediaType,
    classify,
)
from evomem.service.metrics import CONTENT_TYPE
from evomem.service.retrieval_service import RetrievalService
from evomem.settings import Settings
from schemas import TaskEvent

log = get_logger("evomem.service")

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
HOT_THREADS = 32
COLD_THREADS = 8
PROBE_THREADS = 4
#: Health and metrics answer within this, Redis stalled or not (a probe must not time out first).
HEALTH_DEADLINE_S = 0.7


@dataclass(slots=True)
class RequestRecord:
    """One request as its canonical line tells it: route, status, outcome, stage timings (ns)."""

    route: str
    method: str
    status: int = 0
    outcome: str = "ok"
    principal: str | None = None
    started_ns: int = 0
    stages_ns: dict[str, int] = field(default_factory=dict)
    total_ns: int = 0


@dataclass(slots=True)
class _Call:
    """What a route's work gets: the principal, the raw body and the record to time stages in."""

    request: Request
    principal: Principal | None
    body: bytes
    record: RequestRecord


Work = Callable[[_Call], Awaitable[Response]]


class Api:
    """The routes of the service, bound to a ``RetrievalService`` and the HTTP settings."""

    def __init__(self, service: RetrievalService, settings: Settings) -> None:
        self.service = service
        self.max_body = settings.http_max_body_bytes
        self.body_timeout_s = settings.http_body_timeout_s
        self.redis_timeout_s = settings.http_redis_timeout_s
        # threads for the routes' work: the hot routes, the insight views, and health and metrics
        # (which find Redis stalled within their bound even when the others hold every thread)
        self._hot = CapacityLimiter(HOT_THREADS)
        self._cold = CapacityLimiter(COLD_THREADS)
        self._probe = CapacityLimiter(PROBE_THREADS)
        self._openapi = json.dumps(openapi()).encode()
        work: dict[str, Work] = {
            "retrieve": self._retrieve,
            "events": self._events,
            "event": self._event,
            "insight": self._insight,
            "lineage": self._lineage,
            "retrieval": self._retrieval,
            "revert": self._revert,
            "pin": self._pin,
            "unpin": self._pin,
            "reviews": self._reviews,
            "approve": self._review,
            "reject": self._review,
            "healthz": self._health,
            "metrics": self._metrics,
            "openapi": self._openapi_doc,
        }
        self.routes = [
            Route(spec.path, self._endpoint(spec, work[spec.name]), methods=[spec.method], name=spec.name)
            for spec in ROUTES
        ]

    # -- the one wrapper -----------------------------------------------------------------------------
    def _endpoint(self, spec: RouteSpec, work: Work) -> Callable[[Request], Awaitable[Response]]:
        clock = time.perf_counter_ns
        body_name = "event" if spec.request is TaskEvent else "body"

        async def endpoint(request: Request) -> Response:
            record = RequestRecord(spec.name, request.method, started_ns=clock())
            times = record.stages_ns
            read_all = spec.request is None
            # the request's ids on every line logged while it is served; its stages timed into the record
            with bound(route=spec.name), timings.recording(times):
                try:
                    t0 = clock()
                    if spec.secured:
                        principal: Principal | None = await self._off_loop(
                            lambda: self._admit(request, spec), self._hot, record
                        )
                    else:
                        self._guard(request, spec)  # tokens already known: no store is read
                        principal = None
                    record.principal = principal.name if principal else None
                    bind(principal=record.principal)
                    t1 = clock()
                    times["auth"] = t1 - t0
                    body = b""
                    if spec.request is not None:
                        body = await self._read_body(request)
                        times["read_body"] = clock() - t1
                    read_all = True
                    response = await work(_Call(request, principal, body, record))
                    record.status = response.status_code
                except Exception as exc:
                    response = self._error(exc, spec, body_name, record, read_all)
                record.total_ns = clock() - record.started_ns
                self._done(record)
            return response

        return endpoint

    def _error(
        self, exc: Exception, spec: RouteSpec, body_name: str, record: RequestRecord, read_all: bool
    ) -> Response:
        status, outcome, message, fld = classify(exc, body_name)
        if status == 500:
            log.error("request.failed", route=spec.name, exc_info=exc)  # with its traceback
        headers = {}
        retry_after = getattr(exc, "retry_after_s", None)
        if status == 429 and retry_after is not None:
            headers["Retry-After"] = str(max(1, round(retry_after)))
        if status in CLOSE_AFTER or not read_all:
            headers["Connection"] = "close"  # an unread body must not be parsed as the next request
        record.status, record.outcome = status, outcome
        return _json_error(status, message, fld, headers)

    def _done(self, record: RequestRecord) -> None:
        # counted before the response is sent, so a client that has its answer sees it in /metrics
        self.service.metrics.observe(record.route, record.outcome, record.total_ns / 1e9)
        if not log.isEnabledFor(logging.INFO):
            return
        log.info(  # the canonical line of a request (at INFO: `evomem --log-level INFO serve` shows it)
            "request.served",
            route=record.route,
            status=record.status,
            outcome=record.outcome,
            principal=record.principal,
            total_ms=round(record.total_ns / 1e6, 3),
            **{f"{k}_ms": round(v / 1e6, 3) for k, v in record.stages_ns.items()},
        )

    # -- guards --------------------------------------------------------------------------------------
    def _admit(self, request: Request, spec: RouteSpec) -> Principal:
        """The guards and the token of a secured route (run-time tokens may be read from Redis)."""
        stalled = self.service.redis_probe.suspect_since
        if stalled is not None:
            raise TransientError(f"redis has not answered for {time.time() - stalled:.1f} s; retry")
        self._guard(request, spec)
        return self.service.auth.authenticate(request.headers.get("authorization"))

    async def _off_loop(
        self,
        fn: Callable[[], Any],
        limiter: CapacityLimiter,
        record: RequestRecord,
        timeout_s: float | None = None,
    ) -> Any:
        """``fn`` in a worker thread, waited on for ``http_redis_timeout_s`` (or ``timeout_s``) at
        most: a stalled Redis holds a thread, never the event loop, and past the bound the request is
        answered 503."""
        t0 = time.perf_counter_ns()
        bound_s = self.redis_timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(bound_s):
                result, ids = await to_thread.run_sync(carried(fn), limiter=limiter, abandon_on_cancel=True)
            adopt(ids)  # the ids the work bound (namespace, retrieval id) reach the request's line
            return result
        except TimeoutError:
            self.service.redis_probe.suspect()
            raise TransientError(f"redis did not answer within {bound_s} s; retry") from None
        finally:
            record.stages_ns["work"] = record.stages_ns.get("work", 0) + time.perf_counter_ns() - t0

    def _guard(self, request: Request, spec: RouteSpec) -> None:
        if not self.service.auth.enabled:
            # Without tokens any page in the developer's browser could post here (a "simple" CORS
            # request) or, through DNS rebinding, read the answers: only loopback hosts and origins.
            host = _hostname(request.headers.get("host", ""))
            if host not in LOOPBACK_HOSTS:
                raise ForeignOrigin(f"host {host!r} is not this loopback service", "Host")
            origin = request.headers.get("origin")
            if origin is not None and _hostname(urlsplit(origin).netloc) not in LOOPBACK_HOSTS:
                raise ForeignOrigin("requests from web pages of other origins are refused", "Origin")
        if spec.request is not None:
            ctype = request.headers.get("content-type")
            if ctype is not None:
                media = ctype.split(";", 1)[0].strip().lower()
                if media != "application/json" and not media.endswith("+json"):
                    raise UnsupportedMediaType(
                        f"the body must be application/json, not {media!r}", "Content-Type"
                    )

    async def _read_body(self, request: Request) -> bytes:
        """The body, never more than ``max_body`` bytes of it, each part within the idle timeout."""
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            raise BodyTooLarge(f"the body is larger than {self.max_body} bytes", "body")
        chunks: list[bytes] = []
        size = 0
        receive = request.receive
        while True:
            try:
                async with asyncio.timeout(self.body_timeout_s):
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout("the body did not arrive in time", "body") from None
            if message["type"] == "http.disconnect":
                raise RequestTimeout("the client went away", "body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise BodyTooLarge(f"the body is larger than {self.max_body} bytes", "body")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    # -- the routes' work ----------------------------------------------------------------------------
    # Every route that may wait on Redis runs in a worker thread, waited on for a bounded time
    # (``_off_loop``): on the event loop, a Redis that stopped answering froze every route of the
    # service, health and the OpenAPI document included, for its socket timeout. A thread hop costs
    # ~0.3 ms of a ~2 ms retrieval (bench/README.md); the hot routes have a limiter of their own,
    # so health and metrics are answered beside them.
    async def _retrieve(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, body, times = call.principal, call.body, call.record.stages_ns

        def work() -> bytes:
            t0 = time.perf_counter_ns()
            request = RetrieveRequest.model_validate_json(body)
            t1 = time.perf_counter_ns()
            answer = self.service.retrieve(principal, request)
            t2 = time.perf_counter_ns()
            data = answer.model_dump_json().encode()
            times.update(validate=t1 - t0, retrieve=t2 - t1, serialise=time.perf_counter_ns() - t2)
            return data

        return _json(200, await self._off_loop(work, self._hot, call.record))

    async def _events(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, body = call.principal, call.body

        def work() -> bytes:
            event = TaskEvent.model_validate_json(body)
            return self.service.publish(principal, event, len(body)).model_dump_json().encode()

        return _json(202, await self._off_loop(work, self._hot, call.record))

    async def _event(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, event_id = call.principal, call.request.path_params["id"]
        return _json(
            200,
            await self._off_loop(
                lambda: _dump(self.service.event(principal, event_id)), self._cold, call.record
            ),
        )

    async def _insight(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, insight_id = call.principal, call.request.path_params["id"]
        as_of = call.request.query_params.get("as_of")
        return _json(
            200,
            await self._off_loop(
                lambda: _dump(self.service.insight(principal, insight_id, as_of)), self._cold, call.record
            ),
        )

    async def _retrieval(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, retrieval_id = call.principal, call.request.path_params["id"]
        namespace = call.request.query_params.get("namespace", "default")
        return _json(
            200,
            await self._off_loop(
                lambda: _dump(self.service.retrieval(principal, retrieval_id, namespace)),
                self._cold,
                call.record,
            ),
        )

    async def _lineage(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, insight_id = call.principal, call.request.path_params["id"]
        return _json(
            200,
            await self._off_loop(
                lambda: _dump(self.service.lineage(principal, insight_id)), self._cold, call.record
            ),
        )

    async def _revert(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, body = call.principal, call.body

        def work() -> bytes:
            return _dump(self.service.revert(principal, RevertRequest.model_validate_json(body)))

        return _json(202, await self._off_loop(work, self._hot, call.record))

    async def _pin(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, body = call.principal, call.body
        insight_id = call.request.path_params["id"]
        action = call.request.url.path.rsplit("/", 1)[-1]  # pin | unpin

        def work() -> bytes:
            request = PinRequest.model_validate_json(body or b"{}")
            return _dump(self.service.pin(principal, insight_id, request, action))

        return _json(202, await self._off_loop(work, self._hot, call.record))

    async def _reviews(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, params = call.principal, call.request.query_params
        namespace, state = params.get("namespace", "default"), params.get("state", "pending")
        return _json(
            200,
            await self._off_loop(
                lambda: _dump(self.service.reviews(principal, namespace, state)), self._cold, call.record
            ),
        )

    async def _review(self, call: _Call) -> Response:
        assert call.principal is not None
        principal, body = call.principal, call.body
        review_id = call.request.path_params["id"]
        action = call.request.url.path.rsplit("/", 1)[-1]  # approve | reject

        def work() -> bytes:
            request = ReviewDecisionRequest.model_validate_json(body or b"{}")
            return _dump(self.service.review(principal, review_id, request, action))

        return _json(202, await self._off_loop(work, self._hot, call.record))

    async def _health(self, call: _Call) -> Response:
        try:
            healthy, body = await self._off_loop(
                self.service.health, self._probe, call.record, min(HEALTH_DEADLINE_S, self.redis_timeout_s)
            )
        except TransientError:
            healthy, body = self.service.health()  # Redis now known stalled: read without it
        return _json(200 if healthy else 503, json.dumps(body, default=str).encode())

    async def _metrics(self, call: _Call) -> Response:
        try:
            data = await self._off_loop(
                self.service.metrics.render,
                self._probe,
                call.record,
                min(HEALTH_DEADLINE_S, self.redis_timeout_s),
            )
        except TransientError:
            data = self.service.metrics.render()  # the gauges now read no Redis
        return Response(data, 200, media_type=CONTENT_TYPE)

    async def _openapi_doc(self, call: _Call) -> Response:
        return _json(200, self._openapi)

    # -- what no route matches -----------------------------------------------------------------------
    async def not_routed(self, request: Request, exc: Exception) -> Response:
        """404 for an unknown path, 405 (with ``Allow``) for a method a path does not take."""
        assert isinstance(exc, HTTPException)
        record = RequestRecord("unknown", request.method, status=exc.status_code, outcome="not_found")
        if exc.status_code == 405:
            record.outcome = "method_not_allowed"
        message = (
            f"no route {request.method} {request.url.path}"
            if exc.status_code == 404
            else f"method {request.method} not allowed here"
        )
        self._done(record)
        headers = dict(exc.headers or {})
        headers["Connection"] = "close"  # the body of an unrouted request is never read
        return _json_error(exc.status_code, message, None, headers)


def _dump(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()


def _json(status: int, data: bytes) -> Response:
    return Response(data, status, media_type="application/json")


def _json_error(status: int, message: str, fld: str | None, headers: dict[str, str]) -> Response:
    return Response(
        json.dumps({"error": message, "field": fld}).encode(), status, headers, media_type="application/json"
    )


def _hostname(netloc: str) -> str:
    """The host of a Host header or an origin's netloc, without port or IPv6 brackets."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1 : netloc.find("]")] if "]" in netloc else netloc
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def create_app(service: RetrievalService, settings: Settings) -> tuple[Starlette, Api]:
    api = Api(service, settings)
    app = Starlette(routes=api.routes, exception_handlers={HTTPException: api.not_routed})
    return app, api


__all__ = ["Api", "RequestRecord", "create_app"]
