package shrink

import (
	"context"
	"errors"
	"fmt"
)

// Outcome is the oracle's answer for one replay of a candidate.
//
// The zero value is not an outcome: an oracle that returns it (an
// uninitialized variable) makes the run fail instead of silently counting
// as a Pass.
type Outcome uint8

const (
	// Pass: the candidate ran and did not show the failure.
	Pass Outcome = iota + 1
	// Fail: the candidate reproduces the recorded failure. Only an
	// oracle's Fail ever makes the engine keep a candidate.
	Fail
	// Unresolved: the replay timed out, failed differently, or the
	// infrastructure broke. It is never taken as Fail; the search treats
	// it like Pass ("not known to fail") except that it is never used to
	// infer that a smaller candidate passes.
	Unresolved
)

func (o Outcome) String() string {
	switch o {
	case Pass:
		return "pass"
	case Fail:
		return "fail"
	case Unresolved:
		return "unresolved"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

func (o Outcome) valid() bool { return o >= Pass && o <= Unresolved }

// MarshalText encodes the outcome as "pass", "fail" or "unresolved", which
// is how it appears in JSON cache files.
func (o Outcome) MarshalText() ([]byte, error) {
	if !o.valid() {
		return nil, fmt.Errorf("shrink: invalid outcome %d", uint8(o))
	}
	return []byte(o.String()), nil
}

// UnmarshalText is the inverse of MarshalText.
func (o *Outcome) UnmarshalText(b []byte) error {
	switch string(b) {
	case "pass":
		*o = Pass
	case "fail":
		*o = Fail
	case "unresolved":
		*o = Unresolved
	default:
		return fmt.Errorf("shrink: unknown outcome %q", b)
	}
	return nil
}

// Oracle replays one candidate and says whether the failure reproduces.
// It is the caller's: typically it writes the candidate batch and runs it
// in a fresh process. It may be called from several goroutines at once
// when Options.Jobs > 1, and it should return promptly when ctx is
// canceled (the engine cancels speculative replays it no longer needs).
//
// An error aborts the run (Run returns it wrapped) - unless ctx was
// canceled, which ends the run with the best result so far. Timeouts and
// "a different failure" are Unresolved, not errors.
type Oracle func(ctx context.Context, c Candidate) (Outcome, error)

// Predicate is the oracle of the numeric searches Boundary and
// LargestPassing: it replays the failing case with the parameter set to v.
// trial numbers the replays of one value (0 to Options.Trials-1), as
// Candidate.Trial does for Run's oracle, so that a caller that keeps
// answers can key each by value and trial.
type Predicate func(ctx context.Context, v int64, trial int) (Outcome, error)

var (
	// ErrOriginalPasses: the original candidate (every unit kept) did not
	// fail under the trial policy, so there is nothing to reduce.
	ErrOriginalPasses = errors.New("shrink: the original does not fail (it passes)")
	// ErrOriginalUnresolved: the original candidate answered Unresolved.
	ErrOriginalUnresolved = errors.New("shrink: the original does not fail (unresolved)")
	// ErrInvalidOptions wraps every validation error of Options and of the
	// arguments of Run, Boundary and LargestPassing.
	ErrInvalidOptions = errors.New("shrink: invalid options")
	// ErrBudget: a budget (MaxTests, MaxDuration) or cancellation stopped
	// the run before anything was verified (the original, or an endpoint of
	// a numeric search), so there is no partial result to return.
	ErrBudget = errors.New("shrink: stopped before any result was verified")
	// ErrNoBoundary: the two endpoints given to Boundary answer alike (both
	// Fail or both not), so there is no boundary between them.
	ErrNoBoundary = errors.New("shrink: no boundary: the endpoints answer alike")
	// ErrNoPassing: LargestPassing found no value in [lo, hi] that passes.
	ErrNoPassing = errors.New("shrink: no value in the range passes")
)

// OracleError is how an oracle's error reaches the caller: errors.Is and
// errors.As see the oracle's own error through it.
type OracleError struct {
	Candidate string // the candidate, formatted like Candidate.String
	Trial     int
	Err       error
}

func (e *OracleError) Error() string {
	return fmt.Sprintf("shrink: oracle failed on candidate %s (trial %d): %v", e.Candidate, e.Trial, e.Err)
}

func (e *OracleError) Unwrap() error { return e.Err }
