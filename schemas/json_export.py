"""Export the JSON Schemas of the wire contracts to ``schemas/json`` (``python -m schemas.json_export``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from schemas.models import ControllerDecision, ControlRequest, InsightNode, QueryNode, TaskEvent

JSON_DIR = Path(__file__).with_name("json")
MODELS: dict[str, type[BaseModel]] = {
    "task_event": TaskEvent,
    "query_node": QueryNode,
    "insight_node": InsightNode,
    "controller_decision": ControllerDecision,
    "control_request": ControlRequest,
}


def render(model: type[BaseModel]) -> str:
    schema = model.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def export(directory: Path = JSON_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in MODELS.items():
        path = directory / f"{name}.schema.json"
        path.write_text(render(model))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in export():
        sys.stdout.write(f"wrote {path}\n")
