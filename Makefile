# kubeforge: `make demo` runs the local GPU cluster demo, `make test` runs every test.
# Both set up everything on a fresh machine: the Python venv and the control-plane binaries
# (built once from the Go module proxy and cached in ~/.cache/kubeforge).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup tools system-deps demo test unit down crds check-crds bench-training bench-autoscaling

$(BIN)/kubeforge: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(BIN)/kubeforge

tools:
	bash hack/build-tools.sh >/dev/null

# Prometheus from Debian's package, for the autoscaling tests (installed only when missing).
system-deps: setup
	$(BIN)/python -c "from kubeforge.sim.prometheus import ensure_prometheus; ensure_prometheus()"

demo: setup tools
	$(BIN)/kubeforge demo

test: setup tools system-deps
	$(BIN)/pytest $(PYTEST_ARGS)

unit: setup
	$(BIN)/pytest -m "not cluster" $(PYTEST_ARGS)

down: setup
	$(BIN)/kubeforge sim down

crds: setup
	$(BIN)/kubeforge crds

check-crds: setup
	$(BIN)/kubeforge crds --check

bench-training: setup tools
	$(BIN)/python e2e/bench_training.py

bench-autoscaling: setup tools system-deps
	$(BIN)/python e2e/bench_autoscaling.py
