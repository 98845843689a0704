#!/usr/bin/env bash
# Regenerates the committed regression fixtures (fixtures/regress) from the
# examples (fixtures/examples), with the go backend and each example's own
# flags: run it when the fixture writer changes. The size-mode example is
# left out: its fixture would only replay under --device-memory, which the
# committed fixtures' tests do not emulate. A fixture is named by its
# batches and its record (less the run's timings and whereabouts), so the
# names change when a reduction finds another minimal batch or records it
# otherwise; the script lists the directories that came and went.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/reduce ./cmd/reduce
before=$(ls fixtures/regress 2>/dev/null || true)
rm -rf fixtures/regress
for expected in fixtures/examples/*.expected.json; do
	name=$(basename "$expected" .expected.json)
	mode=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("mode",""))' "$expected")
	if [ "$mode" = size ]; then
		echo "skip $name (size mode)" >&2
		continue
	fi
	flags=$(python3 -c 'import json,shlex,sys; print(shlex.join(json.load(open(sys.argv[1])).get("flags") or []))' "$expected")
	echo "reduce $name $flags" >&2
	eval bin/reduce --batch "fixtures/examples/$name.bin" --out fixtures/regress -q "$flags" >/dev/null
done
after=$(ls fixtures/regress)
diff <(echo "$before") <(echo "$after") && echo "same fixtures: $(echo "$after" | wc -l)" >&2
