"""The wire contracts: the JSON Schema files publishers in other languages use are the pydantic models'.

Non-Python publishers validate against ``schemas/json/*.schema.json``; consolidation validates with the
pydantic models. These tests keep the two the same contract: the files are what ``render`` makes of
each model today, the required fields agree, and documents are accepted or refused alike.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, get_args

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from schemas import ControllerDecision, InsightNode, QueryNode, TaskEvent, TaskStatus
from schemas.json_export import JSON_DIR, MODELS, export, render

SCHEMAS = {name: json.loads((JSON_DIR / f"{name}.schema.json").read_text()) for name in MODELS}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_schema_file_is_what_the_model_exports_today(name: str) -> None:
    """If this fails, run ``python -m schemas.json_export`` and commit the files with the model change."""
    assert (JSON_DIR / f"{name}.schema.json").read_text() == render(MODELS[name])


def test_export_writes_one_file_per_model(tmp_path: Any) -> None:
    written = export(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{n}.schema.json" for n in MODELS)
    for name, model in MODELS.items():
        assert (tmp_path / f"{name}.schema.json").read_text() == render(model)


def _required(model: type[BaseModel]) -> set[str]:
    return {name for name, f in model.model_fields.items() if f.is_required()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_schema_names_the_models_fields_and_requires_what_the_model_requires(name: str) -> None:
    schema, model = SCHEMAS[name], MODELS[name]
    assert set(schema["properties"]) == set(model.model_fields)
    assert set(schema.get("required", [])) == _required(model)
    assert schema["additionalProperties"] is False  # extra="forbid"


def test_task_event_requires_namespace_query_and_status_as_documented() -> None:
    assert set(SCHEMAS["task_event"]["required"]) == {"namespace", "query", "status"}
    assert (
        set(SCHEMAS["task_event"]["properties"]["status"]["enum"])
        == set(get_args(TaskStatus))
        == {"resolved", "failed"}
    )


FULL_EVENT: dict[str, Any] = {
    "event_id": str(uuid.uuid4()),
    "namespace": "fever",
    "query": "Verify: Mohra is a truck",
    "query_id": "q-1",
    "retrieval_id": "r-1",
    "retrieved_insight_ids": ["i-1", "i-2"],
    "status": "failed",
    "trajectory": ["searched Mohra", {"tool": "lookup", "args": {"q": "Mohra"}}],
    "final_answer": "SUPPORTS",
    "feedback": "wrong label",
    "insight_feedback": {"i-1": "harmful", "i-2": {"verdict": "partial", "revised_text": "Check the class."}},
    "proposed_insight": "Check the vehicle class first.",
    "agent_id": "agent-7",
    "occurred_at": "2025-01-01T12:00:00Z",
    "schema_version": 1,
}


@pytest.mark.parametrize("missing", sorted(FULL_EVENT))
def test_a_task_event_without_a_field_is_accepted_exactly_when_the_schema_does_not_require_it(
    missing: str,
) -> None:
    doc = {k: v for k, v in FULL_EVENT.items() if k != missing}
    required = missing in SCHEMAS["task_event"]["required"]
    assert schema_errors(doc, SCHEMAS["task_event"]) == (["required"] if required else [])
    if required:
        with pytest.raises(ValidationError) as refused:
            TaskEvent.model_validate_json(json.dumps(doc))
        assert refused.value.errors()[0]["loc"] == (missing,)
    else:
        TaskEvent.model_validate_json(json.dumps(doc))


def _event(**changes: Any) -> dict[str, Any]:
    return {**FULL_EVENT, **changes}


AGREEMENT = [
    ("minimal", {"namespace": "fever", "query": "q", "status": "resolved"}),
    ("full", FULL_EVENT),
    ("model dump", json.loads(TaskEvent.model_validate(FULL_EVENT).model_dump_json())),
    ("extra field", _event(priority=3)),
    ("status not an outcome", _event(status="done")),
    ("status not a string", _event(status=1)),
    ("namespace with a space", _event(namespace="not ok")),
    ("empty query", _event(query="")),
    ("event id not a uuid", _event(event_id="event-1")),
    ("insight id with a slash", _event(retrieved_insight_ids=["a/b"])),
    ("verdict keyed by an id with a slash", _event(insight_feedback={"a/b": "helpful"})),
    ("too many retrieved ids", _event(retrieved_insight_ids=[f"i{n}" for n in range(101)])),
    ("unknown verdict", _event(insight_feedback={"i-1": "meh"})),
    ("partial without text", _event(insight_feedback={"i-1": {"verdict": "partial"}})),
    (
        "partial with extra key",
        _event(insight_feedback={"i-1": {"verdict": "partial", "revised_text": "x", "why": "?"}}),
    ),
    ("trajectory step a number", _event(trajectory=["ok", 3])),
    ("too many steps", _event(trajectory=["s"] * 501)),
    ("trajectory not a list", _event(trajectory="one long string")),
    ("schema version 2", _event(schema_version=2)),
    ("proposed insight too long", _event(proposed_insight="x" * 2001)),
]


@pytest.mark.parametrize(("case", "doc"), AGREEMENT, ids=[c for c, _ in AGREEMENT])
def test_the_json_schema_and_the_model_accept_and_refuse_the_same_task_events(
    case: str, doc: dict[str, Any]
) -> None:
    by_schema = not schema_errors(doc, SCHEMAS["task_event"])
    try:
        TaskEvent.model_validate_json(json.dumps(doc))
        by_model = True
    except ValidationError:
        by_model = False
    assert by_schema == by_model, case


def test_the_papers_controller_output_format_is_a_valid_decision() -> None:
    """The JSON the paper's controller prompt asks for (Appendix) is accepted as it is."""
    paper = {
        "insight_edits": [{"insight_id": "i-1", "operation": "KEEP", "revised_insight_text": None}],
        "add_new_insight": {"decision": False, "new_insight_text": None},
    }
    assert schema_errors(paper, SCHEMAS["controller_decision"]) == []
    decision = ControllerDecision.model_validate(paper)
    assert decision.edit_for("i-1") is not None and not decision.add_new_insight.decision
    revise_without_text = {"insight_edits": [{"insight_id": "i-1", "operation": "REVISE"}]}
    with pytest.raises(ValidationError):
        ControllerDecision.model_validate(revise_without_text)


@pytest.mark.parametrize("model", [InsightNode, QueryNode])
def test_graph_nodes_serialise_to_documents_their_schema_accepts(model: type[BaseModel]) -> None:
    now = datetime(2025, 1, 1).isoformat() + "Z"
    doc: dict[str, Any] = {"id": "n-1", "namespace": "fever", "text": "t", "created_at": now}
    if model is InsightNode:
        doc |= {"state": "active", "positive": ["q1", "q2"], "created_by_event": "e1", "updated_at": now}
    else:
        doc |= {"status": "resolved", "event_id": "e1", "trajectory": ["s"]}
    node = model.model_validate(doc)
    name = "insight_node" if model is InsightNode else "query_node"
    assert schema_errors(json.loads(node.model_dump_json()), SCHEMAS[name]) == []


# -- the JSON Schema validator other publishers use ---------------------------------------------------


def schema_errors(doc: Any, schema: dict[str, Any]) -> list[str]:
    """The keywords ``doc`` violates (empty when it is valid), by a real Draft 2020-12 validator with
    format checking, as a publisher in another language would validate."""
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    return sorted(str(error.validator) for error in validator.iter_errors(doc))
