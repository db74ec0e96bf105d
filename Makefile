# headroom: the two commands a new machine needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ADDRESS ?= 127.0.0.1:9843
SCENARIO ?= demo

.PHONY: demo test venv system-deps lint docs golden bench soak accuracy install uninstall clean podresources

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

## Start the agent on a simulated GPU host (no driver needed).
demo: venv
	@echo "headroom (simulated host, scenario $(SCENARIO)) on http://$(ADDRESS)/  -- metrics at http://$(ADDRESS)/metrics; Ctrl-C stops"
	$(VENV)/bin/headroom run --config.file config.yaml --simulate $(SCENARIO) --web.listen-address $(ADDRESS)

## Debian packages the tests use for real components (promtool/prometheus, chromium, node_exporter).
system-deps:
	@bash tests/install-system-deps.sh

## Run every test (installs what the tests need first).
test: venv system-deps
	$(VENV)/bin/ruff check agent tests
	$(PY) -m pytest

lint: venv
	$(VENV)/bin/ruff check agent tests

## Regenerate the generated docs and the golden exposition after an intended change.
docs: venv
	$(PY) -m headroom.exposition.catalog > docs/metrics.md

golden: venv
	$(PY) -m pytest tests/test_golden.py --update-golden

## Regenerate the kubelet pod-resources gRPC code (checked in) from agent/headroom/sources/podresources/api.proto.
podresources: venv
	cd agent && ../$(PY) -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. headroom/sources/podresources/api.proto

## Measure tick, scrape and memory cost next to node_exporter; writes docs/benchmarks.md (~9 min).
bench: venv
	$(PY) -m bench

## 10-minute soak at 10 ticks/s with 8 simulated GPUs: RSS, threads and fds must stay flat (docs/reliability.md).
soak: venv
	$(PY) bench/soak.py

## Every built-in scenario with the default analysis settings: the accuracy table of docs/analysis.md.
accuracy: venv
	$(PY) -m bench.accuracy

install:
	bash systemd/install.sh

uninstall:
	bash systemd/uninstall.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
