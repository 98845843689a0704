#!/usr/bin/env bash
# gpu-check.sh: the device check of the torch backend, for a lent NVIDIA machine.
#
#   OUT=/some/dir scripts/gpu-check.sh        # from the repository root
#
# It builds reduce (or uses $REDUCE_BIN), then for every example in fixtures/examples:
#   - reduce replay --backend torch --device cuda --json (zygote, then --no-zygote),
#   - reduce replay --backend go --device cuda --json (the emulation, for comparison),
#   - the torch worker directly, with and without CUDA_LAUNCH_BLOCKING=1, so that the
#     real device-assert text is kept as CUDA prints it,
# then the main job (reduce --batch ... --backend torch --device cuda) on MAIN_EXAMPLES and
# the collector's tests of the fixtures it wrote (when pytest is there; REPLAYS=0: this alone),
# and saves stdout, stderr and exit status of each under $OUT/<example>/, plus
# nvidia-smi, the torch/CUDA versions and a summary ($OUT/summary.txt). It never fails
# half-way: a missing GPU, torch without CUDA or a failed build are reported and the
# rest goes on. Runtime is bounded: each command by STEP_TIMEOUT (60 s; a reduction by
# MAIN_TIMEOUT, 150 s), the whole by BUDGET (270 s), after which the remaining steps are
# skipped.
set -u

OUT=${OUT:-./out/gpu-check}
# The examples recorded for a step of their own import it by name (fixtures/examples/
# example_steps.py), as scripts/regress-fixtures.sh has it.
export PYTHONPATH="$PWD/fixtures/examples${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
STEP_TIMEOUT=${STEP_TIMEOUT:-60}
BUDGET=${BUDGET:-270}
START=$(date +%s)
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# run NAME CMD...: run one step under the step timeout, saving its output.
run() {
	local name=$1
	shift
	if [ "$(left)" -le 5 ]; then
		say "SKIP $name (time budget spent)"
		return 0
	fi
	local t=$STEP_TIMEOUT
	[ "$(left)" -lt "$t" ] && t=$(left)
	mkdir -p "$(dirname "$OUT/$name")"
	local s e rc
	s=$(date +%s.%N)
	timeout -k 5 "$t" "$@" >"$OUT/$name.stdout" 2>"$OUT/$name.stderr"
	rc=$?
	e=$(date +%s.%N)
	echo "$rc" >"$OUT/$name.rc"
	say "$(printf '%-55s rc=%-3s %6.2fs' "$name" "$rc" "$(echo "$e - $s" | bc 2>/dev/null || echo 0)")"
	return 0
}

say "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
say "-- nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
	timeout 30 nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
	timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv >>"$SUMMARY" 2>&1
else
	say "nvidia-smi: not found"
fi

say "-- python and torch ($PYTHON)"
TORCH_OK=0
CUDA_OK=0
if timeout 120 "$PYTHON" -c 'import torch' >/dev/null 2>"$OUT/torch-import.stderr"; then
	TORCH_OK=1
	timeout 120 "$PYTHON" - >"$OUT/versions.json" 2>>"$OUT/torch-import.stderr" <<'EOF'
import json, platform, torch
d = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
     "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
     "cuda_available": torch.cuda.is_available()}
if d["cuda_available"]:
    d["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    d["capability"] = list(torch.cuda.get_device_capability(0))
print(json.dumps(d))
EOF
	cat "$OUT/versions.json" >>"$SUMMARY"
	if [ "$(timeout 120 "$PYTHON" -c 'import torch; print(torch.cuda.is_available())' 2>/dev/null)" = "True" ]; then
		CUDA_OK=1
	else
		say "torch.cuda.is_available() is not True: the cuda replays below will report it"
	fi
else
	say "cannot import torch with $PYTHON (pip torch missing?):"
	tail -n 3 "$OUT/torch-import.stderr" | tee -a "$SUMMARY"
fi

say "-- build"
REDUCE=${REDUCE_BIN:-}
if [ -z "$REDUCE" ]; then
	if command -v go >/dev/null 2>&1; then
		REDUCE="$OUT/bin/reduce"
		mkdir -p "$OUT/bin"
		if ! timeout 180 go build -o "$REDUCE" ./cmd/reduce >"$OUT/build.log" 2>&1; then
			say "go build failed (see build.log)"
			tail -n 5 "$OUT/build.log" | tee -a "$SUMMARY"
			REDUCE=
		fi
	else
		say "go not found and REDUCE_BIN unset: the reduce replay steps are skipped"
	fi
fi
[ -n "$REDUCE" ] && say "reduce: $REDUCE ($("$REDUCE" --version 2>/dev/null | head -n 1))"
# The examples are the project's own recordings: trusted in a store of this
# check's, so that reduce runs the steps they record (docs/TRUST.md, "A batch file
# from someone else": a committed batch file is no proof).
export REDUCE_TRUST_DIR="$(realpath -m "$OUT")/trust"
[ -n "$REDUCE" ] && "$REDUCE" trust fixtures/examples/*.bin >/dev/null

# The torch backend's worker, as reduce's launcher runs it: the package from its folder.
MODULE="$PWD/replay/python/testdata/run_worker.py"

# The main job end to end on the device: a reduction with the torch backend on cuda, its
# fixture.json kept, and the collector run over the fixtures when pytest is there.
if [ -n "$REDUCE" ] && [ "$TORCH_OK" = 1 ]; then
	for name in ${MAIN_EXAMPLES:-four_class_targets token_id_vocab gather_out_of_range sgd_momentum_window adam_state_window}; do
		say "-- main job: $name"
		STEP_TIMEOUT=${MAIN_TIMEOUT:-150} run "main/$name" "$REDUCE" --batch "fixtures/examples/$name.bin" --backend torch --device cuda \
			--python "$PYTHON" --timeout 50s -j 4 --out "$OUT/main/fixtures-$name" --json -q
		tail -n 1 "$OUT/main/$name.stdout" 2>/dev/null | cut -c1-400 | tee -a "$SUMMARY"
		for rec in "$OUT/main/fixtures-$name"/*/fixture.json; do
			[ -f "$rec" ] && cp "$rec" "$OUT/main/$name.fixture.json"
		done
		if [ -f "$OUT/main/$name.fixture.json" ] && timeout 60 "$PYTHON" -c 'import pytest' 2>/dev/null; then
			# pytest's root is the repository: a fixture replays a recorded step only from there.
			# Collected by the conftest.py and the package's zip reduce wrote there; each run
			# judged by the reduce just built.
			REDUCE_BINARY="$REDUCE" run "main/$name-pytest" "$PYTHON" -m pytest -q -p no:cacheprovider \
				--rootdir "$PWD" "$OUT/main/fixtures-$name"
			tail -n 1 "$OUT/main/$name-pytest.stdout" 2>/dev/null | tee -a "$SUMMARY"
		fi
	done
fi

[ "${REPLAYS:-1}" = 0 ] && say "-- the examples' replays: skipped (REPLAYS=0)"
for ex in $([ "${REPLAYS:-1}" = 0 ] || echo fixtures/examples/*.bin); do
	name=$(basename "$ex" .bin)
	say "-- $name"
	if [ -n "$REDUCE" ]; then
		run "$name/go-cuda" "$REDUCE" replay --backend go --device cuda --json "$ex"
		if [ "$TORCH_OK" = 1 ]; then
			run "$name/torch-cuda-zygote" "$REDUCE" replay --backend torch --device cuda --python "$PYTHON" --timeout 50s --json "$ex"
			run "$name/torch-cuda-no-zygote" "$REDUCE" replay --backend torch --device cuda --python "$PYTHON" --no-zygote --timeout 50s --json "$ex"
			run "$name/torch-cpu-zygote" "$REDUCE" replay --backend torch --device cpu --python "$PYTHON" --timeout 50s --json "$ex"
		fi
	fi
	if [ "$TORCH_OK" = 1 ]; then
		# The real stderr, as torch prints it: blocking (the traceback at the op) and
		# asynchronous (at a later call).
		run "$name/worker-cuda-blocking" env CUDA_LAUNCH_BLOCKING=1 PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 "$PYTHON" "$MODULE" replay "$ex" --device cuda
		run "$name/worker-cuda-async" env -u CUDA_LAUNCH_BLOCKING PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 "$PYTHON" "$MODULE" replay "$ex" --device cuda
	fi
	for f in "$OUT/$name"/*.stdout; do
		[ -s "$f" ] || continue
		# The signature line of each --json run: the last JSON line with one.
		sig=$(grep -o '"signature":{[^}]*}' "$f" | tail -n 1)
		[ -n "$sig" ] && say "   $(basename "$f" .stdout): $sig"
	done
	for f in "$OUT/$name"/worker-*.stderr; do
		[ -s "$f" ] || continue
		say "   $(basename "$f" .stderr): $(grep -m 1 -E 'Assertion|Error' "$f" | cut -c1-200)"
	done
done

say "== done in $(($(date +%s) - START))s; files under $OUT"
exit 0
