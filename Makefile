# The README's two commands:
#   make demo   set everything up and run the embedded default (configs/quickstart.yaml)
#   make test   set everything up and run the tests, ruff and mypy
# Both are idempotent: a second run only checks what is already there.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_CONFIG ?= configs/quickstart.yaml
ENGINE := engine/Cargo.toml
# The engine's crate needs this Rust or newer (engine/Cargo.toml: rust-version).
RUST_VERSION := 1.88
CARGO := PYO3_PYTHON=$(abspath $(BIN)/python) cargo

.PHONY: setup system rust python demo gallery docs reference wheel test test-databases test-tools test-wheelhouse check fuzz unit lint types engine-test tox proto clean

setup: system python

system:
	@bash scripts/setup-system.sh

rust:
	@bash scripts/check-rust.sh $(RUST_VERSION)

python: $(STAMP)

# pip builds the load engine (engine/, Rust, release profile) into
# dbtester/_engine through maturin; a change to the crate rebuilds it.
$(STAMP): pyproject.toml $(ENGINE) engine/Cargo.lock $(shell find engine/src -name "*.rs") | rust
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: setup
	$(BIN)/dbtester install --for $(DEMO_CONFIG)
	$(BIN)/dbtester run $(DEMO_CONFIG)

# Regenerate plots/gallery from a real run of the demo test case, 3 trials each,
# and the screenshot of its report.html (headless Chromium).
# Only what a reader browses is kept: the tables, charts, report and Parquet,
# not each trial's raw records and logs (megabytes of them).
gallery: setup
	rm -rf plots/gallery
	$(BIN)/dbtester run $(DEMO_CONFIG) --out plots/gallery --repeat 3
	$(BIN)/python scripts/report_screenshot.py plots/gallery/report.html plots/gallery/report.png
	cp plots/gallery/report.png docs/images/report.png
	find plots/gallery -mindepth 1 -maxdepth 1 -type d ! -name charts ! -name parquet -exec rm -rf {} +

# The docs site (MkDocs, Material theme) into site/. --strict: a broken link,
# or a generated reference page that fails, fails the build.
docs: python
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --quiet

# dbtester's wheel with the engine compiled inside, into dist/: what a
# machine without Rust installs (pipx install dist/dbtester-*.whl).
wheel: python
	$(BIN)/python scripts/build_wheel.py --out dist

# The reference pages under docs/reference/, written again from the code
# (a unit test fails when a committed one falls behind it).
reference: python
	$(BIN)/python docs/gen_reference.py

# Test files run in two processes (pytest-xdist; each file whole in one of
# them, so a module's shared cluster is started once): most tests wait on
# databases, timers and the network, so two run well side by side even on
# 2 cores (three were tried: 16-18 min instead of 23, but timing tests of
# elections and failover then failed in CI). PYTEST_WORKERS=0 runs them in
# this process.
PYTEST_WORKERS ?= 2
PARALLEL := $(if $(filter-out 0 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

# Tests marked solo judge how starved of CPU the engine was, so they run
# after the others, alone: a neighbour's load on the other core makes the
# server they start starve too, and the judgement rightly wavers.
test: setup engine-test test-databases docs
	$(BIN)/pytest $(PARALLEL) -m "not solo"
	$(BIN)/pytest -m solo
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The database binaries the tests start, installed once per machine into the
# tests' home before pytest runs: a cold Go build of etcd or Consul takes
# minutes, and inside the first test that needed it, it read as that test's.
TEST_HOME ?= $(or $(DBTESTER_TEST_HOME),$(HOME)/.cache/dbtester-tests)
TEST_DATABASES := etcd@3.5.17 etcd@3.6.8 zookeeper@3.8.0 consul@1.22.0 kine@0.17.5 nats@2.15.2
# the versions the maintenance tests upgrade a ZooKeeper and a Consul member to
TEST_DATABASES += zookeeper@3.8.4 consul@1.22.2

test-databases: python
	@for db in $(TEST_DATABASES); do DBTESTER_HOME=$(TEST_HOME) $(BIN)/dbtester install $$db || exit 1; done
	@# its etcd versions, and the slow-disk layer (dbtester-slowfs) its slow_disk needs
	@DBTESTER_HOME=$(TEST_HOME) $(BIN)/dbtester install -q --for configs/maintenance.yaml
	@$(MAKE) --no-print-directory test-tools

# Servers the tests start, built here once per machine rather than inside the
# first test that needs them: a real S3 server the history tests read from
# (versitygw, Go; about 3 minutes cold).
VERSITYGW := github.com/versity/versitygw/cmd/versitygw@v1.8.0
VERSITYGW_BIN := $(TEST_HOME)/tools/versitygw-v1.8.0/versitygw
SLOWPUT_BIN := $(TEST_HOME)/tools/slowput/slowput

test-tools: $(VERSITYGW_BIN) $(SLOWPUT_BIN) test-wheelhouse

# dbtester's wheel and its dependencies' wheels, what the multi-host and
# wheel tests ship, built into the tests' home before pytest: the first
# build compiles the engine in release mode and downloads every
# dependency's wheel (about 2 minutes), and inside the first test that
# shipped it, it read as that test's. Later builds reuse both.
test-wheelhouse: python
	@DBTESTER_HOME=$(TEST_HOME) $(BIN)/python scripts/build_wheel.py --out $(TEST_HOME)/dist

$(VERSITYGW_BIN):
	@echo "building versitygw (the tests' S3 server; about 3 min the first time) ..."
	GOBIN=$(dir $@) GOFLAGS=-mod=mod go install $(VERSITYGW)

# The load tests' 5-ms gRPC server (Go, standard library only), rebuilt when
# its source is newer.
$(SLOWPUT_BIN): $(wildcard tests/integration/slowput/*)
	@mkdir -p $(dir $@)
	cd tests/integration/slowput && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -o $@.partial . && mv $@.partial $@

# The fast tier, for development: unit tests (no fuzz harness, no database,
# no network), ruff and mypy. `make test` is the whole suite.
check: python
	$(BIN)/pytest -q $(PARALLEL) -m "not integration and not fuzz"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The engine's own tests and lints (cargo test runs the Rust unit tests).
engine-test: python
	$(CARGO) test --quiet --manifest-path $(ENGINE)
	$(CARGO) clippy --quiet --manifest-path $(ENGINE) --all-targets -- -D warnings
	cargo fmt --manifest-path $(ENGINE) --check

# The fuzz harnesses for FUZZ_SECONDS each (make test gives them 8 s each).
FUZZ_SECONDS ?= 600
fuzz: setup
	DBTESTER_FUZZ_SECONDS=$(FUZZ_SECONDS) $(BIN)/pytest -m fuzz -q -s tests/fuzz

unit: python
	$(BIN)/pytest $(PARALLEL) -m "not integration"

lint: python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: python
	$(BIN)/mypy

tox: python
	$(BIN)/tox

# Regenerate the gRPC stubs after editing dbtester/proto/agent.proto or etcd.proto.
proto: python
	$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \
		dbtester/proto/agent.proto dbtester/proto/etcd.proto

clean:
	rm -rf $(VENV) .tox .mypy_cache .ruff_cache .pytest_cache engine/target dbtester/_engine*.so
