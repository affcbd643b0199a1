# Two entry points for a fresh machine (Python 3.11+ and make): `make run` and `make test`.
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

run: $(STAMP)
	$(BIN)/inside-llm serve $(ARGS)

test: $(STAMP)
	@test -x /usr/bin/chromium || { echo "Browser tests need Debian's Chromium: sudo apt-get install -y chromium"; exit 1; }
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/run.py $(BENCH_ARGS)

screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py tokens embeddings layer gpu roofline kv-cache batching quantization speculative parallelism dials --dark

clean:
	rm -rf $(VENV) build dist out .pytest_cache
