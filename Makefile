# Two commands for a newcomer: `make demo` (a drained backlog) and `make test` (the suite).
# Both set up what they need: the virtualenv, Kafka, Postgres and the Spark connector jars.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test unit lint format services services-down dagster bench clean chromium

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is required ($(PYTHON) not found)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

services: $(STAMP)
	$(BIN)/drainer services up

demo: services
	$(BIN)/python scripts/demo.py

# the browser test drives Debian's Chromium through Debian's chromedriver (no browser download)
chromium:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y chromium chromium-driver || \
	    { apt-get update && apt-get install -y chromium chromium-driver; }; \
	  else echo "the browser test needs Chromium: sudo apt-get install chromium chromium-driver"; exit 1; fi; }

test: services chromium
	$(BIN)/pytest

unit: $(STAMP)
	$(BIN)/pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

dagster: services
	DAGSTER_HOME=$(CURDIR)/.dagster_home $(BIN)/python scripts/dagster_home.py
	DAGSTER_HOME=$(CURDIR)/.dagster_home $(BIN)/dagster dev -w workspace.yaml

services-down: $(STAMP)
	$(BIN)/drainer services down

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache spark-warehouse
