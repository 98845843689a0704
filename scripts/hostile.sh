#!/usr/bin/env bash
# hostile.sh: the hostile-input and fault tables, measured. Each row runs the
# tests that count it, under Debian's torch and the PyPI one where Python is
# involved, and prints what they counted; the last row runs every mutant of
# scripts/mutants.sh. Needs what `make test` installs (make deps deps-torch2).
#
#   scripts/hostile.sh           every row
#   scripts/hostile.sh -q        every row but the mutants (a few minutes less)
#
# Exit 0 when every row holds, 1 when one does not.
set -u
cd "$(dirname "$0")/.."
DEBIAN=${PYTHON:-/usr/bin/python3}
TORCH2=${TORCH2_PYTHON:-$(scripts/pypi-torch-venv.sh dir)/bin/python}
quick=0
[ "${1:-}" = -q ] && quick=1
status=0
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

# row NAME PYTHON PKG RUN: go test -run RUN PKG under PYTHON; the row is the
# count of tests passed and failed, and the counts they log ("N files ...").
row() {
	local name=$1 py=$2 pkg=$3 tests=$4 out="$log/$RANDOM.log"
	REDUCE_PYTHON=$py REDUCE_REQUIRE_TORCH=1 go test -timeout 45m -count=1 -v -run "$tests" "$pkg" >"$out" 2>&1
	local rc=$? pass fail
	pass=$(grep -c -- '^--- PASS' "$out")
	fail=$(grep -c -- '^--- FAIL' "$out")
	if [ $rc -ne 0 ] || [ "$pass" -eq 0 ]; then
		status=1
		printf '%-48s FAIL  %s passed, %s failed (%s)\n' "$name" "$pass" "$fail" "$pkg"
		grep -m 5 -- '--- FAIL\|Error:' "$out" | sed 's/^/    /'
		return
	fi
	printf '%-48s ok    %s tests passed' "$name" "$pass"
	# The counts a test logs (the readers' corpus, the secrets).
	grep -h -o '_test.go:[0-9]*: [0-9][0-9]* .*' "$out" | head -1 | sed 's/^_test.go:[0-9]*//' | tr -d '\n'
	echo
}

echo "== readers: one corpus, both readers (accept or refuse alike, the same field named, BatchFileError only)"
row "readers, torch $($DEBIAN -c 'import torch; print(torch.__version__)' 2>/dev/null)" "$DEBIAN" ./fixtures '^(TestPythonReaderAgrees|TestBadCorpus)$'
row "readers, torch $($TORCH2 -c 'import torch; print(torch.__version__)' 2>/dev/null)" "$TORCH2" ./fixtures '^(TestPythonReaderAgrees)$'
echo "== exit codes: 2 for every bad input, one line, nothing written"
row "bad files, --batch and inspect" "$DEBIAN" ./cmd/reduce '^TestBadFilesExitTwo$'
row "bad input to the main job, end to end" "$DEBIAN" ./cmd/reduce '^TestScript$/^reduce_bad$'
row "the op's contract before any replay" "$DEBIAN" ./replay '^(TestForBatch)$'
row "--out: not writable, locked" "$DEBIAN" ./internal/reduction '^(TestOutIsLocked|TestOutNotWritableIsUsage)$'
row "a candidate too large for the worker" "$DEBIAN" ./replay '^(TestNewRefusesViewsTooLargeToBuild|TestWorkerRefusesViewsTooLargeToBuild)$'
echo "== the recorder writes every writable case"
row "hostile batches, read back by Go" "$DEBIAN" ./fixtures '^(TestRecorderHostileBatches)$'
for py in "$DEBIAN" "$TORCH2"; do
	out="$log/pytest.log"
	if (cd replay/python && "$py" -m pytest -q -p no:cacheprovider test_recorder_faults.py) >"$out" 2>&1; then
		printf '%-48s ok    %s\n' "hostile batches, pytest ($($py -c 'import torch; print(torch.__version__)'))" "$(tail -1 "$out")"
	else
		status=1
		printf '%-48s FAIL  %s\n' "hostile batches, pytest ($py)" "$(tail -1 "$out")"
	fi
done
echo "== faults"
row "worker death, exit 0 before the step returned" "$DEBIAN" ./replay '^(TestGoWorkerDeathIsInfra|TestTorchExitBeforeReturnIsInfra|TestWorkerFault)$'
row "setsid grandchildren, stale temporary dirs" "$DEBIAN" ./replay '^(TestStrayGrandchildKilled|TestRunnerKillsEscapedGrandchild|TestFaultEscapedGrandchild|TestNewRemovesStaleDirectories)$'
row "source written over, infra in a row" "$DEBIAN" ./internal/reduction '^(TestSourceWrittenOverStops|TestSourceRenamedOverGoesOn|TestInfraRunStops)$'
row "full TMPDIR is the machine's" "$DEBIAN" ./fixtures '^(TestReadFullTempIsMachine)$'
echo "== secrets and names"
row "secrets: upstream text, fixture.json, report.md" "$DEBIAN" ./internal/regress '^(TestRedact.*)$'
row "zip entry names" "$DEBIAN" ./fixtures '^(TestNPZEntryNames)$'
if [ $quick = 0 ]; then
	echo "== mutants"
	if scripts/mutants.sh >"$log/mutants.log" 2>&1; then
		printf '%-48s ok    %s\n' "mutants" "$(grep -c ' killed' "$log/mutants.log") killed, none survived"
	else
		status=1
		printf '%-48s FAIL\n' "mutants"
		grep -v ' killed' "$log/mutants.log" | tail -20 | sed 's/^/    /'
	fi
fi
exit $status
