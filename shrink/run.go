package shrink

import (
	"context"
	"fmt"
)

// Step is one answer the search accepted, in the order it asked. The step
// log depends only on the oracle's answers: not on Jobs, not on timing.
type Step struct {
	Phase Phase `json:"phase"`
	// Candidate is the candidate asked for (Run), as sorted ranges.
	Candidate []Range `json:"candidate,omitempty"`
	// Value is the parameter asked for (Boundary, LargestPassing).
	Value   int64   `json:"value,omitempty"`
	Size    int     `json:"size"`
	Outcome Outcome `json:"outcome"`
	// Cached: answered without a call, because the search had asked for
	// the same candidate before or it was seeded.
	Cached bool `json:"cached,omitempty"`
}

// PhaseStats counts the steps of one phase.
type PhaseStats struct {
	Tests     int `json:"tests"`      // candidates asked for
	Calls     int `json:"calls"`      // oracle calls behind the answers used (trials included)
	CacheHits int `json:"cache_hits"` // answers that needed no call
}

// Counts are the costs of a run, common to Run, Boundary and
// LargestPassing.
type Counts struct {
	// Calls is the number of oracle calls made: every trial, confirmation
	// and speculative call. Accepted counts those whose answers the search
	// used: for Jobs = 1 it equals Calls, and it is the same for every Jobs;
	// Calls - Accepted is the price of speculation. Canceled counts the
	// speculative calls the engine canceled when their branch died.
	Calls, Accepted, Canceled int
	// Tests is the number of candidates the search asked for, CacheHits
	// how many of them were answered without a call.
	Tests, CacheHits int
	// Phases breaks Tests, Accepted calls and CacheHits down by phase.
	Phases map[Phase]PhaseStats
	// Trials is the number of trials behind the accepted answers, and
	// Disagreements how many of them disagreed with the majority outcome
	// of their candidate; FlakeRate is their ratio (0 without trials).
	Trials, Disagreements int
	FlakeRate             float64
	// Steps is the accepted step log.
	Steps []Step
}

// counts returns the engine's counters.
func (e *engine) counts() Counts {
	c := Counts{
		Calls:         e.calls,
		Accepted:      e.accepted,
		Canceled:      e.canceled,
		Tests:         e.tests,
		CacheHits:     e.cacheHits,
		Phases:        make(map[Phase]PhaseStats, len(e.phases)),
		Trials:        e.trials,
		Disagreements: e.disagree,
		Steps:         e.steps,
	}
	for p, s := range e.phases {
		c.Phases[p] = *s
	}
	if c.Trials > 0 {
		c.FlakeRate = float64(c.Disagreements) / float64(c.Trials)
	}
	return c
}

// Result is the outcome of Run.
type Result struct {
	// N is the number of units.
	N int
	// Culprits are the culprit sets found, in the order found. Each is a
	// sorted list of unit indices that was answered Fail by the oracle and
	// is 1-minimal (without any one of its units the candidate was
	// answered Pass or Unresolved). The sets are pairwise disjoint: the
	// k-th was searched among the units outside the first k-1, so a
	// failing set that overlaps an earlier one is not reported. An empty
	// set means the failure needs no unit at all.
	Culprits [][]int
	// Partial, when the run is Incomplete, is the smallest candidate
	// answered Fail of the culprit set search that was in progress (nil if
	// that search had not found a failing candidate yet). It fails but is
	// not known to be minimal.
	Partial []int
	// Unconfirmed lists the indices of Culprits whose fresh replay after the
	// search (Options.Confirm) did not fail.
	Unconfirmed []int
	// Incomplete is set when a budget, the clock or cancellation stopped
	// the run; Reason says which.
	Incomplete bool
	Reason     Reason

	// CallsToFirst is the number of accepted calls from the end of the
	// original's confirmation until the first culprit set was 1-minimal.
	CallsToFirst int

	Counts

	// Cache holds every answer obtained, for Options.Seed of a later run.
	Cache []CacheEntry
}

// Run searches for the units of 0..n-1 that must be kept for the oracle to
// fail: the first culprit set and, unless Options.StopAfterFirst, every
// further disjoint one. See the package documentation for the algorithm,
// its guarantees and its costs.
//
// The error is nil when the search finished or was stopped by a budget,
// the clock or ctx (then Result.Incomplete is set and Result holds the best
// verified result so far). It is ErrOriginalPasses or ErrOriginalUnresolved
// when the original does not fail, wraps ErrBudget when the run stopped
// before the original was confirmed, wraps ErrInvalidOptions for bad
// arguments, and is an *OracleError when the oracle failed.
func Run(ctx context.Context, n int, oracle Oracle, opts Options) (Result, error) {
	if n < 0 {
		return Result{}, fmt.Errorf("%w: n = %d, want >= 0", ErrInvalidOptions, n)
	}
	if oracle == nil {
		return Result{}, fmt.Errorf("%w: nil oracle", ErrInvalidOptions)
	}
	o, err := opts.resolved()
	if err != nil {
		return Result{}, err
	}
	e := newEngine(ctx, o, n)
	e.call = func(ctx context.Context, s set, trial int) (Outcome, error) {
		return oracle(ctx, Candidate{s: s, n: n, trial: trial})
	}
	if err := e.seed(o.Seed); err != nil {
		return Result{}, err
	}
	var u unitRun
	err = u.run(e)
	e.shutdown()
	return u.result(e), err
}

// unitRun is the state of Run's orchestration.
type unitRun struct {
	culprits     []set
	partial      set
	hasPartial   bool
	unconfirmed  []int
	callsToFirst int
}

func (u *unitRun) run(e *engine) error {
	all := span(0, e.n)
	e.setPhase(PhaseConfirm)
	o, err := e.test(all, nil)
	if err != nil {
		if isStop(err) {
			return fmt.Errorf("%w (%s)", ErrBudget, e.reason)
		}
		return err
	}
	switch o {
	case Pass:
		return ErrOriginalPasses
	case Unresolved:
		return ErrOriginalUnresolved
	}
	e.noteBest(all)
	confirmCalls := e.accepted

	rest := all
	for first := true; ; first = false {
		var found set
		if first {
			e.setPhase(PhaseFirst)
			found, err = u.searchFirst(e, rest)
		} else {
			e.setPhase(PhaseOthers)
			e.resetBest()
			var ok bool
			found, ok, err = u.searchNext(e, rest)
			if err == nil && !ok {
				break
			}
		}
		if err == nil {
			e.setPhase(PhaseMinimal)
			var m machine
			m, err = e.drive(newMinCheck(found, e.anyPass))
			found = m.(minCheck).r
		}
		if err != nil {
			if isStop(err) {
				u.partial, u.hasPartial = e.best, e.hasBest
				return nil
			}
			return err
		}
		u.culprits = append(u.culprits, found)
		if first {
			u.callsToFirst = e.accepted - confirmCalls
			e.rest = minus(all, found)
		}
		rest = minus(rest, found)
		capped := e.opts.MaxCulprits > 0 && len(u.culprits) >= e.opts.MaxCulprits
		if found.empty() || rest.empty() || e.opts.StopAfterFirst || capped {
			break
		}
	}
	return u.reconfirm(e)
}

func (u *unitRun) searchFirst(e *engine, all set) (set, error) {
	if e.opts.Strategy == DDMin {
		m, err := e.drive(newDDMin(all))
		return m.(ddmin).c, err
	}
	m, err := e.drive(e.minimize(all, all))
	return kept(m), err
}

// minimize is the search for a needed set in k, x the group of k that
// holds a needed unit: narrower with Options.Halve, else minimizer.
func (e *engine) minimize(k, x set) machine {
	if e.opts.Halve {
		return newNarrower(k, x)
	}
	return newMinimizer(k, x)
}

// searchNext looks for a culprit set among the units rest (the original
// minus the sets found so far). ok is false when rest does not fail.
func (u *unitRun) searchNext(e *engine, rest set) (set, bool, error) {
	if e.opts.Strategy == DDMin {
		o, err := e.test(rest, nil)
		if err != nil || o != Fail {
			return set{}, false, err
		}
		e.noteBest(rest)
		m, err := e.drive(newDDMin(rest))
		return m.(ddmin).c, true, err
	}
	known, hits, explored := u.scanPlan(e, rest)
	pool := minus(rest, known)
	if pool.empty() {
		// Everything left is known not to fail; still, "no further
		// culprit set" is only ever concluded from an actual answer.
		known, pool, hits = set{}, rest, 0
	}
	m, err := e.drive(newScanner(known, pool, hits, explored))
	if err != nil {
		return set{}, false, err
	}
	sc := m.(scanner)
	if !sc.hit {
		return set{}, false, nil
	}
	m, err = e.drive(e.minimize(sc.cand, sc.t))
	return kept(m), true, err
}

// scanPlan returns the units of rest known not to fail, and the data of
// the scanner's estimate of the culprits left among the others: hits
// culprits seen per explored units.
//
// While every culprit found is a single unit, the working hypothesis is
// "the failure needs any one of several units": then every unit of an
// accepted Pass is clean, the known part is the union of the Pass answers,
// and the density of culprits among the units explored so far estimates
// how many hide in the pool. The first culprit is not counted (hits is
// the number found minus one): a search always finds one, so it says
// nothing about density, and counting it would make the single-culprit
// case - the commonest - pay many group tests to learn that nothing is
// left instead of one. (The scan explores from the top of the pool, like
// the first search, so the density is not biased by where culprits were
// looked for.) A conjunctive set anywhere voids the hypothesis: the known
// part is then one accepted Pass (a subset of it passes by monotonicity
// alone) and hits is 0, so that the first test is "does anything else
// fail?".
//
// The hypothesis only steers the search. The scanner's Fail answers are
// actual ones, and it concludes "no further set" only from an actual
// answer for all of rest, so a wrong hypothesis costs calls, never
// correctness.
func (u *unitRun) scanPlan(e *engine, rest set) (known set, hits float64, explored int) {
	for _, c := range u.culprits {
		if c.len() != 1 {
			return e.largestPass(rest), 0, 1
		}
	}
	known = intersect(e.passUnion, rest)
	explored = e.n - (rest.len() - known.len())
	return known, float64(len(u.culprits) - 1), explored
}

func (u *unitRun) reconfirm(e *engine) error {
	o := e.opts
	if o.Confirm == ConfirmNever || (o.Confirm == ConfirmAuto && o.Trials <= 1) || len(u.culprits) == 0 {
		return nil
	}
	e.setPhase(PhaseReconfirm)
	outs, err := e.fresh(u.culprits)
	for i, v := range outs {
		if v != Fail {
			u.unconfirmed = append(u.unconfirmed, i)
		}
	}
	if isStop(err) {
		return nil
	}
	return err
}

func (u *unitRun) result(e *engine) Result {
	r := Result{
		N:            e.n,
		Unconfirmed:  u.unconfirmed,
		Incomplete:   e.reason != ReasonNone,
		Reason:       e.reason,
		CallsToFirst: u.callsToFirst,
		Counts:       e.counts(),
		Cache:        e.export(),
	}
	for _, c := range u.culprits {
		r.Culprits = append(r.Culprits, c.units())
	}
	if r.Incomplete && u.hasPartial {
		r.Partial = u.partial.units()
	}
	return r
}

// CacheEntry is one answer of the cache in serializable form.
type CacheEntry struct {
	Candidate []Range `json:"candidate"`
	Outcome   Outcome `json:"outcome"`
}

// seed fills the cache from Options.Seed.
func (e *engine) seed(entries []CacheEntry) error {
	for i, ce := range entries {
		for _, r := range ce.Candidate {
			if r.Lo < 0 || r.Hi > e.n || r.Lo >= r.Hi {
				return fmt.Errorf("%w: Seed[%d]: range [%d, %d) outside [0, %d) or empty", ErrInvalidOptions, i, r.Lo, r.Hi, e.n)
			}
		}
		if !ce.Outcome.valid() {
			return fmt.Errorf("%w: Seed[%d]: invalid outcome %d", ErrInvalidOptions, i, uint8(ce.Outcome))
		}
		en := e.lookup(setFromRanges(ce.Candidate))
		if en.decided() {
			if en.verdict != ce.Outcome {
				return fmt.Errorf("%w: Seed[%d]: candidate seeded twice with different outcomes", ErrInvalidOptions, i)
			}
			continue
		}
		en.verdict, en.seeded = ce.Outcome, true
	}
	return nil
}

// export returns the decided answers of the cache in the order they were
// first needed.
func (e *engine) export() []CacheEntry {
	var out []CacheEntry
	for _, en := range e.order {
		if en.verdict != 0 && en.err == nil {
			out = append(out, CacheEntry{Candidate: en.s.copyRanges(), Outcome: en.verdict})
		}
	}
	return out
}
