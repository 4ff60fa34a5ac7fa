"""The HTTP contract fuzzed from its own OpenAPI document (schemathesis) against the real service:
no 5xx, every response as documented, schema-invalid input refused and schema-valid input taken,
errors naming a field the request has, 405 (with ``Allow``) for methods a path does not declare."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import SecretStr

from evomem import Settings
from evomem.service.api import ROUTES, openapi
from evomem.service.server import EvomemHTTPServer, build_server

AUTH = {"Authorization": "Bearer tok-admin"}
EXAMPLES = 25  # per operation and phase: enough to find what the first fuzzing found, quick in `make test`

#: 413 is how the service refuses a body past EVOMEM_HTTP_MAX_BODY_BYTES before reading it: a
#: rejection, which schemathesis does not count as one by default. An event may be schema-valid and
#: still name an insight that is not in its namespace: 422, naming that field (checked below). So
#: may a retrieval's ``as_of`` lie outside the retention window, and a revert name neither an event
#: nor a time, or an event that was never applied (404).
CONFIG = schemathesis.config.SchemathesisConfig.from_str(
    """
[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]

[[operations]]
include-path = "/v1/events"
checks.positive_data_acceptance.expected-statuses = ["2xx", 401, 403, 404, 409, 422, 429]

[[operations]]
include-path = "/v1/retrieve"
checks.positive_data_acceptance.expected-statuses = ["2xx", 401, 403, 422, 429]

[[operations]]
include-path = "/v1/revert"
checks.positive_data_acceptance.expected-statuses = ["2xx", 401, 403, 404, 422]
"""
)
DOCUMENT = openapi()
schema = schemathesis.openapi.from_dict(DOCUMENT, config=CONFIG)  # what /openapi.json serves

#: The fields an insight reference can fail on, once the body is valid by its schema.
REFERENCES = {"retrieved_insight_ids", "insight_feedback", "retrieval_id"}


def _request_fields(method: str, path: str) -> set[str]:
    op = DOCUMENT["paths"][path][method.lower()]
    ref = (
        op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
    )
    if ref is None:
        return set()
    return set(DOCUMENT["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"])


@schemathesis.check
def errors_name_a_field_of_the_request(ctx: Any, response: Any, case: schemathesis.Case) -> None:
    """A 422 names the field that is wrong: one of the body's properties, a key the body had that it
    may not have, or ``body`` (``event`` on /v1/events) for the body as a whole; never a field of
    another route."""
    if response.status_code != 422:
        return
    field = response.json().get("field")
    assert field, f"422 without a field: {response.text}"
    root = re.split(r"[.\[]", field, maxsplit=1)[0]
    whole = "event" if case.path == "/v1/events" else "body"
    fields = _request_fields(case.method, case.path)
    if isinstance(case.body, dict):
        fields |= set(case.body)
    # a key the body may not have is named whole, whatever it holds ('.' or '[' included)
    assert root == whole or root in fields or field in fields, (
        f"422 names {field!r}, not a field of {case.path}: {response.text}"
    )


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[EvomemHTTPServer]:
    base = Settings(data_dir=tmp_path_factory.mktemp("fuzz") / "data", redis_url=redis_url)
    srv = build_server(base.model_copy(update={"tokens": SecretStr("tok-admin=*"), "http_port": 0}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()
    srv.service.runtime.close()


@pytest.fixture
def live(service: EvomemHTTPServer, redis_client: redis.Redis) -> EvomemHTTPServer:
    return service


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_holds_its_contract(case: schemathesis.Case, service: EvomemHTTPServer) -> None:
    case.call_and_validate(base_url=service.url, headers=AUTH)


def test_served_document_is_the_fuzzed_one(live: EvomemHTTPServer) -> None:
    assert httpx.get(f"{live.url}/openapi.json").json() == DOCUMENT


@pytest.mark.parametrize("method", ["TRACE", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_undeclared_methods_are_405_with_allow(live: EvomemHTTPServer, method: str) -> None:
    declared: dict[str, set[str]] = {}
    for route in ROUTES:
        declared.setdefault(route.path.replace("{id}", "some-id"), set()).add(route.method)
    with httpx.Client(base_url=live.url, headers=AUTH) as http:
        for path, methods in declared.items():
            response = http.request(method, path)
            assert response.status_code == 405, (method, path, response.text)
            allowed = {m.strip() for m in response.headers["allow"].split(",")}
            assert methods <= allowed, (path, allowed)
