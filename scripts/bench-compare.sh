#!/usr/bin/env bash
# Measures the main job's benchmarks (cmd/reduce, BenchmarkReduce*) of two
# builds in one run, side by side: the revision BASE (a commit, a branch)
# and the working tree. Both binaries run under the working tree's
# benchmarks, alternating, COUNT rounds; the table gives, per benchmark,
# the replays of each (they must be equal for a change that keeps the
# behaviour), the median wall time of each and their ratio.
#
#   scripts/bench-compare.sh BASE [COUNT]     (BENCH=regexp narrows the benchmarks)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: scripts/bench-compare.sh BASE [COUNT]}
count=${2:-3}
bench=${BENCH:-Reduce}
tmp=$(mktemp -d)
cleanup() { git worktree remove --force "$tmp/tree" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
git worktree add --detach "$tmp/tree" "$base" >/dev/null
(cd "$tmp/tree" && go build -o "$tmp/reduce-base" ./cmd/reduce)
go build -o "$tmp/reduce-head" ./cmd/reduce
for i in $(seq "$count"); do
	for which in base head; do
		echo "round $i: $which" >&2
		REDUCE_BENCH_BIN="$tmp/reduce-$which" REDUCE_PYTHON="${PYTHON:-/usr/bin/python3}" \
			go test -timeout 90m -run '^$' -bench "$bench" -benchtime=1x ./cmd/reduce/ |
			sed -n "s/^Benchmark/$which Benchmark/p" >>"$tmp/results"
	done
done
python3 - "$tmp/results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    f = line.split()
    which, name = f[0], f[1].split("-")[0].removeprefix("Benchmark")
    vals = {f[i + 1]: float(f[i]) for i in range(3, len(f) - 1, 2)}
    runs[name][which].append(vals)
print(f"{'benchmark':<44} {'replays':>13} {'base s':>8} {'head s':>8} {'head/base':>9}")
ratios = []
for name in sorted(runs):
    b, h = runs[name]["base"], runs[name]["head"]
    rb = sorted({int(v["replays"]) for v in b}); rh = sorted({int(v["replays"]) for v in h})
    tb = statistics.median(v["ns/op"] for v in b) / 1e9; th = statistics.median(v["ns/op"] for v in h) / 1e9
    ratios.append(th / tb)
    rep = "/".join(map(str, rb)) + (" = " if rb == rh else " ≠ ") + "/".join(map(str, rh))
    print(f"{name:<44} {rep:>13} {tb:8.2f} {th:8.2f} {th / tb:9.2f}")
print(f"geometric mean of head/base: {statistics.geometric_mean(ratios):.3f}")
PY
