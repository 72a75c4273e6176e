# kubeforge: `make demo` runs the local GPU cluster demo, `make test` runs every test.
# Both set up everything on a fresh machine: the Python venv and the control-plane binaries
# (built once from the Go module proxy and cached in ~/.cache/kubeforge).
# The venv's interpreter: Debian's /usr/bin/python3 where it is 3.10 or later and can make a venv
# (the interpreter the image runs the operator on, hack/build-image.sh, so tests and benches run
# what ships; Debian builds it with PGO and LTO), else python3 on the PATH. `make setup PY=...`
# chooses another; an existing .venv is kept until pyproject.toml changes.
PY ?= $(or $(shell /usr/bin/python3 -c 'import ensurepip, sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null && echo /usr/bin/python3),python3)
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup tools system-deps demo test unit down crds check-crds bench-training bench-training-burst bench-memory bench-autoscaling bench-preemption bench-serving image peers test-peers bench-preemption-live profile-training bench-reporting bench-backfill bench-lws-live bench-keda-live

$(BIN)/kubeforge: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test,demo]'
	touch $@

setup: $(BIN)/kubeforge

# KUBEFORGE_BIN_DIR (a folder of prebuilt binaries) skips the build, as kubeforge.sim.tools does.
tools:
	@if [ -z "$$KUBEFORGE_BIN_DIR" ]; then bash hack/build-tools.sh >/dev/null; fi

# The peers kubeforge is measured against (Kueue, JobSet, LeaderWorkerSet), built from the Go
# module proxy and cached like the control plane: only benches and tests that compare ask for
# them (never make demo or make test). See e2e/README-peers.md.
peers:
	bash hack/build-peers.sh >/dev/null

# Debian's packages the system tests need, each installed only when missing: Prometheus (the
# autoscaling tests) and python3-torch (the real PyTorch run of tests/test_torch_system.py).
system-deps: setup
	$(BIN)/python -c "from kubeforge.sim.prometheus import ensure_prometheus; ensure_prometheus()"
	$(BIN)/python -c "from kubeforge.sim.workers import ensure_torch; ensure_torch()"

# DEMO_ARGS passes flags, e.g. make demo DEMO_ARGS="--name my-demo --plot /tmp/demo.png".
DEMO_ARGS ?=
demo: setup tools system-deps
	$(BIN)/kubeforge demo $(DEMO_ARGS)

test: setup tools system-deps
	$(BIN)/pytest $(PYTEST_ARGS)

# The peers' smoke tests (Kueue + JobSet with TAS, LeaderWorkerSet), building the peers first.
# make test runs them too, but only when the peers are already built.
test-peers: setup tools peers
	$(BIN)/pytest -m peers $(PYTEST_ARGS)

# The pure tests, on every CPU (pytest-xdist): no control plane, no image build, no Prometheus.
# The quick loop: property tests draw a quarter of their examples (tests/examples.py; make test
# draws all), and the rewritten test modules are compiled once into .venv/pycache even where
# PYTHONDONTWRITEBYTECODE is set (it costs every run ~12 s per worker of assertion rewriting).
unit: setup
	$(BIN)/python -c "import xdist" 2>/dev/null || $(BIN)/pip install -q -e '.[test,demo]'
	KUBEFORGE_TEST_EXAMPLES=quick PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/.venv/pycache \
	  $(BIN)/pytest -m "not cluster and not system" -n auto --dist worksteal $(PYTEST_ARGS)

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

.PHONY: bench-training-burst bench-memory bench-nvl72 bench-scale bench-model-cache

# BENCH_ARGS passes extra flags to a bench, e.g. make bench-training BENCH_ARGS="--cluster my-bench".
BENCH_ARGS ?=

bench-training: setup tools
	$(BIN)/python -m e2e.bench.training $(BENCH_ARGS)

# The admission burst: 800 TrainingJobs at once on 1,024 kwok nodes (kube-scheduler alone, kubeforge,
# and Kueue + JobSet when the peers are built: make peers).
bench-training-burst: setup tools
	$(BIN)/python -m e2e.bench.training --fleet e2e/fleets/bench-1024.yaml --jobs 800 --phases baseline,kubeforge,kueue \
		--submit-workers 16 --phase-timeout 480 --settle 30 $(BENCH_ARGS)

# The operator's CPU profile during the training bench (kubeforge phase): py-spy (PyPI) samples it,
# e2e/bench/profile_operator.py prints the share by area and the top functions (e2e/README-training-bench.md).
profile-training: setup tools
	$(BIN)/pip install -q -e '.[test,profile]'
	$(BIN)/python -m e2e.bench.profile_operator $(BENCH_ARGS)

# 5,000 TrainingJobs / 20,000 pods: operator RSS as they grow, against an idle operator.
bench-memory: setup tools
	$(BIN)/python -m e2e.bench.memory $(BENCH_ARGS)

# Issue 28's honest bench: the Azure trace and a day (BENCH_ARGS="--runs trace,step,day" adds the
# step) through kubeforge, KEDA + HPA, llm-d and Dynamo in simulated time with a 5 min start, against
# an oracle and the cheapest static count, at equal attainment; PNGs in e2e/results/; then live.
bench-autoscaling: setup tools system-deps
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python -m e2e.bench.autoscaling $(BENCH_ARGS)

# Issue 13: multi-node serving groups and training gangs scaling over the Azure trace on 64 kwok
# nodes, kubeforge against the same groups as plain pods with LWS-style pod affinity; PNG in e2e/results/.
bench-serving: setup tools
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python -m e2e.bench.serving $(BENCH_ARGS)

# Checkpoint-aware preemption: GPU-hours lost per preemption on a replay of the Alibaba trace
# through the pure admission core (no cluster), beside Kueue's victim order; the policy is told only
# what the jobs' reports say (issue 27); two shapes, 8 nodes / 400 jobs and 16 nodes / 600 jobs.
bench-preemption: setup
	$(BIN)/python -m e2e.bench.preemption $(BENCH_ARGS)

# Issue 27: big gangs under a stream of small jobs, BestEffortFIFO vs StrictFIFO vs reservations with
# backfill through the pure admission core (PNG in e2e/results/); BENCH_ARGS=--live adds the small live
# comparison with the real Kueue (needs make peers). e2e/README-backfill-bench.md.
bench-backfill: setup
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python -m e2e.bench.backfill $(BENCH_ARGS)

# Issue 15: 8 NVL72 racks, gangs of 1-32 nodes from the Alibaba trace, rack-sized high-priority
# gangs; kubeforge's clique placement and whole-domain preemption vs a Kueue-like scattered choice,
# replayed through the pure admission core; PNG in e2e/results/.
bench-nvl72: setup
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python -m e2e.bench.nvl72 $(BENCH_ARGS)

# The same question live and small: 16 kwok nodes, two teams, high-priority arrivals over running
# jobs with checkpoints of different ages, once with kubeforge and once with Kueue's preemption.
bench-preemption-live: setup tools peers
	$(BIN)/python -m e2e.bench.preemption_live $(BENCH_ARGS)

# Issue 28's multi-node group start, live: create -> every pod of each 2 x 8 GPU group Ready,
# kubeforge's InferenceService against the real LeaderWorkerSet on 8 kwok nodes, rounds
# alternating (e2e/README-lws-live.md). BENCH_ARGS="--json FILE" feeds bench-autoscaling --lws-live.
bench-lws-live: setup tools peers
	$(BIN)/python -m e2e.bench.lws_live $(BENCH_ARGS)

# Issue 28's live autoscaling comparison: minutes 8-16 of the Azure trace, 6x compressed, through the
# model-server simulator, kubeforge's operator against the real KEDA + kube-controller-manager's HPA
# scaling a Deployment (e2e/README-keda-live.md). KEDA is built once from the Go module proxy by
# hack/build-keda.sh (long); never part of make test, make demo or CI. BENCH_ARGS="--json FILE"
# feeds bench-autoscaling --keda-live.
bench-keda-live: setup tools system-deps
	bash hack/build-keda.sh >/dev/null
	$(BIN)/python -m e2e.bench.keda_live $(BENCH_ARGS)

# Issue 27's endpoint target: 1,000 running jobs reporting every 10 s to the operator's status
# endpoint (real tokens, real TLS) against a window without reports in the same run: the operator's
# CPU, its API requests and the admission latency of probe jobs (e2e/README-reporting-bench.md).
bench-reporting: setup tools
	$(BIN)/python -m e2e.bench.reporting $(BENCH_ARGS)

# Issue 31's scale question without a cluster: one admission round's CPU through the pure core as the
# fleet grows (256-5,000 nodes) and the queue grows (1,000-50,000 gangs from the Alibaba trace), and the
# memory held at 50,000 jobs; PNG in e2e/results/ (e2e/README-scale-bench.md). Measures, asserts nothing.
bench-scale: setup
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python -m e2e.bench.scale $(BENCH_ARGS)

# Issue 29's bench without a cluster: a day of replica scale-ups and scale-downs on 64 nodes beside
# training gangs, placed by kubeforge with and without cache preference, KServe's LocalModelCache (one
# fixed node group, cache-blind) and the all-cached bound; start times from kubeforge.sim.weights; PNG
# and JSON in e2e/results/ (e2e/README-model-cache-bench.md). Measures, asserts nothing.
bench-model-cache: setup
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/python -m e2e.bench.model_cache $(BENCH_ARGS)
