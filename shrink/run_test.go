package shrink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSingleCulpritEveryPosition is the exhaustive table for one culprit:
// every n from 1 to 64, every position. Auto must find it within
// ⌈log2 n⌉ + 2 calls after the confirmation of the original (all culprit
// sets searched for, so that includes the test that no other exists), and
// reach it in no more calls than ddmin.
func TestSingleCulpritEveryPosition(t *testing.T) {
	for n := 1; n <= 64; n++ {
		for u := 0; u < n; u++ {
			d := singles(u)
			auto := run(t, n, d.oracle(), Options{})
			require.Equal(t, [][]int{{u}}, auto.Culprits, "n=%d u=%d", n, u)
			require.LessOrEqual(t, auto.Accepted-1, ceilLog2(n)+2, "n=%d u=%d: calls after confirmation", n, u)

			// Halving: the same culprit in no more calls, and candidates
			// that hold at most n + ⌈log2 n⌉ + 1 units in all (halves
			// rounded up, and the culprit alone), besides the original,
			// the "anything else?" question and, where every half passed,
			// the last halving's (n-1 units each).
			var held int
			heldBy := func(ctx context.Context, c Candidate) (Outcome, error) {
				held += c.Len()
				return d.oracle()(ctx, c)
			}
			halved := run(t, n, heldBy, Options{Halve: true})
			require.Equal(t, auto.Culprits, halved.Culprits, "halve n=%d u=%d", n, u)
			require.LessOrEqual(t, halved.CallsToFirst, auto.CallsToFirst, "halve n=%d u=%d", n, u)
			require.LessOrEqual(t, halved.Accepted, auto.Accepted, "halve n=%d u=%d", n, u)
			require.LessOrEqual(t, held, n+n+ceilLog2(n)+1+2*(n-1), "halve n=%d u=%d: units held", n, u)

			first := run(t, n, d.oracle(), Options{StopAfterFirst: true})
			dd := run(t, n, d.oracle(), Options{Strategy: DDMin, StopAfterFirst: true})
			require.Equal(t, [][]int{{u}}, dd.Culprits, "ddmin n=%d u=%d", n, u)
			require.LessOrEqual(t, first.CallsToFirst, dd.CallsToFirst, "n=%d u=%d: auto vs ddmin", n, u)
			require.Equal(t, first.Accepted-1, first.CallsToFirst)
		}
	}
}

func TestFamilies(t *testing.T) {
	allUnits := func(n int) []int {
		u := make([]int, n)
		for i := range u {
			u[i] = i
		}
		return u
	}
	tests := []struct {
		name string
		n    int
		d    dnf
		want [][]int // in the order found (sorted for ddmin); nil: one of d's sets
	}{
		{"independent pair", 64, singles(3, 40), [][]int{{40}, {3}}},
		{"independent 5", 100, singles(1, 22, 23, 60, 99), [][]int{{99}, {60}, {23}, {22}, {1}}},
		{"conjunctive pair", 64, dnf{{10, 41}}, [][]int{{10, 41}}},
		{"adjacent conjunctive pair", 64, dnf{{20, 21}}, [][]int{{20, 21}}},
		{"conjunctive triple", 100, dnf{{5, 50, 95}}, [][]int{{5, 50, 95}}},
		{"every unit needed", 12, dnf{allUnits(12)}, [][]int{allUnits(12)}},
		{"every unit needed, one unit", 1, dnf{{0}}, [][]int{{0}}},
		{"no unit needed", 16, dnf{{}}, [][]int{{}}},
		{"no unit needed, no units", 0, dnf{{}}, [][]int{{}}},
		{"culprit and disjoint pair", 64, dnf{{7}, {20, 45}}, [][]int{{20, 45}, {7}}},
		{"two disjoint pairs", 64, dnf{{1, 2}, {30, 60}}, [][]int{{30, 60}, {1, 2}}},
		{"overlapping sets: only disjoint ones reported", 32, dnf{{3, 9}, {3, 20}}, nil},
	}
	for _, tt := range tests {
		for _, s := range []Strategy{Auto, DDMin} {
			t.Run(fmt.Sprintf("%s/%v", tt.name, s), func(t *testing.T) {
				r := run(t, tt.n, tt.d.oracle(), Options{Strategy: s})
				requireValidResult(t, tt.n, tt.d, r)
				assert.False(t, r.Incomplete)
				if tt.want == nil {
					require.Len(t, r.Culprits, 1)
					require.Contains(t, tt.d, r.Culprits[0])
					return
				}
				got := slices.Clone(r.Culprits)
				want := slices.Clone(tt.want)
				if s == DDMin { // ddmin may find the sets in another order
					slices.SortFunc(got, slices.Compare)
					slices.SortFunc(want, slices.Compare)
				}
				assert.Equal(t, want, got)
				assert.Equal(t, r.Calls, r.Accepted, "Jobs = 1 makes no speculative calls")
				assert.Equal(t, r.Tests, len(r.Steps))
			})
		}
	}
}

func TestOriginalDoesNotFail(t *testing.T) {
	tests := []struct {
		name string
		o    Outcome
		want error
	}{
		{"passes", Pass, ErrOriginalPasses},
		{"unresolved", Unresolved, ErrOriginalUnresolved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls int64
			o := countCalls(func(context.Context, Candidate) (Outcome, error) { return tt.o, nil }, &calls)
			r, err := Run(context.Background(), 10, o, Options{})
			require.ErrorIs(t, err, tt.want)
			assert.Empty(t, r.Culprits)
			assert.EqualValues(t, 1, calls, "only the original is replayed")
			assert.Equal(t, 1, r.Calls)
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	ok := dnf{{1}}.oracle()
	tests := []struct {
		name   string
		n      int
		oracle Oracle
		opts   Options
	}{
		{"negative n", -1, ok, Options{}},
		{"nil oracle", 4, nil, Options{}},
		{"negative jobs", 4, ok, Options{Jobs: -1}},
		{"negative trials", 4, ok, Options{Trials: -2}},
		{"negative max tests", 4, ok, Options{MaxTests: -1}},
		{"negative max duration", 4, ok, Options{MaxDuration: -time.Second}},
		{"unknown strategy", 4, ok, Options{Strategy: 9}},
		{"unknown policy", 4, ok, Options{Policy: 9}},
		{"unknown confirm mode", 4, ok, Options{Confirm: 9}},
		{"seed outside the units", 4, ok, Options{Seed: []CacheEntry{{Candidate: []Range{{0, 5}}, Outcome: Fail}}}},
		{"seed with empty range", 4, ok, Options{Seed: []CacheEntry{{Candidate: []Range{{2, 2}}, Outcome: Fail}}}},
		{"seed with invalid outcome", 4, ok, Options{Seed: []CacheEntry{{Candidate: []Range{{0, 1}}}}}},
		{"seed contradicting itself", 4, ok, Options{Seed: []CacheEntry{
			{Candidate: []Range{{0, 2}}, Outcome: Fail},
			{Candidate: []Range{{0, 1}, {1, 2}}, Outcome: Pass},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.n, tt.oracle, tt.opts)
			require.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
	t.Run("zero value is valid", func(t *testing.T) {
		r := run(t, 4, ok, Options{})
		assert.Equal(t, [][]int{{1}}, r.Culprits)
	})
}

func TestOracleErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		oracle Oracle
		is     error
	}{
		{"error", func(_ context.Context, c Candidate) (Outcome, error) {
			if c.Len() == 4 {
				return 0, boom
			}
			return dnf{{6}}.oracle()(context.Background(), c)
		}, boom},
		{"invalid outcome", func(_ context.Context, c Candidate) (Outcome, error) {
			if c.Len() == 4 {
				return 0, nil
			}
			return dnf{{6}}.oracle()(context.Background(), c)
		}, nil},
		{"panic", func(_ context.Context, c Candidate) (Outcome, error) {
			if c.Len() == 4 {
				panic("oracle bug")
			}
			return dnf{{6}}.oracle()(context.Background(), c)
		}, nil},
	}
	for _, tt := range tests {
		for _, jobs := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/jobs=%d", tt.name, jobs), func(t *testing.T) {
				r, err := Run(context.Background(), 8, tt.oracle, Options{Jobs: jobs})
				require.Error(t, err)
				var oe *OracleError
				require.ErrorAs(t, err, &oe)
				assert.Equal(t, "{4-7}", oe.Candidate)
				if tt.is != nil {
					assert.ErrorIs(t, err, tt.is)
				}
				assert.Empty(t, r.Culprits)
				assert.False(t, r.Incomplete, "an oracle error is not a budget")
			})
		}
	}
}

// fakeClock advances only when told to, so MaxDuration tests depend on the
// number of calls, never on real time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestBudgets(t *testing.T) {
	const n = 64
	d := dnf{{10, 41}}
	full := run(t, n, d.oracle(), Options{})
	require.Greater(t, full.Calls, 8)

	type setup func() (context.Context, Oracle, Options, func())
	tests := []struct {
		name   string
		setup  setup
		reason Reason
	}{
		{"max tests", func() (context.Context, Oracle, Options, func()) {
			return context.Background(), d.oracle(), Options{MaxTests: 8}, func() {}
		}, ReasonMaxTests},
		{"max duration", func() (context.Context, Oracle, Options, func()) {
			clock := &fakeClock{}
			o := func(ctx context.Context, c Candidate) (Outcome, error) {
				clock.advance(time.Second) // every replay "takes" a second
				return d.oracle()(ctx, c)
			}
			return context.Background(), o, Options{MaxDuration: 7*time.Second + time.Millisecond, Clock: clock}, func() {}
		}, ReasonMaxDuration},
		{"context canceled by the oracle", func() (context.Context, Oracle, Options, func()) {
			ctx, cancel := context.WithCancel(context.Background())
			var calls int64
			o := func(ctx context.Context, c Candidate) (Outcome, error) {
				if atomicAdd(&calls, 1) == 8 {
					cancel()
					return 0, ctx.Err()
				}
				return d.oracle()(ctx, c)
			}
			return ctx, o, Options{}, cancel
		}, ReasonCanceled},
	}
	for _, tt := range tests {
		for _, jobs := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/jobs=%d", tt.name, jobs), func(t *testing.T) {
				ctx, o, opts, cancel := tt.setup()
				defer cancel()
				opts.Jobs = jobs
				r, err := Run(ctx, n, o, opts)
				require.NoError(t, err)
				require.True(t, r.Incomplete)
				require.Equal(t, tt.reason, r.Reason)
				require.Empty(t, r.Culprits)
				require.NotEmpty(t, r.Partial, "the best verified candidate so far")
				if jobs == 1 || tt.reason != ReasonCanceled {
					// With speculation, the calls before a cancel may all
					// be candidates that no answer accepted yet.
					require.Less(t, len(r.Partial), n, "some progress was made")
				}
				require.True(t, d.failsUnits(n, r.Partial), "partial %v must fail", r.Partial)
				// The accepted steps are a prefix of the uninterrupted run's.
				require.LessOrEqual(t, len(r.Steps), len(full.Steps))
				require.Equal(t, full.Steps[:len(r.Steps)], r.Steps)
				if tt.reason == ReasonMaxTests {
					require.LessOrEqual(t, r.Calls, 8)
				}
			})
		}
	}

	t.Run("budget during a later culprit set keeps the complete ones", func(t *testing.T) {
		d := singles(5, 50)
		r := run(t, n, d.oracle(), Options{MaxTests: 10})
		require.True(t, r.Incomplete)
		require.Equal(t, [][]int{{50}}, r.Culprits)
		if r.Partial != nil {
			require.True(t, d.failsUnits(n, r.Partial))
			require.NotContains(t, r.Partial, 50)
		}
	})
	t.Run("stopped before the original was confirmed", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r, err := Run(ctx, n, d.oracle(), Options{})
		require.ErrorIs(t, err, ErrBudget)
		require.True(t, r.Incomplete)
		require.Equal(t, ReasonCanceled, r.Reason)
		require.Zero(t, r.Calls)
	})
}

// TestResume interrupts a run with a budget and resumes it from its
// exported cache: together the two runs make exactly the calls of one
// uninterrupted run, and reach the same result.
func TestResume(t *testing.T) {
	const n = 256
	d := dnf{{3}, {100, 200}, {77}}
	full := run(t, n, d.oracle(), Options{})
	for _, budget := range []int{1, 5, 13, full.Calls - 1} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			part, err := Run(context.Background(), n, d.oracle(), Options{MaxTests: budget})
			if budget == 1 {
				require.NoError(t, err)
			}
			require.True(t, part.Incomplete)
			rest := run(t, n, d.oracle(), Options{Seed: part.Cache})
			require.False(t, rest.Incomplete)
			require.Equal(t, full.Culprits, rest.Culprits)
			require.Equal(t, full.Calls, part.Calls+rest.Calls)
			require.Equal(t, len(full.Steps), len(rest.Steps), "the resumed run takes the same steps")
		})
	}
	t.Run("the cache survives JSON", func(t *testing.T) {
		data, err := json.Marshal(full.Cache)
		require.NoError(t, err)
		require.Contains(t, string(data), `"outcome":"fail"`)
		var back []CacheEntry
		require.NoError(t, json.Unmarshal(data, &back))
		require.Equal(t, full.Cache, back)
		again := run(t, n, d.oracle(), Options{Seed: back})
		require.Zero(t, again.Calls)
	})
	t.Run("fully seeded run makes no call", func(t *testing.T) {
		again := run(t, n, d.oracle(), Options{Seed: full.Cache})
		require.Equal(t, full.Culprits, again.Culprits)
		require.Zero(t, again.Calls)
		require.Equal(t, again.Tests, again.CacheHits)
	})
}

func TestProgress(t *testing.T) {
	const n = 128
	d := dnf{{9}, {70, 71}}
	var used []string // the Used events of Jobs = 1
	for _, jobs := range []int{1, 4} {
		t.Run(fmt.Sprintf("jobs=%d", jobs), func(t *testing.T) {
			var (
				inside   atomic.Int32
				overlap  atomic.Bool
				returned atomic.Bool
				late     atomic.Bool
				events   []Event
			)
			opts := Options{Jobs: jobs, Progress: func(ev Event) {
				if inside.Add(1) != 1 {
					overlap.Store(true)
				}
				if returned.Load() {
					late.Store(true)
				}
				events = append(events, ev)
				inside.Add(-1)
			}}
			r := run(t, n, jitter(d.oracle(), 1), opts)
			returned.Store(true)
			require.False(t, overlap.Load(), "Progress called concurrently")
			require.False(t, late.Load(), "Progress called after Run returned")

			count := map[EventKind]int{}
			var phases []Phase
			for _, ev := range events {
				count[ev.Kind]++
				if ev.Kind == PhaseChanged {
					phases = append(phases, ev.Phase)
				}
			}
			assert.Equal(t, r.Calls, count[TestStarted])
			assert.Equal(t, r.Calls, count[TestFinished])
			assert.Equal(t, r.CacheHits, count[CacheHit])
			assert.Equal(t, r.Accepted, count[Used], "one Used event per call whose answer the search used")
			// The calls used are the same for every Jobs, in the same
			// order; the others were made ahead and wasted.
			var these []string
			for _, ev := range events {
				if ev.Kind == Used {
					these = append(these, fmt.Sprintf("%v#%d %v", ev.Candidate.Ranges(), ev.Trial, ev.Outcome))
				}
			}
			if jobs == 1 {
				used = these
			} else {
				assert.Equal(t, used, these)
			}
			assert.Positive(t, count[NewBest])
			assert.Equal(t, []Phase{PhaseConfirm, PhaseFirst, PhaseMinimal, PhaseOthers, PhaseMinimal, PhaseOthers}, phases)
			// New bests shrink within a culprit set search.
			last := n + 1
			for _, ev := range events {
				if ev.Kind == PhaseChanged && ev.Phase == PhaseOthers {
					last = n + 1
				}
				if ev.Kind == NewBest {
					require.Less(t, ev.Candidate.Len(), last)
					require.True(t, d.fails(ev.Candidate), "new best %v must fail", ev.Candidate)
					last = ev.Candidate.Len()
				}
			}
		})
	}
}

// flaky makes a failing candidate pass with probability p, deterministically
// per (candidate, trial), so that it is flaky yet reproducible for any Jobs.
func flaky(d dnf, p float64, seed uint64) Oracle {
	return func(_ context.Context, c Candidate) (Outcome, error) {
		if !d.fails(c) {
			return Pass, nil
		}
		if unitHash(c, seed) < p {
			return Pass, nil
		}
		return Fail, nil
	}
}

var hashSeed = maphash.MakeSeed()

// unitHash is a deterministic value in [0, 1) per candidate, trial and seed.
func unitHash(c Candidate, seed uint64) float64 {
	h := seed*0x9e3779b97f4a7c15 + uint64(c.Trial())
	for _, r := range c.Ranges() {
		h = mix(h ^ uint64(r.Lo))
		h = mix(h ^ uint64(r.Hi))
	}
	return float64(mix(h)>>11) / (1 << 53)
}

func TestFlaky(t *testing.T) {
	const n = 64
	d := dnf{{37}}
	t.Run("fail-if-any tolerates a flaky failure", func(t *testing.T) {
		r := run(t, n, flaky(d, 0.4, 1), Options{Trials: 4, Policy: FailIfAny})
		requireValidResult(t, n, d, r)
		require.Equal(t, [][]int{{37}}, r.Culprits)
		require.Positive(t, r.Disagreements, "some trials of failing candidates passed")
		require.InDelta(t, float64(r.Disagreements)/float64(r.Trials), r.FlakeRate, 1e-12)
		require.Positive(t, r.Phases[PhaseReconfirm].Tests, "Trials > 1 reconfirms the result")
		require.Empty(t, r.Unconfirmed)
		require.Greater(t, r.Trials, r.Tests-r.CacheHits, "several trials per candidate")
	})
	t.Run("deterministic failure: trials agree", func(t *testing.T) {
		r := run(t, n, d.oracle(), Options{Trials: 3, Policy: FailIfAll})
		require.Equal(t, [][]int{{37}}, r.Culprits)
		require.Zero(t, r.Disagreements)
		require.Zero(t, r.FlakeRate)
		one := run(t, n, d.oracle(), Options{})
		// Fail needs all 3 trials; Pass is decided by the first.
		fails, passes := 0, 0
		for _, s := range one.Steps {
			switch {
			case s.Cached:
			case s.Outcome == Fail:
				fails++
			default:
				passes++
			}
		}
		require.Equal(t, 3*fails+passes+3, r.Calls, "early stop, plus 3 trials to reconfirm")
	})
	t.Run("fail-if-all refuses a flaky original", func(t *testing.T) {
		always := func(_ context.Context, c Candidate) (Outcome, error) {
			if c.Trial() == 1 {
				return Pass, nil
			}
			return Fail, nil
		}
		r, err := Run(context.Background(), n, always, Options{Trials: 3, Policy: FailIfAll})
		require.ErrorIs(t, err, ErrOriginalPasses)
		require.Equal(t, 2, r.Calls, "stops at the first passing trial")
	})
	t.Run("reconfirmation flags a set that no longer fails", func(t *testing.T) {
		var confirming atomic.Bool
		o := func(ctx context.Context, c Candidate) (Outcome, error) {
			if confirming.Load() {
				return Pass, nil
			}
			return d.oracle()(ctx, c)
		}
		opts := Options{Confirm: ConfirmAlways, Progress: func(ev Event) {
			if ev.Kind == PhaseChanged && ev.Phase == PhaseReconfirm {
				confirming.Store(true)
			}
		}}
		r := run(t, n, o, opts)
		require.Equal(t, [][]int{{37}}, r.Culprits)
		require.Equal(t, []int{0}, r.Unconfirmed)
	})
}

func TestTrialPolicy(t *testing.T) {
	F, P, U := Fail, Pass, Unresolved
	tests := []struct {
		policy TrialPolicy
		trials []Outcome
		want   Outcome
		used   int // trials consumed before the verdict
	}{
		{FailIfAny, []Outcome{P, P, F}, F, 3},
		{FailIfAny, []Outcome{F, P, P}, F, 1},
		{FailIfAny, []Outcome{P, U, P}, P, 3},
		{FailIfAny, []Outcome{U, U, U}, U, 3},
		{FailIfAll, []Outcome{F, F, F}, F, 3},
		{FailIfAll, []Outcome{F, P, F}, P, 2},
		{FailIfAll, []Outcome{U, F, F}, U, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v", tt.policy, tt.trials), func(t *testing.T) {
			var en entry
			for _, o := range tt.trials {
				if en.decided() {
					break
				}
				en.record(o, len(tt.trials), tt.policy)
			}
			assert.Equal(t, tt.want, en.verdict)
			assert.Equal(t, tt.used, en.trials)
		})
	}
}

// TestUnresolvedNeverFail answers Unresolved for every candidate that
// lacks the culprit but keeps more than a quarter of the units, and for
// some that have it: the search must neither take those as Fail nor
// report an unverified result.
func TestUnresolvedNeverFail(t *testing.T) {
	const n = 64
	d := dnf{{21}}
	o := func(_ context.Context, c Candidate) (Outcome, error) {
		switch {
		case !d.fails(c) && c.Len() > n/4:
			return Unresolved, nil
		case d.fails(c) && c.Len() > 1 && unitHash(c, 3) < 0.3:
			return Unresolved, nil
		case d.fails(c):
			return Fail, nil
		}
		return Pass, nil
	}
	for _, s := range []Strategy{Auto, DDMin} {
		t.Run(s.String(), func(t *testing.T) {
			r := run(t, n, o, Options{Strategy: s})
			require.Len(t, r.Culprits, 1)
			c := r.Culprits[0]
			out, _ := o(context.Background(), Candidate{s: setOf(c...), n: n})
			require.Equal(t, Fail, out, "culprit set %v must have been answered Fail", c)
			for i := range c {
				without := slices.Delete(slices.Clone(c), i, i+1)
				out, _ := o(context.Background(), Candidate{s: setOf(without...), n: n})
				require.NotEqual(t, Fail, out)
			}
			for _, st := range r.Steps {
				if st.Outcome != Fail {
					continue
				}
				out, _ := o(context.Background(), Candidate{s: setFromRanges(st.Candidate), n: n})
				require.Equal(t, Fail, out)
			}
		})
	}
}

func TestOutcomeText(t *testing.T) {
	for _, o := range []Outcome{Pass, Fail, Unresolved} {
		b, err := o.MarshalText()
		require.NoError(t, err)
		var back Outcome
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, o, back)
	}
	_, err := Outcome(0).MarshalText()
	assert.Error(t, err)
	var o Outcome
	assert.Error(t, o.UnmarshalText([]byte("maybe")))
}

// TestMaxCulprits: the search stops after MaxCulprits sets, each still
// 1-minimal, and a negative cap is refused.
func TestMaxCulprits(t *testing.T) {
	d := singles(2, 9, 17, 30)
	all := run(t, 32, d.oracle(), Options{})
	require.Len(t, all.Culprits, 4)
	for _, max := range []int{1, 2, 3} {
		r := run(t, 32, d.oracle(), Options{MaxCulprits: max})
		assert.Equal(t, all.Culprits[:max], r.Culprits, "MaxCulprits=%d", max)
		assert.Less(t, r.Accepted, all.Accepted, "MaxCulprits=%d saves calls", max)
	}
	_, err := Run(context.Background(), 8, d.oracle(), Options{MaxCulprits: -1})
	require.ErrorIs(t, err, ErrInvalidOptions)
}
