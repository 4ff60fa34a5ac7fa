# The verbs of the project. Each target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test lint format bench bench-quality bench-growth schemas up down clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install            ## a simulated agent fleet on the embedded stack, offline
	$(BIN)/evomem demo

test: install            ## the whole test suite, on real redis-server and Qdrant Edge
	$(BIN)/python -m pytest

lint: install            ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install           ## benchmarks; figures printed and merged into bench/results.json
	$(BIN)/evomem bench
	$(BIN)/python -m evomem.bench_pipeline
	$(BIN)/python -m evomem.bench_llm
	$(BIN)/python -m evomem.bench_http
	$(BIN)/python -m bench.growth

bench-growth: install    ## cost per task as the memory learns (10k and 100k tasks), and the hot insight
	$(BIN)/python -m bench.growth

bench-quality: install   ## long-horizon memory quality (bench/README.md); figures into bench/results.json
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.quality

up: install              ## Redis, workers and the retrieval side in the background (logs under DATA_DIR)
	$(BIN)/evomem up

down: install            ## stop what `make up` started
	$(BIN)/evomem down

schemas: install         ## re-export the JSON Schemas of the wire contracts
	$(BIN)/python -m schemas.export

clean:
	rm -rf $(VENV) .evomem .pytest_cache .mypy_cache .ruff_cache
