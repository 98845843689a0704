#!/usr/bin/env bash
# Measures the exec backend's fork server: one reduction, warm (the
# default) and cold (--no-zygote), of a 256-sample cross_entropy batch with
# one bad target (index 173 holds class 10 of 10), replayed by a user's step
# script: --backend exec --replay 'PYTHON step.py {batch}'. Prints, for
# each, the replays and the wall time, and the ratio cold/warm.
#
#   scripts/bench-exec-warm.sh [PYTHON]     (default /usr/bin/python3; it must import torch)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/reduce" ./cmd/reduce
"$tmp/reduce" recorder >"$tmp/reduce_batch.py"
cat >"$tmp/make_batch.py" <<'PY'
import sys
import torch
import torch.nn.functional as F
import reduce_batch

torch.manual_seed(0)
inp = torch.randn(256, 10)
target = torch.randint(0, 10, (256,))
target[173] = 10
try:
    F.cross_entropy(inp, target)
except IndexError as e:
    err = e
reduce_batch.save(sys.argv[1], {"input": inp, "target": target}, error=err)
PY
cat >"$tmp/step.py" <<'PY'
"""The user's step: load the candidate, run cross_entropy on it."""
import sys
import torch.nn.functional as F
import reduce_batch

b = reduce_batch.load(sys.argv[1])
print(F.cross_entropy(b.tensors["input"], b.tensors["target"]).item())
PY
(cd "$tmp" && "$python" make_batch.py batch.bin)
cd "$tmp"
for how in warm cold; do
	flags=()
	[ "$how" = cold ] && flags=(--no-zygote)
	start=$(date +%s.%N)
	"$tmp/reduce" --batch batch.bin --out "$tmp/out-$how" --json --quiet "${flags[@]}" \
		--backend exec --replay "$python step.py {batch}" >"$tmp/$how.json"
	end=$(date +%s.%N)
	python3 - "$how" "$start" "$end" "$tmp/$how.json" <<'PY'
import json, sys
how, start, end, path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
last = json.loads(open(path).read().splitlines()[-1])
print("%s: %d replays, %.2f s wall (reduction %.2f s), culprits %s" % (
    how, last["replays"], end - start, last["seconds"], [c["indices"] for c in last.get("culprits", [])]))
open(path + ".wall", "w").write("%f %d" % (end - start, last["replays"]))
PY
done
python3 - "$tmp/warm.json.wall" "$tmp/cold.json.wall" <<'PY'
import sys
w, c = (open(p).read().split() for p in sys.argv[1:])
print("cold/warm wall time: %.1fx (replays %s vs %s)" % (float(c[0]) / float(w[0]), c[1], w[1]))
PY
