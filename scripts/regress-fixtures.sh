#!/usr/bin/env bash
# Regenerates the committed regression fixtures (fixtures/regress) from the
# examples (fixtures/examples), each with its own flags: run it when the
# fixture writer changes. An example recorded for an op reduces with the go
# backend; one recorded for a step of its own (fixtures/examples/
# example_steps.py) with the torch backend under $PYTHON (default
# /usr/bin/python3, Debian's torch), with fixtures/examples on PYTHONPATH so
# that the step is imported by name where the path the file records is gone
# (another clone). A fixture is named by its batches and its record (less
# the run's timings and whereabouts), so the names change when a reduction
# finds another minimal batch or records it otherwise; the script lists the
# directories that came and went.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-/usr/bin/python3}
export PYTHONPATH="$PWD/fixtures/examples${PYTHONPATH:+:$PYTHONPATH}"
go build -o bin/reduce ./cmd/reduce
# The examples are the project's own recordings (make_examples.py): trusted
# here, in the user's trust store, so that reduce runs the steps they record
# (a batch file committed is no proof: docs/TRUST.md, "A batch file from someone
# else"); the fixtures written from them are then the user's too.
bin/reduce trust fixtures/examples/*.bin >/dev/null
before=$(ls fixtures/regress 2>/dev/null || true)
rm -rf fixtures/regress
for expected in fixtures/examples/*.expected.json; do
	name=$(basename "$expected" .expected.json)
	flags=$(python3 -c 'import json,shlex,sys; print(shlex.join(json.load(open(sys.argv[1])).get("flags") or []))' "$expected")
	step=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("step") or "")' "$expected")
	if [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("torch") or "")' "$expected")" = 2 ]; then
		# It fails only under torch 2, and the committed fixtures replay
		# under both torches: its reduction is tested under torch 2
		# (TestExamplesReduce in make test-go-torch2), not committed.
		echo "skip $name: it fails only under torch 2" >&2
		continue
	fi
	backend=(--backend go)
	if [ -n "$step" ]; then
		backend=(--backend torch --python "$python")
	fi
	echo "reduce $name ${backend[*]} $flags" >&2
	eval bin/reduce --batch "fixtures/examples/$name.bin" --out fixtures/regress -q '"${backend[@]}"' "$flags" >/dev/null
done
# No Python beside them: the repository's tests collect them with the
# package's plugin (the Makefile's python-tests).
rm -rf fixtures/regress/conftest.py fixtures/regress/.reduce
after=$(ls fixtures/regress)
diff <(echo "$before") <(echo "$after") && echo "same fixtures: $(echo "$after" | wc -l)" >&2
