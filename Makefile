# Two commands for a newcomer: `make demo` (a drained backlog) and `make test` (the suite).
# Both set up what they need: the virtualenv, Kafka, Postgres and the Spark connector jars.

# Python 3.11 to 3.13 (pyproject's requires-python). PYTHON is the newest of python3.13, python3.12,
# python3.11 that runs here, then python3 if its version is in range; `make PYTHON=...` overrides.
# A candidate must run, not just exist: a pyenv shim of a version pyenv has not selected fails.
SUPPORTED := 3.13 3.12 3.11
in_range = $(shell $(1) -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 14))' >/dev/null 2>&1 && echo $(1))
ifeq ($(origin PYTHON),undefined)
PYTHON := $(firstword $(foreach v,$(SUPPORTED),$(call in_range,python$(v))) $(call in_range,python3))
endif
# one virtualenv per interpreter if you like: `make unit PYTHON=python3.12 VENV=.venv-3.12`
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# what the virtualenv installs: the dev tools and the `airflow` extra (the Airflow DAGs, their
# tests and `make airflow`: Airflow and Dagster share one environment, pip resolves them
# together); `make unit-all`'s per-interpreter virtualenvs take `dev` alone (their unit tests
# of the DAGs skip), sparing each of them Airflow's ~150 packages
EXTRAS ?= dev,airflow

.PHONY: demo test unit unit-all lint format services services-down dagster airflow bench clean chromium

$(STAMP): pyproject.toml setup.py
	@test -n "$(PYTHON)" || { echo "drainer needs Python 3.11, 3.12 or 3.13: none of python3.13," \
	  "python3.12, python3.11 or python3 on PATH is one. Install one, or name it: make PYTHON=/path/to/python3.12"; exit 1; }
	@test -n "$(call in_range,$(PYTHON))" || { echo "PYTHON=$(PYTHON) is not a Python 3.11 to 3.13" \
	  "interpreter that runs here: name one, e.g. make PYTHON=python3.12"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	@# an editable install ships no bytecode, and PYTHONDONTWRITEBYTECODE (set on CI's machines)
	@# stops Python writing it: compiled once here, every drainer process starts ~70 ms sooner
	$(BIN)/python -m compileall -q drainer spark_jobs dagster_project >/dev/null
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

# the suite in two parts: all but the `serial` tests on TEST_WORKERS workers at once (its tests
# mostly wait on Spark, the broker and Dagster: 2 cores run 3 workers well), then the `serial`
# ones alone (they kill, restart or rewind what the others share); the second part runs even if
# the first failed, so one `make test` reports every failure
TEST_WORKERS ?= 3
test: services chromium
	$(BIN)/pytest -n $(TEST_WORKERS) -m "not serial"; parallel=$$?; \
	  $(BIN)/pytest -m serial; serial=$$?; \
	  test $$parallel = 0 && test $$serial = 0

# the unit and property tests use the CPU alone: one worker per core (26.8 s instead of 40.4 s
# for 536 tests on 2 cores; 547 now)
UNIT_WORKERS ?= auto
unit: $(STAMP)
	$(BIN)/pytest -n $(UNIT_WORKERS) tests/unit

# the unit tests under every supported interpreter, each in its own .venv-3.X (CI runs this)
unit-all:
	@for v in $(SUPPORTED); do \
	  $(MAKE) --no-print-directory unit PYTHON=python$$v VENV=.venv-$$v EXTRAS=dev || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy drainer spark_jobs dagster_project

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

dagster: services
	DAGSTER_HOME=$(CURDIR)/.dagster_home $(BIN)/python scripts/dagster_home.py $(BIN)/dagster dev -w workspace.yaml

# a real Airflow (API server, scheduler, DAG processor) on this repository's drains
# (airflow_dags/, drainer.airflow), its metadata in Postgres: http://127.0.0.1:$(AIRFLOW_PORT)
AIRFLOW_PORT ?= 8080
airflow: services
	$(BIN)/python scripts/airflow_home.py --port $(AIRFLOW_PORT)

services-down: $(STAMP)
	$(BIN)/drainer services down

# every fair-fight benchmark (benchmarks/README.md), then the charts from benchmarks/results/.
# Numbers are only worth keeping from an idle machine. BENCH_SIZES: the records of the sink
# benchmarks; a smoke run: `make bench BENCH_SIZES=20000 BENCH_REPEAT=1 BENCH_PARTITIONS="4 16"`
BENCH_SIZES ?= 10000 100000 1000000 10000000
BENCH_REPEAT ?= 5
BENCH_PEERS_RECORDS ?= 1000000
BENCH_UPSERT_RECORDS ?= 1000000
BENCH_PARTITION_RECORDS ?= 192000
BENCH_PARTITIONS ?= 4 16 64 256
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: services $(BENCH_STAMP)
	for n in $(BENCH_SIZES); do \
	  $(BIN)/python benchmarks/kafka_sink.py --records $$n --repeat $(BENCH_REPEAT) || exit 1; done
	$(BIN)/python benchmarks/lakehouse_sinks.py --records $(BENCH_SIZES) --repeat $(BENCH_REPEAT)
	$(BIN)/python benchmarks/peers.py --records $(BENCH_PEERS_RECORDS) --repeat $(BENCH_REPEAT)
	$(BIN)/python benchmarks/partitions.py --records $(BENCH_PARTITION_RECORDS) \
	  --repeat $(BENCH_REPEAT) --partitions $(BENCH_PARTITIONS)
	$(BIN)/python benchmarks/upserts.py --records $(BENCH_UPSERT_RECORDS) --repeat $(BENCH_REPEAT)
	$(BIN)/python benchmarks/charts.py

clean:
	rm -rf $(VENV) .venv-3.* .airflow_home build .pytest_cache .hypothesis .ruff_cache spark-warehouse
