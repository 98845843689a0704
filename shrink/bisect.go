package shrink

import (
	"context"
	"fmt"
	"math"
)

// The numeric searches run on the same engine as Run - cache, trials,
// Jobs and speculation, budgets, progress, step log - with candidate {i}
// standing for the value lo+i. The predicate never sees that encoding.

// BoundaryResult is the outcome of Boundary.
type BoundaryResult struct {
	// Fail was answered Fail; Pass, next to it (|Fail-Pass| == 1 unless
	// Incomplete), was answered PassOutcome: Pass, or Unresolved when that
	// is what the neighbour of the failure answered.
	Fail, Pass  int64
	PassOutcome Outcome
	// Incomplete: a budget, the clock or ctx stopped the bisection; Fail
	// and Pass are then the closest pair answered so far.
	Incomplete bool
	Reason     Reason
	Counts
}

// Boundary finds, between lo and hi (lo < hi), two adjacent values of
// which one fails and the other does not: the failing value and the
// nearest value to it that does not fail, in about ⌈log2(hi-lo)⌉ + 2 calls
// (both endpoints are replayed first, so that the answer is verified).
// The CLI uses it for "target 4 fails, 3 passes". Either endpoint may be
// the failing one.
//
// If the predicate is monotone between lo and hi (one threshold), the
// boundary is the threshold; otherwise it is one of the boundaries, still
// a pair of actual, adjacent answers. It returns ErrNoBoundary when the
// endpoints answer alike, ErrBudget when stopped before both endpoints
// were answered.
func Boundary(ctx context.Context, lo, hi int64, pred Predicate, opts Options) (BoundaryResult, error) {
	if hi <= lo {
		return BoundaryResult{}, fmt.Errorf("%w: Boundary: want lo < hi, got [%d, %d]", ErrInvalidOptions, lo, hi)
	}
	e, err := valueEngine(ctx, lo, hi, pred, opts)
	if err != nil {
		return BoundaryResult{}, err
	}
	e.setPhase(PhaseBisect)
	m, derr := e.drive(newBoundaryM(int(hi - lo)))
	e.shutdown()
	b := m.(boundaryM)
	r := BoundaryResult{Counts: e.counts(), Reason: e.reason, Incomplete: e.reason != ReasonNone}
	if derr != nil && !isStop(derr) {
		return r, derr
	}
	if b.stage < 2 {
		if r.Incomplete {
			return r, fmt.Errorf("%w (%s)", ErrBudget, e.reason)
		}
		return r, fmt.Errorf("%w: %d and %d both answered %v", ErrNoBoundary, lo, hi, b.oa)
	}
	fi, pi, po := b.a, b.b, b.ob
	if b.oa != Fail {
		fi, pi, po = b.b, b.a, b.oa
	}
	r.Fail, r.Pass, r.PassOutcome = lo+int64(fi), lo+int64(pi), po
	return r, nil
}

// LargestResult is the outcome of LargestPassing.
type LargestResult struct {
	// Value is the largest value answered Pass; Next is the answer for
	// Value+1 (0 when Value is hi or the search is Incomplete).
	Value int64
	Next  Outcome
	// Incomplete: stopped early; Value is the largest Pass answered so far.
	Incomplete bool
	Reason     Reason
	Counts
}

// LargestPassing finds the largest value in [lo, hi] that passes, assuming
// that passing is monotone (every value below a passing one passes) - the
// batch-size search for an out-of-memory failure. It takes about
// ⌈log2(hi-lo+2)⌉ calls; the answer is an actual Pass whose successor
// (unless it is hi) was actually answered Fail or Unresolved. It returns
// ErrNoPassing when not even lo passes, and ErrBudget when stopped before
// any value passed.
func LargestPassing(ctx context.Context, lo, hi int64, pred Predicate, opts Options) (LargestResult, error) {
	if hi < lo {
		return LargestResult{}, fmt.Errorf("%w: LargestPassing: hi = %d < lo = %d", ErrInvalidOptions, hi, lo)
	}
	e, err := valueEngine(ctx, lo, hi, pred, opts)
	if err != nil {
		return LargestResult{}, err
	}
	e.setPhase(PhaseBisect)
	m, derr := e.drive(newLargestM(int(hi - lo)))
	e.shutdown()
	l := m.(largestM)
	r := LargestResult{Counts: e.counts(), Reason: e.reason, Incomplete: e.reason != ReasonNone}
	if derr != nil && !isStop(derr) {
		return r, derr
	}
	if l.good < 0 {
		if r.Incomplete {
			return r, fmt.Errorf("%w (%s)", ErrBudget, e.reason)
		}
		return r, fmt.Errorf("%w: not even %d", ErrNoPassing, lo)
	}
	r.Value = lo + int64(l.good)
	if !r.Incomplete && l.good < l.w {
		r.Next = l.obad
	}
	return r, nil
}

func valueEngine(ctx context.Context, lo, hi int64, pred Predicate, opts Options) (*engine, error) {
	if pred == nil {
		return nil, fmt.Errorf("%w: nil predicate", ErrInvalidOptions)
	}
	if hi < lo {
		return nil, fmt.Errorf("%w: hi = %d < lo = %d", ErrInvalidOptions, hi, lo)
	}
	if w := hi - lo; w < 0 || uint64(w) >= uint64(math.MaxInt)-1 {
		return nil, fmt.Errorf("%w: range [%d, %d] too wide", ErrInvalidOptions, lo, hi)
	}
	o, err := opts.resolved()
	if err != nil {
		return nil, err
	}
	e := newEngine(ctx, o, int(hi-lo)+1)
	e.valued, e.base = true, lo
	e.call = func(ctx context.Context, s set, trial int) (Outcome, error) {
		return pred(ctx, lo+int64(s.first()), trial)
	}
	return e, nil
}

// boundaryM bisects between index 0 and index w. Stage 0 and 1 test the
// endpoints; then a and b bracket the boundary: a answered oa, b answered
// ob, and exactly one of them is Fail.
type boundaryM struct {
	stage, w int
	a, b     int
	oa, ob   Outcome
	done     bool
}

func newBoundaryM(w int) boundaryM { return boundaryM{w: w, b: w} }

func (m boundaryM) next() (set, bool) {
	switch {
	case m.done:
		return set{}, false
	case m.stage == 0:
		return span(0, 1), true
	case m.stage == 1:
		return span(m.w, m.w+1), true
	case m.b-m.a <= 1:
		return set{}, false
	}
	mid := m.a + (m.b-m.a)/2
	return span(mid, mid+1), true
}

func (m boundaryM) after(o Outcome) machine {
	switch m.stage {
	case 0:
		m.oa, m.stage = o, 1
	case 1:
		m.ob = o
		if (m.oa == Fail) == (o == Fail) {
			m.done = true
		} else {
			m.stage = 2
		}
	default:
		mid := m.a + (m.b-m.a)/2
		if (o == Fail) == (m.oa == Fail) {
			m.a, m.oa = mid, o
		} else {
			m.b, m.ob = mid, o
		}
	}
	return m
}

// largestM keeps good < bad: good answered Pass (or is the virtual -1),
// bad did not pass (or is the virtual w+1), obad being its answer.
type largestM struct {
	w         int
	good, bad int
	obad      Outcome
}

func newLargestM(w int) largestM { return largestM{w: w, good: -1, bad: w + 1} }

func (m largestM) next() (set, bool) {
	if m.bad-m.good <= 1 {
		return set{}, false
	}
	mid := m.good + (m.bad-m.good)/2
	return span(mid, mid+1), true
}

func (m largestM) after(o Outcome) machine {
	mid := m.good + (m.bad-m.good)/2
	if o == Pass {
		m.good = mid
	} else {
		m.bad, m.obad = mid, o
	}
	return m
}
