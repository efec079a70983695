# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOG := $(VENV)/install.log

.PHONY: run test install lint check-core-install clean

$(BIN)/python:
	@$(PY) -m venv $(VENV) || python3 -m venv $(VENV)

# Everything: the core, the agent extra and the dev tools. torch first, pinned: the CPU wheel on
# this disk; any other torch pulls a multi-GB CUDA build. pip's output goes to $(LOG), shown
# (its end) only when the install fails.
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing into $(VENV) (log: $(LOG))"
	@{ $(BIN)/pip install --upgrade pip && \
	   $(BIN)/pip install torch==2.13.0 && \
	   $(BIN)/pip install -e '.[agent,dev]'; } > $(LOG) 2>&1 \
	   || { tail -n 30 $(LOG); echo "install failed: the whole log is $(LOG)"; exit 1; }
	@touch $(STAMP)

install: $(STAMP)

# The main job: show the default instance, train the GNN agent on it for a few minutes, then
# compare the trained policy with the baselines.
run: $(STAMP)
	$(BIN)/hulk show cluster default
	$(BIN)/hulk show model default
	$(BIN)/hulk train

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q
	@$(MAKE) --no-print-directory check-core-install

# `pip install .` without extras in a fresh virtualenv: no torch, and the torch-free commands work.
check-core-install:
	@PY=$(PY) .ci/check-core-install

clean:
	rm -rf $(VENV) runs .pytest_cache
