# kubeforge: `make demo` runs the local GPU cluster demo, `make test` runs every test.
# Both set up everything on a fresh machine: the Python venv and the control-plane binaries
# (built once from the Go module proxy and cached in ~/.cache/kubeforge).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup tools system-deps demo test unit down crds check-crds bench-training bench-training-burst bench-memory bench-autoscaling bench-preemption bench-serving image

$(BIN)/kubeforge: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test,demo]'
	touch $@

setup: $(BIN)/kubeforge

# KUBEFORGE_BIN_DIR (a folder of prebuilt binaries) skips the build, as kubeforge.sim.tools does.
tools:
	@if [ -z "$$KUBEFORGE_BIN_DIR" ]; then bash hack/build-tools.sh >/dev/null; fi

# Prometheus from Debian's package, for the autoscaling tests (installed only when missing).
system-deps: setup
	$(BIN)/python -c "from kubeforge.sim.prometheus import ensure_prometheus; ensure_prometheus()"

# DEMO_ARGS passes flags, e.g. make demo DEMO_ARGS="--name my-demo --plot /tmp/demo.png".
DEMO_ARGS ?=
demo: setup tools system-deps
	$(BIN)/kubeforge demo $(DEMO_ARGS)

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

# The operator image without Docker: hack/build-image.sh builds an OCI layout from Debian's
# packages (mmdebstrap, umoci; installed with apt-get when missing) and the project's wheel,
# cached by a hash of its inputs; prints the layout's path. IMAGE_ARGS=--archive adds an oci-archive.
IMAGE_ARGS ?=
image: setup
	bash hack/build-image.sh $(IMAGE_ARGS)

.PHONY: bench-training-burst bench-memory bench-nvl72

# BENCH_ARGS passes extra flags to a bench, e.g. make bench-training BENCH_ARGS="--cluster my-bench".
BENCH_ARGS ?=

bench-training: setup tools
	$(BIN)/python e2e/bench_training.py $(BENCH_ARGS)

# The admission burst: 800 TrainingJobs at once on 1,024 kwok nodes (kubeforge phase only).
bench-training-burst: setup tools
	$(BIN)/python e2e/bench_training.py --fleet e2e/fleets/bench-1024.yaml --jobs 800 --phases kubeforge \
		--submit-workers 16 --phase-timeout 480 --settle 30 $(BENCH_ARGS)

# 5,000 TrainingJobs / 20,000 pods: operator RSS as they grow, against an idle operator.
bench-memory: setup tools
	$(BIN)/python e2e/bench_memory.py $(BENCH_ARGS)

# Every run of issue 14 (the Azure trace, a cold ramp, a day) through kubeforge, KEDA + HPA, llm-d
# and Dynamo in simulated time, with PNGs in e2e/results/; then the live part on the local cluster.
bench-autoscaling: setup tools system-deps
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python e2e/bench_autoscaling.py $(BENCH_ARGS)

# Issue 13: multi-node serving groups and training gangs scaling over the Azure trace on 64 kwok
# nodes, kubeforge against the same groups as plain pods with LWS-style pod affinity; PNG in e2e/results/.
bench-serving: setup tools
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python e2e/bench_serving_placement.py $(BENCH_ARGS)

# Checkpoint-aware preemption: GPU-hours lost per preemption on a replay of the Alibaba trace
# through the pure admission core (no cluster), beside Kueue's victim order.
bench-preemption: setup
	$(BIN)/python e2e/bench_preemption.py $(BENCH_ARGS)

# Issue 15: 8 NVL72 racks, gangs of 1-32 nodes from the Alibaba trace, rack-sized high-priority
# gangs; kubeforge's clique placement and whole-domain preemption vs a Kueue-like scattered choice,
# replayed through the pure admission core; PNG in e2e/results/.
bench-nvl72: setup
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python e2e/bench_nvl72.py $(BENCH_ARGS)
