# Every target sets itself up: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

DEMO_DIR     ?= runs/demo
DEMO_SECONDS ?= 600
# Synthetic default: Adam at 1e-3, constant — the encoder trains from scratch here (no
# pretrained weights yet) and im2txt's SGD 2.0 is tuned for a pretrained, frozen encoder.
DEMO_FLAGS   ?= --batch-size 32 --optimizer adam --learning-rate 0.001 --epochs-per-decay 0 \
                --save-every-secs 120 --log-every-steps 50

.PHONY: install test lint demo bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	$(BIN)/pip check
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest

demo: install
	$(BIN)/showtell data synthetic --out $(DEMO_DIR)/data
	$(BIN)/showtell train --data $(DEMO_DIR)/data --model-dir $(DEMO_DIR)/model \
	    --max-seconds $(DEMO_SECONDS) $(DEMO_FLAGS)
	@echo "checkpoints: $(DEMO_DIR)/model   TensorBoard: $(BIN)/tensorboard --logdir $(DEMO_DIR)/model"
	$(BIN)/showtell evaluate --once --model-dir $(DEMO_DIR)/model --data $(DEMO_DIR)/data

bench: install
	$(BIN)/python bench/input_pipeline.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
