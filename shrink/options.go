package shrink

import (
	"fmt"
	"time"
)

// Strategy selects the search of Run.
type Strategy uint8

const (
	// Auto (the default) is adaptive group testing: binary splitting for
	// the first culprit set (conjunctive sets included), density-adaptive
	// group tests for the others, then a 1-minimality check.
	Auto Strategy = iota
	// DDMin is Zeller and Hildebrandt's ddmin, complement-first. It is the
	// baseline Auto is measured against.
	DDMin
)

func (s Strategy) String() string {
	switch s {
	case Auto:
		return "auto"
	case DDMin:
		return "ddmin"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// TrialPolicy says how the Options.Trials replays of one candidate combine.
// Replays of a candidate run one after another and stop as soon as the
// verdict is decided, since every replay is a call.
type TrialPolicy uint8

const (
	// FailIfAny (the default): the candidate fails if any trial fails - the
	// usual choice for a flaky failure, which may need several runs to show.
	FailIfAny TrialPolicy = iota
	// FailIfAll: the candidate fails only if every trial fails - a strict
	// policy that yields a reproducer that fails reliably.
	FailIfAll
)

func (p TrialPolicy) String() string {
	switch p {
	case FailIfAny:
		return "fail-if-any"
	case FailIfAll:
		return "fail-if-all"
	}
	return fmt.Sprintf("TrialPolicy(%d)", uint8(p))
}

// ConfirmMode says whether each culprit set is replayed afresh (ignoring
// the cache) after the search.
type ConfirmMode uint8

const (
	// ConfirmAuto (the default): reconfirm when Trials > 1, that is when
	// the failure is treated as flaky; a deterministic failure's cached Fail
	// already is its confirmation.
	ConfirmAuto ConfirmMode = iota
	// ConfirmAlways reconfirms every culprit set.
	ConfirmAlways
	// ConfirmNever trusts the answers of the search.
	ConfirmNever
)

// Clock is the time source of Options.MaxDuration. Tests inject a fake.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Options configure Run, Boundary and LargestPassing. The zero value is
// valid and means the documented defaults. Boundary and LargestPassing use
// Jobs, Trials, Policy, MaxTests, MaxDuration, Clock and Progress and
// ignore the rest.
type Options struct {
	// Strategy: Auto (default) or DDMin.
	Strategy Strategy

	// StopAfterFirst stops after the first culprit set instead of looking
	// for further independent ones. Default false: find them all.
	StopAfterFirst bool

	// MaxCulprits stops after that many culprit sets (StopAfterFirst is
	// MaxCulprits = 1). Default 0: no cap. A batch where every sample fails
	// alone has as many culprit sets as samples; the caller caps them.
	MaxCulprits int

	// ThenRest, with StopAfterFirst, says that the caller asks next
	// whether every unit but the first culprit set fails (reduce's
	// neighbours): with Jobs > 1 the engine may ask the oracle for it
	// ahead, in a slot the search leaves free, never cancels that call to
	// free its slot, and waits for it before Run returns where it is the
	// question indeed (the run found a first set, unstopped). Its answer
	// is never the search's: the caller finds it in its own cache of
	// answers (reduce's journal).
	ThenRest bool

	// Halve keeps candidates small where units cost by their size (the
	// samples of a batch): while one unit may be the culprit, a candidate
	// keeps only the half of the units searched, so that candidates halve
	// with each answer wherever the culprit sits (about n units held in
	// all for one culprit among n, 2n where it sits first, against up to
	// n·log2 n). For culprits that fail alone, answered Fail or Pass, it
	// finds the same culprits in as many calls or fewer; a failure that
	// needs several units together costs about ⌈log2 n⌉ calls more, the
	// halving that found no single culprit, and so may a different failure
	// met on the way (Unresolved, taken as Pass). Default false.
	Halve bool

	// Jobs is the number of oracle calls in flight at once. Default 1.
	// With Jobs > 1 the engine speculates down the search's decision tree;
	// results are accepted in the order the sequential search asks for
	// them, so the result and the accepted steps do not depend on Jobs or
	// on timing (see the package documentation).
	Jobs int

	// Trials is the number of replays per candidate. Default 1.
	Trials int

	// Policy combines the trials of a candidate. Default FailIfAny.
	Policy TrialPolicy

	// Confirm says whether culprit sets are replayed afresh after the
	// search. Default ConfirmAuto (only when Trials > 1).
	Confirm ConfirmMode

	// MaxTests caps the oracle calls made (every trial, speculative ones
	// included). 0 (default) means no cap.
	MaxTests int

	// MaxDuration caps the run's time as measured by Clock; no new call
	// starts once it has elapsed. 0 (default) means no cap. A deadline on
	// the context passed to Run works as well.
	MaxDuration time.Duration

	// Clock measures MaxDuration. Default: the system clock.
	Clock Clock

	// Progress, if not nil, receives events. It is called from the
	// goroutine that called Run, never concurrently and never after Run
	// returns, so it needs no locking; it must not block for long, since
	// the search waits for it.
	Progress func(Event)

	// Seed pre-fills the cache, typically with Result.Cache of an
	// interrupted run, so that no candidate answered before is replayed.
	// Seeded answers count as cache hits.
	Seed []CacheEntry
}

// resolved returns the options with defaults filled in, or an error
// wrapping ErrInvalidOptions.
func (o Options) resolved() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Strategy > DDMin:
		return bad("unknown Strategy %d", o.Strategy)
	case o.Jobs < 0:
		return bad("Jobs = %d, want >= 0 (0 means 1)", o.Jobs)
	case o.Trials < 0:
		return bad("Trials = %d, want >= 0 (0 means 1)", o.Trials)
	case o.Policy > FailIfAll:
		return bad("unknown Policy %d", o.Policy)
	case o.Confirm > ConfirmNever:
		return bad("unknown Confirm mode %d", o.Confirm)
	case o.MaxCulprits < 0:
		return bad("MaxCulprits = %d, want >= 0 (0 means no cap)", o.MaxCulprits)
	case o.MaxTests < 0:
		return bad("MaxTests = %d, want >= 0 (0 means no cap)", o.MaxTests)
	case o.MaxDuration < 0:
		return bad("MaxDuration = %v, want >= 0 (0 means no cap)", o.MaxDuration)
	}
	if o.Jobs == 0 {
		o.Jobs = 1
	}
	if o.Trials == 0 {
		o.Trials = 1
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	return o, nil
}

// Phase names a part of the search, in Steps, Events and Result.Phases.
type Phase string

const (
	PhaseConfirm   Phase = "confirm"   // replaying the original
	PhaseFirst     Phase = "first"     // searching the first culprit set
	PhaseMinimal   Phase = "minimal"   // 1-minimality check of a culprit set
	PhaseOthers    Phase = "others"    // searching further, disjoint culprit sets
	PhaseReconfirm Phase = "reconfirm" // fresh replays of the culprit sets
	PhaseBisect    Phase = "bisect"    // Boundary and LargestPassing
)

// Reason says why a result is incomplete.
type Reason string

const (
	ReasonNone        Reason = ""
	ReasonMaxTests    Reason = "max-tests"    // Options.MaxTests reached
	ReasonMaxDuration Reason = "max-duration" // Options.MaxDuration elapsed
	ReasonCanceled    Reason = "canceled"     // the context was canceled or its deadline passed
)

// EventKind is the kind of an Event.
type EventKind uint8

const (
	// TestStarted: an oracle call started (Candidate, Trial, Speculative).
	TestStarted EventKind = iota + 1
	// TestFinished: an oracle call returned (Outcome, or Err; Err is
	// context.Canceled for a speculative call the engine canceled).
	TestFinished
	// CacheHit: the search asked for a candidate already answered, and
	// got the answer (Outcome) without a call.
	CacheHit
	// NewBest: the smallest verified-failing candidate shrank (Candidate).
	NewBest
	// PhaseChanged: the search entered Phase.
	PhaseChanged
	// Used: the search used the answer of an oracle call (Candidate or
	// Value, Trial; Outcome is its candidate's verdict over the trials)
	// for the first time. Every call of a Jobs = 1 run is used but those
	// of a candidate whose trials a budget cut short; with Jobs > 1, the
	// calls made ahead whose answers no search of the run used never are,
	// so that a caller that acts on answers (counts them, learns from
	// them) acts on the same answers for every Jobs.
	Used
)

func (k EventKind) String() string {
	switch k {
	case TestStarted:
		return "test-started"
	case TestFinished:
		return "test-finished"
	case CacheHit:
		return "cache-hit"
	case NewBest:
		return "new-best"
	case PhaseChanged:
		return "phase"
	case Used:
		return "used"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is what Options.Progress receives. Fields not relevant to Kind are
// zero.
type Event struct {
	Kind  EventKind
	Phase Phase
	// Candidate is the candidate tested, or the new best. For Boundary and
	// LargestPassing it is zero and Value holds the parameter instead.
	Candidate Candidate
	Value     int64
	Trial     int
	Outcome   Outcome
	Err       error
	// Speculative: the call was started ahead of need (Jobs > 1).
	Speculative bool
	// Calls and Tests are the run's counters when the event happened:
	// oracle calls made, and candidates the search has asked for.
	Calls, Tests int
}
