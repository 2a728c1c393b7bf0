# kvlife front door. Every target that runs code depends on `setup`, which builds .venv once
# and again only when pyproject.toml or constraints.txt change.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kvlife-installed
CE ?=

.PHONY: setup verify test lint bench replay mutants mutants-walker mutants-sglang fuzz-nightly gpu-check clean sglang-setup sglang-test \
	sglang-probe verify-sglang verify-sglang-matrix fuzz-nightly-sglang hostile-files

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "setup: installing torch==2.13.0 (CPU) into $(VENV)"
	@$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	@echo "setup: installing kvlife and its pinned dependencies"
	@$(BIN)/pip install -q --disable-pip-version-check --no-build-isolation -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

verify: setup
	@$(BIN)/python -m model prove
	@echo "crosshair: checking the page-arithmetic contracts (properties/vocabulary.py)"
	@$(BIN)/crosshair check properties.vocabulary --per_condition_timeout 5 && echo "crosshair: every contract holds"
	@$(BIN)/python -m fuzz run --profile ci --pool chunk-p1
	@$(BIN)/python -m fuzz run --profile ci --pool chunk-p4
	@$(BIN)/python -m fuzz run --profile ci --pool radix-p4
	@echo "verify: theorems match the manifest, contracts hold, lockstep fuzzing found nothing"

test: setup
	@# One torch thread per xdist worker: two workers on two cores, not two workers fighting over four threads.
	@OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 tests

lint: setup
	@$(BIN)/ruff check .
	@$(BIN)/mypy

mutants: setup
	@OMP_NUM_THREADS=1 $(BIN)/python -m fuzz mutants

# The same exam with the seeded walker as the engine (`python -m fuzz.walker mutants`).
mutants-walker: setup
	@OMP_NUM_THREADS=1 $(BIN)/python -m fuzz.walker mutants

# A time-boxed campaign on every core (`python -m fuzz campaign`); SHARD=I/N runs one CI matrix shard.
BUDGET ?= 10m
OUT ?= reports/campaign
DB ?= .hypothesis/campaign
SHARD ?= 1/1
# Fault plans in the reference campaign (every point must fail once; `fuzz campaign --fault-rate`). The upstream
# campaign runs without: its known finding failed-alloc-keeps-rows ends every unit whose prefill allocation fails,
# and verify-sglang walks the points there with that finding's triggers excluded.
FAULT_RATE ?= 5

fuzz-nightly: setup
	@OMP_NUM_THREADS=1 $(BIN)/python -m fuzz campaign --budget $(BUDGET) --out $(OUT) --db $(DB) --shard $(SHARD) \
	  --fault-rate $(FAULT_RATE)

# The hostile-file fuzzer's long run: N mutated counterexample files through replay, emit and the campaign's
# re-check, each in a forked worker under an address-space limit; prints the counts (make test runs 300 files).
N ?= 100000
HOSTILE_WORKERS ?= 2

hostile-files: setup
	@OMP_NUM_THREADS=1 $(BIN)/python -m tests.fuzz.test_hostile_files --files $(N) --workers $(HOSTILE_WORKERS)

bench: setup
	@$(BIN)/python -m bench

gpu-check: setup
	@scripts/gpu_check.sh

replay: setup
	@test -n "$(CE)" || { echo "usage: make replay CE=path/to/trace.json" >&2; exit 2; }
	@$(BIN)/python -m fuzz replay $(CE)

# Upstream SGLang: one venv per published release of upstream/releases.txt (.venv-sglang-VERSION, pinned by
# upstream/constraints-VERSION.txt), quick when nothing changed. SGLANG=0.5.20 picks releases; SGLANG_SRC=DIR a
# source checkout instead (.venv-sglang-src-NAME, NAME being DIR's base name; upstream/setup.sh --src).
SGLANG_VERSIONS := $(shell awk '!/^\#/ && NF {print $$1}' upstream/releases.txt)
SGLANG ?= $(SGLANG_VERSIONS)
SGLANG_SRC ?=
# Where the sglang venvs live (upstream/setup.sh's SGLANG_VENV_DIR); the repository root by default.
SGLANG_VENV_DIR ?= .
VENV_DIR := $(abspath $(SGLANG_VENV_DIR))
# After each run of a recipe's loop over venvs (its status in code): keep the worst status so far, the highest (70
# over 2 over 1), which the recipe exits with, so that make's last line (`Error S`) names it (README, Exit statuses).
worst = [ $$code -le $$status ] || status=$$code
ifneq ($(strip $(SGLANG_SRC)),)
SGLANG_VENVS := $(VENV_DIR)/.venv-sglang-src-$(notdir $(abspath $(SGLANG_SRC)))
else
SGLANG_VENVS := $(foreach v,$(SGLANG),$(VENV_DIR)/.venv-sglang-$(v))
endif

sglang-setup:
	@if [ -n "$(strip $(SGLANG_SRC))" ]; then SGLANG_VENV_DIR=$(VENV_DIR) bash upstream/setup.sh --src "$(SGLANG_SRC)"; \
	else for v in $(SGLANG); do SGLANG_VENV_DIR=$(VENV_DIR) bash upstream/setup.sh $$v || exit $$?; done; fi

# The upstream target's tests inside each sglang venv (the main venv skips them).
sglang-test: sglang-setup
	@for venv in $(SGLANG_VENVS); do echo "sglang-test: $$venv"; \
	  $$venv/bin/python -m pytest -o addopts="" -q tests/upstream || exit 1; done

# The upstream exam per venv (`python -m fuzz.upstream_mutants`): bugs of shapes SGLang shipped, planted in a copy of
# upstream's own source, each hunted by the walker; fails when a mutant that applies to a release is missed there.
MUTANTS_ARGS ?=

mutants-sglang: sglang-setup
	@status=0; for venv in $(SGLANG_VENVS); do echo "mutants-sglang: $$venv"; \
	  $$venv/bin/python -W ignore -m fuzz.upstream_mutants $(MUTANTS_ARGS); code=$$?; $(worst); done; exit $$status

# A small lifecycle per venv; exits non-zero on 0.5.18 by design (its stale-row reuse guard).
sglang-probe: sglang-setup
	@for venv in $(SGLANG_VENVS); do $$venv/bin/python -m impl.upstream.probe; done

# The harness against upstream SGLang, one venv after the other: the prover's traces, the lockstep ci profile on
# every pool shape the upstream target supports, the findings of upstream/findings.json, and the differential run
# (fuzz/upstream_verify.py). Fails if any venv mismatches.
# Bounded (what CI runs): VERIFY_ARGS="--cases 30 --random 40" (lockstep test cases per pool, random differential traces).
VERIFY_ARGS ?=

verify-sglang: sglang-setup
	@status=0; for venv in $(SGLANG_VENVS); do echo "verify-sglang: $$venv"; \
	  OMP_NUM_THREADS=1 $$venv/bin/python -W ignore::UserWarning -m fuzz verify-upstream $(VERIFY_ARGS); \
	  code=$$?; $(worst); \
	done; exit $$status

# Every release of upstream/releases.txt in one run (as verify-sglang, VERIFY_ARGS bounding each), then the
# findings x release table (reproduces / passes), printed and written into docs/upstream-findings.md
# (upstream/findings_matrix.py). Fails if any release mismatches.
verify-sglang-matrix:
	@status=0; for v in $(SGLANG_VERSIONS); do SGLANG_VENV_DIR=$(VENV_DIR) bash upstream/setup.sh $$v || exit $$?; \
	  echo "verify-sglang-matrix: sglang $$v"; \
	  OMP_NUM_THREADS=1 $(VENV_DIR)/.venv-sglang-$$v/bin/python -W ignore::UserWarning -m fuzz verify-upstream $(VERIFY_ARGS); \
	  code=$$?; $(worst); \
	done; $(PY) upstream/findings_matrix.py --write; code=$$?; $(worst); exit $$status

# The nightly campaign on the upstream target, one release after the other (SGLANG=0.5.20 picks one): the
# campaign of `fuzz-nightly` with --target sglang into OUT/sglang-VERSION (DB likewise), then its findings judged
# against upstream/findings.json (python -m fuzz.upstream_campaign): a known finding of that release is no failure.
fuzz-nightly-sglang: sglang-setup
	@status=0; for v in $(SGLANG); do venv=$(VENV_DIR)/.venv-sglang-$$v; \
	  OMP_NUM_THREADS=1 $$venv/bin/python -W ignore::UserWarning -m fuzz campaign --target sglang --budget $(BUDGET) \
	    --out $(OUT)/sglang-$$v --db $(DB)/sglang-$$v; code=$$?; \
	  if [ $$code -le 1 ]; then \
	    $$venv/bin/python -W ignore::UserWarning -m fuzz.upstream_campaign $(OUT)/sglang-$$v; code=$$?; \
	  fi; $(worst); \
	done; exit $$status

clean:
	rm -rf $(VENV) .venv-sglang-* .pytest_cache .mypy_cache .ruff_cache .hypothesis counterexamples reports
