package shrink

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestPropertyResults: on random failures of every family - and on random
// unions of small conjunctive sets, which no strategy is tuned for - with
// either strategy and 1 or 3 jobs, every culprit set reported fails and is
// 1-minimal, sets are disjoint, and a single-unit family yields exactly its
// culprits.
func TestPropertyResults(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4096).Draw(t, "n")
		kind := rapid.SampledFrom([]string{"one", "independent", "pair", "triple", "dnf"}).Draw(t, "kind")
		perm := rapid.Permutation(seq(n)).Draw(t, "perm")
		var d dnf
		switch kind {
		case "one":
			d = singles(perm[0])
		case "independent":
			d = singles(perm[:rapid.IntRange(1, min(n, 12)).Draw(t, "k")]...)
		case "pair":
			if n < 2 {
				t.Skip("n < 2")
			}
			d = dnf{perm[:2]}
		case "triple":
			if n < 3 {
				t.Skip("n < 3")
			}
			d = dnf{perm[:3]}
		case "dnf":
			terms := rapid.IntRange(1, 4).Draw(t, "terms")
			for i := 0; i < terms; i++ {
				size := rapid.IntRange(1, 3).Draw(t, fmt.Sprint("size", i))
				start := rapid.IntRange(0, n-1).Draw(t, fmt.Sprint("start", i))
				var term []int
				for j := 0; j < size && start+j < n; j++ {
					term = append(term, perm[(start+j)%n])
				}
				d = append(d, term)
			}
		}
		opts := Options{
			Strategy: rapid.SampledFrom([]Strategy{Auto, DDMin}).Draw(t, "strategy"),
			Jobs:     rapid.SampledFrom([]int{1, 3}).Draw(t, "jobs"),
			Halve:    rapid.Bool().Draw(t, "halve"),
		}
		r, err := Run(context.Background(), n, d.oracle(), opts)
		require.NoError(t, err)
		require.False(t, r.Incomplete)
		requireValidResult(t, n, d, r)
		require.NotEmpty(t, r.Culprits)
		// A 1-minimal failing set of a monotone DNF is one of its minimal
		// terms.
		for _, c := range r.Culprits {
			require.True(t, isMinimalTerm(n, d, c), "%v is not a minimal term of %v", c, d)
		}
		if kind == "one" || kind == "independent" {
			var got []int
			for _, c := range r.Culprits {
				got = append(got, c...)
			}
			want := slices.Clone(perm[:len(d)])
			slices.Sort(got)
			slices.Sort(want)
			require.Equal(t, want, got, "all independent culprits found")
			// Halving asks smaller candidates, not other questions: the
			// same culprits, in the same order, in no more calls.
			other := opts
			other.Halve = !opts.Halve
			o, err := Run(context.Background(), n, d.oracle(), other)
			require.NoError(t, err)
			require.Equal(t, r.Culprits, o.Culprits, "halve=%v against halve=%v", opts.Halve, other.Halve)
			if opts.Strategy == Auto && len(d) == 1 {
				halved, plain := r, o
				if !opts.Halve {
					halved, plain = o, r
				}
				require.LessOrEqual(t, halved.CallsToFirst, plain.CallsToFirst, "one culprit: halving asks no more")
				require.LessOrEqual(t, halved.Accepted, plain.Accepted, "one culprit")
			}
		}
	})
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func isMinimalTerm(n int, d dnf, c []int) bool {
	for _, term := range d {
		s := slices.Clone(term)
		slices.Sort(s)
		s = slices.Compact(s)
		if slices.Equal(s, c) {
			return true
		}
	}
	return false
}

// TestAutoVersusDDMin compares the calls both strategies need to reach
// their first 1-minimal culprit set (StopAfterFirst; finding the other
// independent culprits is extra work, measured by the call table) on
// random placements, n up to 4096. The seed is fixed and printed on
// failure.
//
// For one culprit and for independent culprits auto never needs more
// calls than ddmin, case by case: both bisect the same halves, and auto
// saves ddmin's second test at every level where the first passes. For
// conjunctive sets ddmin wins on a small share of placements - units a
// few positions apart, which ddmin's contiguous chunks catch early - so
// there the per-case check is kept but skipped with its numbers, and the
// aggregate is asserted instead: over the placements auto needs far fewer
// calls, and loses on at most 2% of them.
func TestAutoVersusDDMin(t *testing.T) {
	const seed = 20240617
	cases := 300
	if testing.Short() {
		cases = 60
	}
	for _, fam := range []struct {
		name      string
		k         func(rng *rand.Rand) int
		conj      bool
		perCaseOK bool
	}{
		{"one culprit", func(*rand.Rand) int { return 1 }, false, true},
		{"independent culprits", func(rng *rand.Rand) int { return 2 + rng.IntN(7) }, false, true},
		{"conjunctive pair", func(*rand.Rand) int { return 2 }, true, false},
		{"conjunctive triple", func(*rand.Rand) int { return 3 }, true, false},
	} {
		t.Run(fam.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(len(fam.name))))
			var sumAuto, sumDD, losses int
			var worst string
			for i := 0; i < cases; i++ {
				n := 2 + rng.IntN(4095)
				k := min(fam.k(rng), n)
				units := rng.Perm(n)[:k]
				d := singles(units...)
				if fam.conj {
					d = dnf{units}
				}
				a := run(t, n, d.oracle(), Options{StopAfterFirst: true})
				dd := run(t, n, d.oracle(), Options{Strategy: DDMin, StopAfterFirst: true})
				requireValidResult(t, n, d, a)
				sumAuto += a.CallsToFirst
				sumDD += dd.CallsToFirst
				if a.CallsToFirst > dd.CallsToFirst {
					losses++
					if worst == "" {
						worst = fmt.Sprintf("n=%d units=%v: auto %d calls, ddmin %d", n, units, a.CallsToFirst, dd.CallsToFirst)
					}
					if fam.perCaseOK {
						t.Fatalf("seed %d case %d: n=%d units=%v: auto needs %d calls, ddmin %d",
							seed, i, n, units, a.CallsToFirst, dd.CallsToFirst)
					}
				}
			}
			t.Logf("seed %d, %d cases: auto %.1f calls on average, ddmin %.1f; auto lost %d times",
				seed, cases, float64(sumAuto)/float64(cases), float64(sumDD)/float64(cases), losses)
			require.Less(t, sumAuto, sumDD, "seed %d: auto must need fewer calls overall", seed)
			require.LessOrEqual(t, losses*50, cases, "seed %d: auto lost on more than 2%% of the cases, e.g. %s", seed, worst)
			t.Run("per case", func(t *testing.T) {
				if losses > 0 {
					t.Skipf("auto needed more calls than ddmin on %d of %d random placements (seed %d), e.g. %s; "+
						"these are units a few positions apart, where ddmin's contiguous chunks win", losses, cases, seed, worst)
				}
			})
		})
	}
}

// TestCloseConjunctiveUnits measures the family where ddmin beats auto:
// conjunctive units at most 3 positions apart. It asserts only that both
// find the set; the numbers are logged, and reported in the package notes.
func TestCloseConjunctiveUnits(t *testing.T) {
	rng := rand.New(rand.NewPCG(99, 1))
	var sumAuto, sumDD, losses int
	const cases = 100
	for i := 0; i < cases; i++ {
		n := 8 + rng.IntN(4088)
		base := rng.IntN(n - 3)
		units := []int{base, base + 1 + rng.IntN(3)}
		d := dnf{units}
		a := run(t, n, d.oracle(), Options{StopAfterFirst: true})
		dd := run(t, n, d.oracle(), Options{Strategy: DDMin, StopAfterFirst: true})
		require.Equal(t, [][]int{units}, a.Culprits)
		require.Equal(t, [][]int{units}, dd.Culprits)
		sumAuto += a.CallsToFirst
		sumDD += dd.CallsToFirst
		if a.CallsToFirst > dd.CallsToFirst {
			losses++
		}
	}
	t.Logf("close pairs: auto %.1f calls on average, ddmin %.1f; auto lost %d of %d",
		float64(sumAuto)/cases, float64(sumDD)/cases, losses, cases)
}
