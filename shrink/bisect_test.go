package shrink

import (
	"context"
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// threshold fails from t up, or from t down.
func threshold(t int64, down bool) Predicate {
	return func(_ context.Context, v int64, _ int) (Outcome, error) {
		if (!down && v >= t) || (down && v <= t) {
			return Fail, nil
		}
		return Pass, nil
	}
}

func ceilLog2u(x uint64) int {
	if x <= 1 {
		return 0
	}
	return bits.Len64(x - 1)
}

func TestBoundary(t *testing.T) {
	tests := []struct {
		name       string
		lo, hi, t  int64
		down       bool
		fail, pass int64
	}{
		{"target 4 fails, 3 passes", 0, 4, 4, false, 4, 3},
		{"threshold at hi", 0, 1000, 1000, false, 1000, 999},
		{"threshold just above lo", 0, 1000, 1, false, 1, 0},
		{"threshold in the middle", -50, 77, 13, false, 13, 12},
		{"failing side low", 0, 100, 37, true, 37, 38},
		{"wide range", -1 << 40, 1 << 40, 12345, false, 12345, 12344},
		{"adjacent endpoints", 7, 8, 8, false, 8, 7},
	}
	for _, tt := range tests {
		for _, jobs := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/jobs=%d", tt.name, jobs), func(t *testing.T) {
				r, err := Boundary(context.Background(), tt.lo, tt.hi, threshold(tt.t, tt.down), Options{Jobs: jobs})
				require.NoError(t, err)
				assert.Equal(t, tt.fail, r.Fail)
				assert.Equal(t, tt.pass, r.Pass)
				assert.Equal(t, Pass, r.PassOutcome)
				assert.False(t, r.Incomplete)
				assert.LessOrEqual(t, r.Accepted, ceilLog2u(uint64(tt.hi-tt.lo))+2)
				seen := map[int64]bool{}
				for _, s := range r.Steps {
					assert.False(t, seen[s.Value], "value %d asked twice", s.Value)
					seen[s.Value] = true
				}
				if jobs == 1 {
					assert.Equal(t, r.Calls, r.Accepted)
				}
			})
		}
	}
}

func TestBoundaryErrorsAndEdges(t *testing.T) {
	ctx := context.Background()
	t.Run("endpoints alike", func(t *testing.T) {
		_, err := Boundary(ctx, 0, 10, threshold(100, false), Options{})
		require.ErrorIs(t, err, ErrNoBoundary)
	})
	t.Run("empty range", func(t *testing.T) {
		_, err := Boundary(ctx, 5, 5, threshold(0, false), Options{})
		require.ErrorIs(t, err, ErrInvalidOptions)
	})
	t.Run("nil predicate", func(t *testing.T) {
		_, err := Boundary(ctx, 0, 5, nil, Options{})
		require.ErrorIs(t, err, ErrInvalidOptions)
	})
	t.Run("unresolved neighbour", func(t *testing.T) {
		p := func(_ context.Context, v int64, _ int) (Outcome, error) {
			switch {
			case v >= 20:
				return Fail, nil
			case v == 19:
				return Unresolved, nil
			}
			return Pass, nil
		}
		r, err := Boundary(ctx, 0, 64, p, Options{})
		require.NoError(t, err)
		assert.Equal(t, int64(20), r.Fail)
		assert.Equal(t, int64(19), r.Pass)
		assert.Equal(t, Unresolved, r.PassOutcome)
	})
	t.Run("non-monotone: still an actual adjacent pair", func(t *testing.T) {
		p := func(_ context.Context, v int64, _ int) (Outcome, error) {
			if v%7 == 3 || v == 100 {
				return Fail, nil
			}
			return Pass, nil
		}
		r, err := Boundary(ctx, 0, 100, p, Options{})
		require.NoError(t, err)
		fo, _ := p(ctx, r.Fail, 0)
		po, _ := p(ctx, r.Pass, 0)
		assert.Equal(t, Fail, fo)
		assert.Equal(t, Pass, po)
		assert.Equal(t, int64(1), absDiff(r.Fail, r.Pass))
	})
	t.Run("budget", func(t *testing.T) {
		r, err := Boundary(ctx, 0, 1024, threshold(300, false), Options{MaxTests: 4})
		require.NoError(t, err)
		assert.True(t, r.Incomplete)
		assert.Equal(t, ReasonMaxTests, r.Reason)
		assert.Greater(t, absDiff(r.Fail, r.Pass), int64(1))
		assert.GreaterOrEqual(t, r.Fail, int64(300))
		assert.Less(t, r.Pass, int64(300))
		_, err = Boundary(ctx, 0, 1024, threshold(300, false), Options{MaxTests: 1})
		require.ErrorIs(t, err, ErrBudget)
	})
	t.Run("progress reports values", func(t *testing.T) {
		var values []int64
		r, err := Boundary(ctx, 100, 200, threshold(150, false), Options{Progress: func(ev Event) {
			if ev.Kind == TestStarted {
				values = append(values, ev.Value)
				assert.Zero(t, ev.Candidate.Len())
			}
		}})
		require.NoError(t, err)
		require.Len(t, values, r.Calls)
		assert.Equal(t, []int64{100, 200, 150}, values[:3])
	})
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestLargestPassing(t *testing.T) {
	// passes up to t (an out-of-memory failure above t)
	upTo := func(t int64) Predicate {
		return func(_ context.Context, v int64, _ int) (Outcome, error) {
			if v <= t {
				return Pass, nil
			}
			return Fail, nil
		}
	}
	tests := []struct {
		name   string
		lo, hi int64
		t      int64
		next   Outcome
	}{
		{"batch of 64, 37 fits", 1, 64, 37, Fail},
		{"everything passes", 1, 64, 64, 0},
		{"only lo passes", 1, 64, 1, Fail},
		{"single value", 5, 5, 5, 0},
		{"large range", 0, 1 << 30, 123456789, Fail},
	}
	for _, tt := range tests {
		for _, jobs := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/jobs=%d", tt.name, jobs), func(t *testing.T) {
				r, err := LargestPassing(context.Background(), tt.lo, tt.hi, upTo(tt.t), Options{Jobs: jobs})
				require.NoError(t, err)
				assert.Equal(t, tt.t, r.Value)
				assert.Equal(t, tt.next, r.Next)
				assert.LessOrEqual(t, r.Accepted, ceilLog2u(uint64(tt.hi-tt.lo+2)))
			})
		}
	}
	t.Run("nothing passes", func(t *testing.T) {
		r, err := LargestPassing(context.Background(), 1, 64, upTo(0), Options{})
		require.ErrorIs(t, err, ErrNoPassing)
		assert.LessOrEqual(t, r.Calls, 7)
	})
	t.Run("unresolved counts as not passing", func(t *testing.T) {
		p := func(_ context.Context, v int64, _ int) (Outcome, error) {
			if v <= 10 {
				return Pass, nil
			}
			return Unresolved, nil
		}
		r, err := LargestPassing(context.Background(), 1, 100, p, Options{})
		require.NoError(t, err)
		assert.Equal(t, int64(10), r.Value)
		assert.Equal(t, Unresolved, r.Next)
	})
	t.Run("invalid range", func(t *testing.T) {
		_, err := LargestPassing(context.Background(), 3, 2, upTo(0), Options{})
		require.ErrorIs(t, err, ErrInvalidOptions)
	})
}
