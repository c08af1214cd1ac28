# kstream developer entry points.
#   make test   venv + ruff + mypy + pytest tests integration in 2 processes (each starts its own broker);
#               under CI=true (.ci/run) inside scripts/docker/test.sh --alongside: the Docker
#               images build meanwhile, and the Docker tests follow
#   make docker-test  Docker Engine (installed/started if needed) + images + integration/docker
#               + a testcontainers subset of integration/ (docs/deploy.md); part of
#               `make test` under CI=true
#   make difftest  generated topologies, deeper than CI: DIFFTEST_EXAMPLES (3000) against
#               the harness's invariants with random seeds, then DIFFTEST_GRAPHS (120) from
#               seed DIFFTEST_SEED (random, printed) on a broker it starts (docs/testing.md)
#   make demo   venv + local Kafka broker + the word-count example job
#   make bench  RESULTS.md (benchmarks.run) and SCALING.md + plots (benchmarks.scaling),
#               at most 45 min; QUICK=1 for the quick mode of both (benchmarks/README.md)
# Variables: PYTHON (default python3), VENV (default .venv).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test demo venv lint clean bench docker-test difftest

venv: $(STAMP)

# Reinstall when the dependency list changes; editable, so code changes need no reinstall.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Any failing step fails the target; pytest's own exit code is kept, so "no tests
# collected" (exit 5) fails too.
# Tests never ask a cloud instance-metadata service for credentials (obstore's AWS
# credential chain would, if a test gave none): such a lookup goes to loopback.
test: export AWS_METADATA_ENDPOINT = http://127.0.0.1:9
# Two pytest processes (pytest-xdist; a file's tests stay in one; each its own broker):
# the integration tests mostly wait, so two take ~14 min instead of ~23 on 2 cores.
# Under CI=true the Docker tests follow (docker-test below), and their images build while
# these tests run (scripts/docker/test.sh --alongside: CI's wall time).
PYTEST_ALL := $(BIN)/python -m pytest -n 2 --dist loadfile tests integration benchmarks/tests --ignore=benchmarks/tests/test_smoke_broker.py --ignore=integration/docker --durations=10
test: lint
	$(if $(filter true 1 yes on,$(CI)),PYTHON=$(BIN)/python scripts/docker/test.sh --alongside '$(PYTEST_ALL)',$(PYTEST_ALL))

# The Docker tests (scripts/docker/test.sh, docs/deploy.md): as root on a Debian-like host,
# installs Docker Engine if missing, starts dockerd on kstream's own socket if none answers
# (and stops it), builds the images offline, runs integration/docker and a subset of
# integration/ on Kafka from testcontainers. A missing engine fails, never skips.
docker-test: export AWS_METADATA_ENDPOINT = http://127.0.0.1:9
docker-test: $(STAMP)
	PYTHON=$(BIN)/python scripts/docker/test.sh

# The benchmarks (at most 45 min on 2 cores; QUICK=1: about 10). Each command starts
# its own local broker. matplotlib (the `bench` extra) draws the plots. The scaling
# curves get what is left of BENCH_BUDGET seconds after the install and benchmarks.run,
# less 60 s for their own broker start and report (45.5 min in all on 2026-12-02 without
# that reserve, the install outside the budget): the largest
# points run last, and a point that would not end within it (estimated from the previous
# point of its curve, scaled by its work) is skipped and listed in SCALING.md.
BENCH_FLAGS  := $(if $(QUICK),--quick,)
BENCH_BUDGET ?= $(if $(QUICK),600,2700)
bench: $(STAMP)
	start=$$(date +%s) && \
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]' && \
	$(BIN)/python -m benchmarks.run $(BENCH_FLAGS) && \
	left=$$(( $(BENCH_BUDGET) - 60 - $$(date +%s) + start )) && \
	$(BIN)/python -m benchmarks.scaling $(BENCH_FLAGS) --budget $$(( left > 60 ? left : 60 ))

DIFFTEST_EXAMPLES ?= 3000
DIFFTEST_GRAPHS   ?= 120
DIFFTEST_SEED     ?= $(shell date +%s)
difftest: export AWS_METADATA_ENDPOINT = http://127.0.0.1:9
difftest: $(STAMP)
	KSTREAM_DIFFTEST_EXAMPLES=$(DIFFTEST_EXAMPLES) KSTREAM_DIFFTEST_RANDOM=1 \
	  $(BIN)/python -m pytest -q tests/test_difftopo.py --hypothesis-show-statistics
	@echo "difftest: $(DIFFTEST_GRAPHS) topologies from seed $(DIFFTEST_SEED) on a broker"
	KSTREAM_DIFFTEST_GRAPHS=$(DIFFTEST_GRAPHS) KSTREAM_DIFFTEST_SEED=$(DIFFTEST_SEED) \
	  $(BIN)/python -m pytest -q integration/test_difftest.py

demo: $(STAMP)
	KSTREAM=$(BIN)/kstream scripts/demo.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
