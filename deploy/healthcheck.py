#!/usr/bin/env python3
"""The health of an evomem process in its container, for Docker's HEALTHCHECK and compose.

    evomem-healthcheck service   # `evomem serve`: GET /healthz answers 200
    evomem-healthcheck worker    # `evomem worker`: GET /metrics answers, and says its Redis is up

Exit 0 when healthy, 1 when not (with one line saying why, which Docker keeps in the health log), 2
when the check cannot be made as configured. The ports are read from the same variables the
processes read (EVOMEM_HTTP_PORT, EVOMEM_WORKER_METRICS_PORT), with the same defaults. Standard
library only: the check runs every few seconds and must not pay for importing evomem.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

HTTP_PORT_DEFAULT = 8765  # Settings.http_port
TIMEOUT_S = 4.0
REDIS_UP = "evomem_worker_redis_up"


def _get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:  # a 503 of /healthz carries the reason in its body
        return int(exc.code), exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return 0, f"{type(reason).__name__}: {reason}"


def _port(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        return None


def check_service() -> tuple[int, str]:
    port = _port("EVOMEM_HTTP_PORT", HTTP_PORT_DEFAULT)
    if port is None:
        return 2, "EVOMEM_HTTP_PORT is not a port number"
    status, body = _get(f"http://127.0.0.1:{port}/healthz")
    if status == 200:
        return 0, "healthy"
    return 1, f"/healthz answered {status or 'nothing'}: {body.strip()[:300]}"


def check_worker() -> tuple[int, str]:
    port = _port("EVOMEM_WORKER_METRICS_PORT", None)
    if not port:  # unset, 0 (any free port: not knowable from outside) or not a number
        return 2, "set EVOMEM_WORKER_METRICS_PORT to a fixed port for the worker's health check"
    status, body = _get(f"http://127.0.0.1:{port}/metrics")
    if status != 200:
        return 1, f"/metrics answered {status or 'nothing'}: {body.strip()[:300]}"
    for line in body.splitlines():
        name, _, value = line.partition(" ")
        if name == REDIS_UP:
            return (0, "healthy") if value.strip() in ("1", "1.0") else (1, "the worker cannot reach Redis")
    return 1, f"/metrics has no {REDIS_UP}"


CHECKS = {"service": check_service, "worker": check_worker}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] not in CHECKS:
        print(f"usage: evomem-healthcheck {{{','.join(CHECKS)}}}", file=sys.stderr)
        return 2
    code, why = CHECKS[args[0]]()
    print(why, file=sys.stdout if code == 0 else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
