package shrink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeterministicAcrossJobs: for the same oracle, the result and the
// accepted step log are identical for Jobs = 1, 2 and 8, although answers
// come back in random orders (jitter) and speculative calls race.
func TestDeterministicAcrossJobs(t *testing.T) {
	tests := []struct {
		name string
		n    int
		d    dnf
	}{
		{"single culprit", 1000, singles(617)},
		{"independent culprits", 512, singles(3, 100, 101, 400, 511)},
		{"conjunctive pair", 300, dnf{{17, 250}}},
		{"conjunctive triple", 200, dnf{{0, 99, 199}}},
		{"mixed", 256, dnf{{40}, {90, 200}, {130, 131, 132}}},
		{"every unit needed", 10, dnf{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}},
	}
	for _, tt := range tests {
		for _, o := range []Options{{Strategy: Auto}, {Strategy: Auto, Halve: true}, {Strategy: DDMin}} {
			t.Run(fmt.Sprintf("%s/%v/halve=%v", tt.name, o.Strategy, o.Halve), func(t *testing.T) {
				t.Parallel()
				base := run(t, tt.n, tt.d.oracle(), o)
				requireValidResult(t, tt.n, tt.d, base)
				for _, jobs := range []int{1, 2, 8} {
					for seed := uint64(1); seed <= 2; seed++ {
						oj := o
						oj.Jobs = jobs
						r := run(t, tt.n, jitter(tt.d.oracle(), seed), oj)
						require.Equal(t, base.Culprits, r.Culprits, "jobs=%d", jobs)
						require.Equal(t, base.Steps, r.Steps, "jobs=%d: accepted steps", jobs)
						require.Equal(t, base.Accepted, r.Accepted, "jobs=%d", jobs)
						require.Equal(t, base.CacheHits, r.CacheHits, "jobs=%d", jobs)
						require.Equal(t, base.Phases, r.Phases, "jobs=%d", jobs)
						require.GreaterOrEqual(t, r.Calls, r.Accepted)
						if jobs == 1 {
							require.Equal(t, r.Accepted, r.Calls)
						}
					}
				}
			})
		}
	}
}

// TestSpeculationIsUsed makes sure Jobs > 1 really runs calls ahead: with
// an oracle slow enough that every call overlaps, more than one call is in
// flight at some point.
func TestSpeculationIsUsed(t *testing.T) {
	var (
		mu             sync.Mutex
		inflight, peak int
	)
	d := singles(700)
	o := func(ctx context.Context, c Candidate) (Outcome, error) {
		mu.Lock()
		inflight++
		peak = max(peak, inflight)
		mu.Unlock()
		defer func() { mu.Lock(); inflight--; mu.Unlock() }()
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return d.oracle()(ctx, c)
	}
	r := run(t, 1024, o, Options{Jobs: 4})
	require.Equal(t, [][]int{{700}}, r.Culprits)
	require.Greater(t, peak, 1)
	require.LessOrEqual(t, peak, 4, "never more than Jobs calls at once")
	require.Greater(t, r.Calls, r.Accepted, "some speculation was wasted")
}

// TestStaleSpeculationCanceled: calls of branches the search does not take
// never return on their own here; the run still completes because the
// engine cancels them when it needs their slots.
func TestStaleSpeculationCanceled(t *testing.T) {
	const n = 512
	d := dnf{{30, 400}}
	base := run(t, n, d.oracle(), Options{})
	needed := map[string]bool{}
	for _, s := range base.Steps {
		needed[setFromRanges(s.Candidate).String()] = true
	}
	o := func(ctx context.Context, c Candidate) (Outcome, error) {
		if !needed[c.String()] {
			<-ctx.Done() // a replay that hangs until killed
			return Unresolved, nil
		}
		return d.oracle()(ctx, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Run(ctx, n, o, Options{Jobs: 4})
	require.NoError(t, err)
	require.False(t, r.Incomplete, "the run hung on stale speculative calls")
	require.Equal(t, base.Culprits, r.Culprits)
	require.Equal(t, base.Steps, r.Steps, "answers given after cancellation must not be used")
	// More cancellations than calls in flight at the end: stale calls were
	// canceled during the run, to free their slots for useful ones.
	require.Greater(t, r.Canceled, 4)
}

// TestSpeculativeErrorIgnored: an oracle error on a candidate only
// speculation asked for must not abort the run, or the result would
// depend on Jobs.
func TestSpeculativeErrorIgnored(t *testing.T) {
	const n = 512
	d := dnf{{30, 400}}
	base := run(t, n, d.oracle(), Options{})
	needed := map[string]bool{}
	for _, s := range base.Steps {
		needed[setFromRanges(s.Candidate).String()] = true
	}
	bad := errors.New("replay infrastructure down")
	o := func(ctx context.Context, c Candidate) (Outcome, error) {
		if !needed[c.String()] {
			return 0, bad
		}
		return d.oracle()(ctx, c)
	}
	r := run(t, n, jitter(o, 5), Options{Jobs: 8})
	require.Equal(t, base.Culprits, r.Culprits)
	require.Equal(t, base.Steps, r.Steps)
}

// TestThenRest: with Jobs > 1 the question the caller asks after the first
// culprit set, every other unit, is asked ahead while the search's last
// question runs, and left to finish when Run returns; without Jobs it is
// never asked, and either way the search's answers are the same.
func TestThenRest(t *testing.T) {
	const n = 256
	for _, tc := range []struct {
		d     dnf
		jobs  int
		found []int
	}{{singles(173), 1, []int{173}}, {singles(173), 2, []int{173}}, {dnf{{40, 173}}, 2, []int{40, 173}}, {dnf{{40, 173}}, 3, []int{40, 173}}} {
		d, jobs := tc.d, tc.jobs
		rest := minus(span(0, n), setOf(tc.found...)).String()
		t.Run(fmt.Sprint(d, "/jobs=", jobs), func(t *testing.T) {
			var (
				mu       sync.Mutex
				finished bool
			)
			o := func(ctx context.Context, c Candidate) (Outcome, error) {
				wait := time.Millisecond
				if c.String() == rest {
					wait = 50 * time.Millisecond // still running when the search ends
				}
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				if c.String() == rest {
					mu.Lock()
					finished = true
					mu.Unlock()
				}
				return d.oracle()(ctx, c)
			}
			base := run(t, n, d.oracle(), Options{Halve: true, StopAfterFirst: true})
			r := run(t, n, o, Options{Halve: true, StopAfterFirst: true, ThenRest: true, Jobs: jobs})
			require.Equal(t, base.Culprits, r.Culprits)
			require.Equal(t, base.Steps, r.Steps)
			assert.Equal(t, jobs > 1, finished, "the rest asked ahead, and its call not canceled")
		})
	}
}

// TestThenRestDeadBranch: the rest of a culprit the search did not find,
// asked ahead on a branch it did not take, is canceled when Run returns,
// never waited for.
func TestThenRestDeadBranch(t *testing.T) {
	const n, culprit = 256, 173
	d := singles(culprit)
	rest := minus(span(0, n), setOf(culprit)).String()
	var (
		mu              sync.Mutex
		dead, abandoned int
	)
	// The questions answer only once a dead branch's rest was asked ahead
	// (or after 50 ms): on a loaded machine answers that come at once could
	// leave the speculation no free slot, and the test nothing to check.
	asked := make(chan struct{})
	o := func(ctx context.Context, c Candidate) (Outcome, error) {
		if c.Len() == n-1 && c.String() != rest {
			// Every unit but one that is no culprit: never the question.
			mu.Lock()
			if dead++; dead == 1 {
				close(asked)
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(5 * time.Second):
				mu.Lock()
				abandoned++ // Run waited for it
				mu.Unlock()
			}
		} else {
			select {
			case <-asked:
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		return d.oracle()(ctx, c)
	}
	r := run(t, n, o, Options{Halve: true, StopAfterFirst: true, ThenRest: true, Jobs: 8})
	require.Equal(t, [][]int{{culprit}}, r.Culprits)
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, dead, "the test needs a dead branch's rest asked ahead")
	assert.Zero(t, abandoned)
}
