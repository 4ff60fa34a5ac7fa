"""What each role builds: an agent process opens its memory, retrieves and reports without building a
controller, so ``OPENAI_API_KEY`` in its environment (normal for an agent) costs it no openai client
and no tokenizer load; the controller is built the first time the process consolidates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import redis

from evomem import Memory, Settings

AGENT = """
import json, sys
from evomem import Memory
with Memory.open() as mem:
    r = mem.retrieve("Verify: Mohra is a truck", namespace="fever")
    mem.report(r, status="failed", feedback="wrong label", proposed_insight="Check the vehicle type.")
    opened = sorted(m for m in ("openai", "tiktoken") if m in sys.modules)
    judge = mem.runtime.settings.controller, mem.runtime.settings.llm_api_key is not None
    import evomem.adapters.llm.controller  # what consolidating with an LLM would load
    print(json.dumps({"opened": opened, "judge": judge, "then": "openai" in sys.modules}))
"""


def test_an_agent_with_an_openai_key_never_imports_openai_or_tiktoken(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVOMEM_", "OPENAI_"))}
    env.update(
        OPENAI_API_KEY="sk-agent-environment",
        EVOMEM_DATA_DIR=str(tmp_path),
        EVOMEM_REDIS_URL=redis_url,
        EVOMEM_EMBEDDER="hashing",
    )
    done = subprocess.run(
        [sys.executable, "-c", AGENT], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["judge"] == ["auto", True]  # the key is seen: consolidation here would use the LLM
    assert out["opened"] == []
    assert out["then"] is True  # the check above sees an import when there is one


def test_the_controller_is_built_when_the_memory_first_consolidates(
    settings: Settings, redis_client: redis.Redis
) -> None:
    with Memory.open_local(settings) as mem:
        assert "controller" not in vars(mem.runtime)
        mem.report(None, namespace="a", query="q", status="resolved", proposed_insight="A lesson.")
        assert mem.consolidate().applied == 1
        assert mem.runtime.controller.name == "rules"
