# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOG := $(VENV)/install.log

.PHONY: run test install lint chromium docs check-core-install rllib-env test-rllib clean

$(BIN)/python:
	@$(PY) -m venv $(VENV) || python3 -m venv $(VENV)

# Everything: the core, the agent extra and the dev tools. torch first, pinned: the CPU wheel on
# this disk; any other torch pulls a multi-GB CUDA build. pip's output goes to $(LOG), shown
# (its end) only when the install fails.
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing into $(VENV) (log: $(LOG))"
	@{ $(BIN)/pip install --upgrade pip && \
	   $(BIN)/pip install torch==2.13.0 && \
	   $(BIN)/pip install -e '.[agent,dev,ray,docs]'; } > $(LOG) 2>&1 \
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

# The report's browser test (tests/test_report_browser.py) needs headless Chromium: the Debian
# package, installed (as root) only when missing; HULK_REQUIRE_CHROMIUM makes the test fail, not skip.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@echo "installing chromium for the report's browser test (log: $(VENV)/chromium-install.log)"
	@mkdir -p $(VENV)
	@{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; } \
	   > $(VENV)/chromium-install.log 2>&1 \
	   || { tail -n 20 $(VENV)/chromium-install.log; echo "chromium install failed (needs root and Debian's packages)"; exit 1; }

chromium: $(CHROMIUM)

# pytest on 2 workers (pytest-xdist; `worksteal` evens out the long tests), then the three
# independent checks side by side (separate virtualenvs and scratch directories; mostly pip and
# imports waiting on the disk), each one's output kept together.
PYTEST_WORKERS ?= 2
test: $(STAMP) $(CHROMIUM)
	$(BIN)/ruff check .
	HULK_REQUIRE_CHROMIUM=1 $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal
	@$(MAKE) --no-print-directory -j3 --output-sync=target docs check-core-install test-rllib

# The documentation site (mkdocs.yml) into site/, offline and strict: a broken link or a page
# that does not build fails. The CLI reference, the env spec and the file formats are generated
# from the code (mkdocs_hooks.py), the API page from the docstrings (mkdocstrings).
docs: $(STAMP)
	@NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	@echo "docs: site/index.html"

# `pip install .` without extras in a fresh virtualenv: no torch, and the torch-free commands work.
check-core-install:
	@PY=$(PY) .ci/check-core-install

# RLlib pins gymnasium 1.2.2 (the main env has 1.4.0): its own virtualenv, the core + `rllib` extra.
RLLIB_VENV := .venv-rllib
RLLIB_STAMP := $(RLLIB_VENV)/.installed
$(RLLIB_STAMP): pyproject.toml
	@$(PY) -m venv $(RLLIB_VENV) || python3 -m venv $(RLLIB_VENV)
	@echo "installing into $(RLLIB_VENV) (log: $(RLLIB_VENV)/install.log)"
	@{ $(RLLIB_VENV)/bin/pip install --upgrade pip && \
	   $(RLLIB_VENV)/bin/pip install torch==2.13.0 && \
	   $(RLLIB_VENV)/bin/pip install -e '.[rllib,dev]'; } > $(RLLIB_VENV)/install.log 2>&1 \
	   || { tail -n 30 $(RLLIB_VENV)/install.log; echo "install failed: see $(RLLIB_VENV)/install.log"; exit 1; }
	@touch $(RLLIB_STAMP)

rllib-env: $(RLLIB_STAMP)

# A small RLlib PPO run of experiments/rllib_ppo.py (must not skip there).
test-rllib: $(RLLIB_STAMP)
	HULK_REQUIRE_RLLIB=1 $(RLLIB_VENV)/bin/python -m pytest -q tests/test_rllib_example.py

clean:
	rm -rf $(VENV) $(RLLIB_VENV) runs site .pytest_cache
