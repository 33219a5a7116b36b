# The README's two commands:
#   make demo   set everything up and run the embedded default (configs/quickstart.yaml)
#   make test   set everything up and run the tests, ruff and mypy
# Both are idempotent: a second run only checks what is already there.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_CONFIG ?= configs/quickstart.yaml

.PHONY: setup system python demo gallery test unit lint types tox proto clean

setup: system python

system:
	@bash scripts/setup-system.sh

python: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: setup
	$(BIN)/dbtester install --for $(DEMO_CONFIG)
	$(BIN)/dbtester run $(DEMO_CONFIG)

# Regenerate plots/gallery from a real run of the demo test case.
gallery: setup
	rm -rf plots/gallery
	$(BIN)/dbtester run $(DEMO_CONFIG) --out plots/gallery

test: setup
	$(BIN)/pytest
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: python
	$(BIN)/pytest -m "not integration"

lint: python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: python
	$(BIN)/mypy

tox: python
	$(BIN)/tox

# Regenerate the agent's gRPC stubs after editing dbtester/proto/agent.proto.
proto: python
	$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \
		dbtester/proto/agent.proto

clean:
	rm -rf $(VENV) .tox .mypy_cache .ruff_cache .pytest_cache
