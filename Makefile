# Keybus: two commands.
#   make run    install, start the broker on its embedded default (./keybus-data, port 6650)
#               and run a short demo against it; the broker keeps serving until Ctrl-C.
#               Another port or directory: make run PORT=6651 DATA_DIR=/tmp/kb
#               (or KEYBUS_PORT / KEYBUS_DATA_DIR in the environment).
#   make test   install, then lint, type-check and run the whole test suite
#               (TEST_PROCESSES=1 runs it in one process).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
PORT ?= $(or $(KEYBUS_PORT),6650)
DATA_DIR ?= $(or $(KEYBUS_DATA_DIR),./keybus-data)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint typecheck unit proto bench clean system-deps

# setup.py and the C sources too: the editable install builds the native modules in place
$(STAMP): pyproject.toml setup.py $(wildcard broker/subscription/*.c broker/subscription/*.h broker/view/*.c)
	$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Keybus needs Python 3.11; set PYTHON=/path/to/python3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark,bench]'
	touch $(STAMP)

install: $(STAMP) system-deps

# Spark needs a Java runtime; install one from Debian's packages when missing.
system-deps:
	@command -v java >/dev/null 2>&1 || { \
	  echo "installing a Java runtime for Spark (Debian: openjdk-17-jre-headless)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; }

run: install
	$(BIN)/keybus demo --port $(PORT) --data-dir $(DATA_DIR)

proto: install
	$(BIN)/python proto/generate.py

lint: install
	$(BIN)/python proto/generate.py --check
	$(BIN)/ruff check .
	$(BIN)/mypy

# The suite in TEST_PROCESSES pytest processes (pytest-xdist): most tests wait on
# broker, Spark and client processes, so two keep two cores busy (24 -> 12 minutes).
TEST_PROCESSES ?= 2
test: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_PROCESSES)

bench: install
	$(BIN)/python -m benchmarks all
	$(BIN)/python -m benchmarks compare

clean:
	rm -rf $(VENV) keybus-data
