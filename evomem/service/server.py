"""The HTTP layer: a threading HTTP/1.1 server (keep-alive), JSON in and out, errors mapped to
status codes. Routes: DESIGN §8."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from evomem.errors import ConfigError, EvomemError, InvalidEventError, NotFoundError, TransientError
from evomem.logs import get_logger
from evomem.memory import Memory
from evomem.service.api import RetrieveRequest, openapi
from evomem.service.app import RetrievalService
from evomem.service.auth import Forbidden, TokenAuth, Unauthorized
from evomem.settings import Settings
from evomem.stream import reason_of
from schemas import TaskEvent

log = get_logger("evomem.service")

MAX_BODY = 1 << 20
_INSIGHT = re.compile(r"^/v1/insights/([A-Za-z0-9_.:-]{1,128})(/lineage)?$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out as separate writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK held every kept-alive response back ~40 ms (bench/README.md)
    disable_nagle_algorithm = True
    server: EvomemHTTPServer

    # -- plumbing --------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # routed through the metrics instead
        return

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: BaseModel | dict[str, Any]) -> None:
        data = (
            payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload, default=str)
        )
        self._send(status, data.encode())

    def _error(self, status: int, message: str, field: str | None = None) -> None:
        self._json(status, {"error": message, "field": field})

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise InvalidEventError("body", f"larger than {MAX_BODY} bytes")
        return self.rfile.read(length)

    def _dispatch(self, route: str, fn: Any) -> None:
        started = time.perf_counter()
        outcome = "ok"
        try:
            fn()
        except Unauthorized as exc:
            outcome = "unauthorized"
            self._error(401, str(exc))
        except Forbidden as exc:
            outcome = "forbidden"
            self._error(403, str(exc))
        except NotFoundError as exc:
            outcome = "not_found"
            self._error(404, str(exc))
        except (InvalidEventError, ValidationError, ValueError) as exc:
            outcome = "invalid"
            reason, field = reason_of(exc)
            self._error(422, reason, field)
        except TransientError as exc:
            outcome = "unavailable"
            self._error(503, str(exc))
        except EvomemError as exc:
            outcome = "error"
            self._error(500, str(exc))
        except Exception:  # never a stack trace, a setting or a credential in a response
            outcome = "error"
            log.exception("request.failed", route=route)
            self._error(500, "internal error")
        finally:
            self.server.service.metrics.observe(route, outcome, time.perf_counter() - started)

    def _principal(self) -> Any:
        return self.server.service.auth.authenticate(self.headers.get("Authorization"))

    # -- routes ----------------------------------------------------------------------------------
    def do_POST(self) -> None:
        svc = self.server.service
        if self.path == "/v1/retrieve":

            def retrieve() -> None:
                body = self._body()  # read first: an unread body would corrupt the kept-alive connection
                principal = self._principal()
                self._json(200, svc.retrieve(principal, RetrieveRequest.model_validate_json(body)))

            self._dispatch("retrieve", retrieve)
        elif self.path == "/v1/events":

            def events() -> None:
                body = self._body()
                principal = self._principal()
                self._json(202, svc.publish(principal, TaskEvent.model_validate_json(body)))

            self._dispatch("events", events)
        else:
            self._body()
            self._dispatch("unknown", lambda: self._error(404, f"no route POST {self.path}"))

    def do_GET(self) -> None:
        svc = self.server.service
        match = _INSIGHT.match(self.path)
        if match:
            insight_id, lineage = match.group(1), match.group(2)

            def insight() -> None:
                principal = self._principal()
                body = svc.lineage(principal, insight_id) if lineage else svc.insight(principal, insight_id)
                self._json(200, body)

            self._dispatch("lineage" if lineage else "insight", insight)
        elif self.path == "/healthz":

            def health() -> None:
                healthy, body = svc.health()
                self._json(200 if healthy else 503, body)

            self._dispatch("healthz", health)
        elif self.path == "/metrics":
            self._dispatch(
                "metrics", lambda: self._send(200, svc.metrics.render().encode(), "text/plain; version=0.0.4")
            )
        elif self.path == "/openapi.json":
            self._dispatch("openapi", lambda: self._json(200, openapi()))
        else:
            self._dispatch("unknown", lambda: self._error(404, f"no route GET {self.path}"))


class EvomemHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # the default listen backlog of 5 made 64 agents connecting at once wait ~1 s for retries
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], service: RetrievalService) -> None:
        super().__init__(address, _Handler)
        self.service = service

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


def build_server(settings: Settings, memory: Memory | None = None) -> EvomemHTTPServer:
    auth = TokenAuth(settings.tokens.get_secret_value() if settings.tokens else None)
    if not auth.enabled and settings.http_host not in ("127.0.0.1", "localhost", "::1"):
        raise ConfigError(
            "without EVOMEM_TOKENS the service only listens on loopback; set tokens to bind "
            f"{settings.http_host}"
        )
    memory = memory or Memory.open_local(settings)
    memory.follow()
    return EvomemHTTPServer((settings.http_host, settings.http_port), RetrievalService(memory, auth))


def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT; the URL is written under DATA_DIR so other processes can find it."""
    server = build_server(settings)
    url_file = settings.data_dir / "run" / "service.url"
    url_file.parent.mkdir(parents=True, exist_ok=True)
    url_file.write_text(server.url)
    stop = threading.Event()

    def shutdown(*_: Any) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, shutdown)
    log.info("service.listening", url=server.url, auth=server.service.auth.enabled)
    print(f"evomem retrieval service on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        server.service.memory.close()
        url_file.unlink(missing_ok=True)


def service_url(data_dir: Path) -> str | None:
    """The URL of the service that holds this DATA_DIR's store, if one runs."""
    path = data_dir / "run" / "service.url"
    return path.read_text().strip() if path.exists() else None


__all__ = ["EvomemHTTPServer", "build_server", "serve", "service_url"]
