# reduce — build, test, demo, bench.
#
# `make test` works on a fresh Debian machine: it installs Debian's PyTorch,
# numpy, pytest and zstandard through apt-get when they are missing (as root,
# or through sudo), and builds a virtual environment with current torch from
# PyPI (CPU) when it is not cached yet, then runs the Go tests with the race
# detector, the Python tests under both torches, the Go tests that run Python
# again under the PyPI torch, and a short fuzz run.

GO      ?= go
# The Python that has torch: Debian's, unless the caller names another.
PYTHON  ?= /usr/bin/python3
BIN     := bin/reduce
FUZZTIME ?= 5s
APT_PACKAGES := python3-torch python3-numpy python3-pytest python3-zstandard python3-hypothesis

# The second Python, with current torch from PyPI (CPU only): by default the
# virtual environment of scripts/pypi-torch-venv.sh, outside the clone under
# ~/.cache/reduce and keyed by its pins (scripts/pypi-torch.txt), so that
# every clone and CI run on the machine shares it; TORCH2_PYTHON=... names
# another. A shell expansion in the recipes, not here: the script needs
# /usr/bin/python3, which deps may only just have installed.
TORCH2_PYTHON ?= $$(scripts/pypi-torch-venv.sh dir)/bin/python

export REDUCE_PYTHON := $(PYTHON)

# The tests' trust store (docs/TRUST.md): what
# the recorders and reductions the tests run record as the user's goes
# there, never into the user's own store; emptied by make test, so that the
# committed fixtures run as committed ones, as in CI.
TEST_TRUST_DIR ?= $(abspath .test-trust)
test test-go test-go-torch2 test-python test-wheel fuzz-short test-slurm bench bench-slurm: export REDUCE_TRUST_DIR = $(TEST_TRUST_DIR)

# The reduce executable the pytest plugin asks to judge each run of a fixture's
# batch (`reduce judge`): the one just built, for the tests that run pytest on
# fixtures (not test-wheel: there the wheel's own is judged).
test-go test-go-torch2 test-python: export REDUCE_BINARY = $(abspath $(BIN))

# Every run of the Go tests names its timeout first: go's default (10 minutes) stops a
# package that a loaded machine makes slow (cmd/reduce takes about 9 minutes
# under the race detector on two busy cores). Well above what each takes.
TEST_TIMEOUT  ?= 45m
BENCH_TIMEOUT ?= 90m

.PHONY: all build test test-trust test-wheel test-go test-go-torch2 test-python fuzz-short fuzz bench demo wheel deps deps-torch2 vet clean
.PHONY: slurm-up slurm-down test-slurm bench-slurm

# The one-node Slurm cluster of the --launcher slurm tests (scripts/slurm-local.sh;
# it installs slurm-wlm and munge through apt-get when they are missing).
SLURM_LOCAL := scripts/slurm-local.sh
SLURM_ENV = SLURM_CONF=$$($(SLURM_LOCAL) env | sed 's/^export SLURM_CONF=//') REDUCE_SLURM=1

all: build

build:
	$(GO) build -o $(BIN) ./cmd/reduce

# deps installs what the tests need when it is missing: Go modules through the
# module proxy, Debian packages through apt-get.
deps:
	$(GO) mod download
	@if ! $(PYTHON) -c 'import torch, numpy, pytest, zstandard, hypothesis' >/dev/null 2>&1; then \
		echo "installing $(APT_PACKAGES) (torch, numpy, pytest or zstandard missing for $(PYTHON))"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $(APT_PACKAGES); \
	fi
	@$(PYTHON) -c 'import torch, numpy, pytest, zstandard; print("python:", "$(PYTHON)", "torch", torch.__version__, "numpy", numpy.__version__, "zstandard", zstandard.__version__)'

# deps-torch2 builds the PyPI torch environment unless it is cached (about a
# minute and 4 GB: torch's CUDA libraries must be there for it to load, see
# scripts/pypi-torch.txt) and checks it; with TORCH2_PYTHON named, only checks.
deps-torch2:
ifeq ($(origin TORCH2_PYTHON),file)
	scripts/pypi-torch-venv.sh build
endif
	@$(TORCH2_PYTHON) -c 'import sys, torch, numpy, pytest, zstandard; print("torch2 python:", sys.executable, "torch", torch.__version__, "numpy", numpy.__version__)'

vet:
	$(GO) vet ./...

# REDUCE_REQUIRE_TORCH turns the torch-dependent tests' skips into failures:
# under make test, a missing torch is a broken setup, not a reason to pass.
test: deps deps-torch2 vet build test-trust test-go test-go-torch2 test-python test-wheel fuzz-short test-slurm

test-trust:
	rm -rf $(TEST_TRUST_DIR)

test-go: build
	REDUCE_REQUIRE_TORCH=1 $(GO) test -timeout $(TEST_TIMEOUT) -race -count=1 ./...

# The Go tests that run reduce's Python, again under the PyPI torch: the torch
# backend's worker and fork server, the batch files written and read by
# reduce_batch.py (and the hostile batches its recorder writes), the fixtures' collector (which users run under their own,
# mostly 2.x, torch), and ruff (from PyPI: only this environment has it) on
# every file reduce writes into a user's repository (REDUCE_REQUIRE_RUFF). Not the race detector: the Go code is the
# one test-go ran with it, what changes is the Python side. Not the kernels'
# differential tests: the kernels emulate torch 1.13 (kernels/op.go). The
# examples are reduced again (TestExamplesReduce): those of a step of the
# user's own replay under this torch, and one fails only under it
# (smoothed_bce_target); and the training project's and Lightning's crashes,
# recorded and reduced end to end under this torch too (Lightning is only in
# this environment).
# The go worker's own death under a 1 GiB address-space limit runs here too
# (GoWorkerDeath): under the race detector its runtime cannot start.
# One run of the Go tests, so that the packages run side by side.
test-go-torch2: build
	REDUCE_PYTHON=$(TORCH2_PYTHON) REDUCE_REQUIRE_TORCH=1 REDUCE_REQUIRE_RUFF=1 $(GO) test -timeout $(TEST_TIMEOUT) -count=1 \
		-run 'Torch|Zygote|PythonOpTable|DeviceMemory|Numpy|Python|Collector|Ruff|RecorderHostile|GoWorkerDeath' \
		./replay/ ./fixtures/ ./internal/regress/
	REDUCE_PYTHON=$(TORCH2_PYTHON) REDUCE_REQUIRE_TORCH=1 REDUCE_REQUIRE_LIGHTNING=1 REDUCE_REQUIRE_TRANSFORMERS=1 REDUCE_REQUIRE_COMPILE=1 $(GO) test -timeout $(TEST_TIMEOUT) -count=1 \
		-run 'TestProject|TestRecordCommand|TestLightning|TestTrainer|TestTorchrun|TestCompiled|TestRegressionLife|TestUpstream|TestExamplesReduce' ./cmd/reduce/ ./internal/regress/

# The Python tests under the interpreter $(1), with the variables $(2). Then
# the committed fixtures, collected by the package's pytest plugin (-p, the
# package on PYTHONPATH: as a user's repository with the package installed
# has them, no conftest.py); the fixtures reduced from examples recorded for
# a step of their own import it (fixtures/examples/example_steps.py) by
# name: its folder goes on PYTHONPATH too.
define python-tests
	$(2) REDUCE_REQUIRE_TORCH=1 $(1) -m pytest -q -p no:cacheprovider replay/python
	if [ -d fixtures/regress ]; then PYTHONPATH="$(CURDIR)/replay/python:$(CURDIR)/fixtures/examples$${PYTHONPATH:+:$$PYTHONPATH}" \
		$(1) -m pytest -q -p no:cacheprovider -p reduce_batch.plugin fixtures/regress; fi
endef

# Under both torches: Debian's 1.13 ($(PYTHON)), which has no Lightning, and
# PyPI's current one, whose environment has it: there the Lightning tests
# must run (REDUCE_REQUIRE_LIGHTNING).
test-python: build
	$(call python-tests,$(PYTHON))
	$(call python-tests,$(TORCH2_PYTHON),REDUCE_REQUIRE_LIGHTNING=1 REDUCE_REQUIRE_TRANSFORMERS=1)

# The wheel as a user installs it, under both torches: a fresh virtual
# environment with only torch and pytest, a crash recorded, reduced, and the
# fixture's life run by `pytest regress/` with no conftest.py there
# (scripts/wheel-check.sh).
test-wheel: wheel
	scripts/wheel-check.sh $(PYTHON)
	scripts/wheel-check.sh $(TORCH2_PYTHON)

# test-slurm starts the local cluster, runs the tests that need it and stops
# the cluster again, also when they fail. They run alone (-p 1): they check
# that the queue is empty after each reduction. REDUCE_REQUIRE_SLURM turns
# their skips into failures.
test-slurm:
	$(SLURM_LOCAL) start
	status=0; $(SLURM_ENV) REDUCE_REQUIRE_SLURM=1 $(GO) test -timeout $(TEST_TIMEOUT) -race -count=1 -p 1 -run 'Slurm' ./replay/ ./cmd/reduce/ || status=$$?; \
	$(SLURM_LOCAL) stop; exit $$status

slurm-up:
	$(SLURM_LOCAL) start

slurm-down:
	$(SLURM_LOCAL) stop

fuzz-short:
	$(GO) test -timeout $(TEST_TIMEOUT) -run='^$$' -fuzz='^FuzzRead$$' -fuzztime=$(FUZZTIME) ./fixtures
	$(GO) test -timeout $(TEST_TIMEOUT) -run='^$$' -fuzz='^FuzzPrintable$$' -fuzztime=$(FUZZTIME) ./fixtures

fuzz:
	$(MAKE) fuzz-short FUZZTIME=2m

# The 1 GiB batch benchmarks run once each; the others long enough to be stable.
bench: build deps-torch2
	$(GO) test -timeout $(BENCH_TIMEOUT) -run='^$$' -bench=. -benchmem ./shrink/ ./kernels/ ./replay/
	$(GO) test -timeout $(BENCH_TIMEOUT) -run='^$$' -bench=. -benchmem -benchtime=1x ./fixtures/
	# The main job: every example, go and torch backends, -j 1 and -j 2; a
	# 100,000-sample batch. Replays and the reduce process's peak memory.
	REDUCE_PYTHON=$(PYTHON) $(GO) test -timeout $(BENCH_TIMEOUT) -run='^$$' -bench=Reduce -benchtime=1x ./cmd/reduce/
	# Where the culprit sits (0, n/3, 2n/3, n-1 at 256 MiB and 1 GiB, go and
	# torch: samples held, wall), and -j 1 against -j 2 on every backend
	# (scripts/bench-scale.py).
	$(PYTHON) scripts/bench-scale.py
	# Against the peers, as ratios in one run: picire and shrinkray (PyPI), a
	# bare torch script, log2 n (scripts/bench-peers.py).
	$(PYTHON) scripts/bench-peers.py
	# reduce record: a training epoch bare against recorded, and a recorded
	# command's replays forked at its first batch against fresh runs, beside
	# the bare step (scripts/bench-record.py).
	$(PYTHON) scripts/bench-record.py --python $(TORCH2_PYTHON)
	# The cost of record_on_failure(window=8) on a training step, against the
	# bare step and record_on_failure without a window, and the memory it holds.
	$(PYTHON) scripts/bench-window.py
	# A step compiled with torch.compile: replays and wall per replay, Inductor's
	# caches warm against every replay compiling from scratch (the PyPI torch).
	$(TORCH2_PYTHON) scripts/bench-compile.py
	$(MAKE) bench-slurm

# Replays per second through the local Slurm cluster against local processes
# (the go backend, -j 2), and their ratio, in one run.
bench-slurm:
	$(SLURM_LOCAL) start
	status=0; $(SLURM_ENV) $(GO) test -timeout $(BENCH_TIMEOUT) -run='^$$' -bench='^BenchmarkSlurmVsLocal$$' -benchtime=40x ./replay/ || status=$$?; \
	$(SLURM_LOCAL) stop; exit $$status

# The platform wheel: the Python package reduce_batch and the reduce
# executable, of reduce's version, for this machine's platform or another's
# (make wheel GOOS=linux GOARCH=arm64; darwin/amd64, darwin/arm64).
GOOS   ?= $(shell $(GO) env GOOS)
GOARCH ?= $(shell $(GO) env GOARCH)
wheel:
	CGO_ENABLED=0 GOOS=$(GOOS) GOARCH=$(GOARCH) $(GO) build -trimpath -o dist/$(GOOS)-$(GOARCH)/reduce ./cmd/reduce
	$(PYTHON) scripts/build-wheel.py --binary dist/$(GOOS)-$(GOARCH)/reduce --goos $(GOOS) --goarch $(GOARCH) --out dist

# The main job on the seed example (four classes, targets [0, 2, 4]) with the
# go backend; the fixture goes under out/regress.
demo: build
	$(BIN) inspect fixtures/examples/four_class_targets.bin
	$(BIN) --batch fixtures/examples/four_class_targets.bin --out out/regress

clean:
	rm -rf bin
