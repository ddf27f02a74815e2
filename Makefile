# Every target sets itself up: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

DEMO_DIR     ?= runs/demo
DEMO_SECONDS ?= 600

.PHONY: install test check lint demo bench proto docs clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[cpu,dev]"
	$(BIN)/pip check
	touch $(STAMP)

install: $(STAMP)

BUF := node_modules/.bin/buf

$(BUF): package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $(BUF)

# ruff, and the gRPC contract: buf's STANDARD lint rules, and no breaking change against the
# released contract (protos/showtell-v1.binpb; buf.yaml says how to move it on).
lint: install $(BUF)
	$(BIN)/ruff check .
	$(BUF) lint
	$(BUF) breaking --against protos/showtell-v1.binpb

# The whole suite, then its figure: the ten slowest tests (pytest's summary) and the wall time of
# `make test` itself, the install and the lint included (what a fresh clone waits for).
test:
	@started=$$(date +%s); $(MAKE) --no-print-directory lint && $(BIN)/pytest; status=$$?; \
	  elapsed=$$(( $$(date +%s) - started )); \
	  echo "make test: $$((elapsed / 60)):$$(printf %02d $$((elapsed % 60))) in all (exit $$status)"; \
	  exit $$status

# The inner loop: lint + the quick in-process tests (no e2e, no Docker, none that trains a model
# for half a minute), on two workers (in process: one per core).  `make test` runs all of them.
check: lint
	$(BIN)/pytest -m "not e2e and not docker and not slow" -q -n 2

demo: install
	$(BIN)/showtell demo --dir $(DEMO_DIR) --seconds $(DEMO_SECONDS)

# The gRPC contract: protos/ is the source of truth; generated modules are committed and
# tests/test_proto.py fails if they drift from it.
proto: install
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. \
	    protos/showtell/v1/metrics.proto

# docs/cli.md: every command's --help, from the parsers (tests/test_cli_reference.py keeps it in step).
docs: install
	$(BIN)/python -m showtell.cli_reference > docs/cli.md

bench: install
	$(BIN)/python bench/input_pipeline.py --out bench/results/input_pipeline.json
	$(BIN)/python bench/evaluator_latency.py --out bench/results/evaluator_latency.json
	$(BIN)/python bench/grpc_throughput.py --out bench/results/grpc_throughput.json
	$(BIN)/python bench/feature_cache.py --out bench/results/feature_cache.json
	$(BIN)/python bench/strategies.py --out bench/results/strategies.json
	$(BIN)/python bench/ps_cluster.py --out bench/results/ps_cluster.json
	$(BIN)/python bench/coco_prep.py --out bench/results/coco_prep.json
	$(BIN)/python bench/eval_throughput.py --images 128 --rounds 5 --out bench/results/eval_throughput.json

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache node_modules
