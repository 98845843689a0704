package shrink

import (
	"context"
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// dnf is the synthetic failure of most tests: a candidate fails iff it
// keeps every unit of at least one of the sets. One set of one unit is a
// single culprit, several one-unit sets are independent culprits, one set
// of several units is a conjunctive set. An empty set fails everything; no
// set at all fails nothing.
type dnf [][]int

func (d dnf) fails(c Candidate) bool {
	for _, s := range d {
		all := true
		for _, u := range s {
			if !c.Contains(u) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func (d dnf) failsUnits(n int, units []int) bool {
	return d.fails(Candidate{s: setOf(units...), n: n})
}

func (d dnf) oracle() Oracle {
	return func(_ context.Context, c Candidate) (Outcome, error) {
		if d.fails(c) {
			return Fail, nil
		}
		return Pass, nil
	}
}

func singles(units ...int) dnf {
	d := make(dnf, len(units))
	for i, u := range units {
		d[i] = []int{u}
	}
	return d
}

// countingOracle wraps an oracle and counts its calls (atomically, since
// the engine may call it from several goroutines).
func countCalls(o Oracle, calls *int64) Oracle {
	return func(ctx context.Context, c Candidate) (Outcome, error) {
		atomicAdd(calls, 1)
		return o(ctx, c)
	}
}

// requireValidResult checks what Run promises about every complete
// result, directly against the failure model: each culprit set fails,
// is 1-minimal, is sorted, and the sets are pairwise disjoint.
func requireValidResult(t require.TestingT, n int, d dnf, r Result) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	seen := map[int]bool{}
	for _, c := range r.Culprits {
		require.True(t, slices.IsSorted(c), "culprit set %v not sorted", c)
		require.True(t, d.failsUnits(n, c), "culprit set %v does not fail", c)
		for i := range c {
			without := slices.Delete(slices.Clone(c), i, i+1)
			require.False(t, d.failsUnits(n, without), "culprit set %v is not 1-minimal: %v fails", c, without)
		}
		for _, u := range c {
			require.False(t, seen[u], "unit %d in two culprit sets", u)
			seen[u] = true
		}
	}
}

func ceilLog2(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// log2Binomial is log2 C(n, k), the information bound for finding k
// culprits among n.
func log2Binomial(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return (a - b - c) / math.Ln2
}

func ceilLog2Binomial(n, k int) int { return int(math.Ceil(log2Binomial(n, k) - 1e-9)) }

func run(t testing.TB, n int, o Oracle, opts Options) Result {
	t.Helper()
	r, err := Run(context.Background(), n, o, opts)
	require.NoError(t, err)
	return r
}

func atomicAdd(p *int64, d int64) int64 { return atomic.AddInt64(p, d) }
