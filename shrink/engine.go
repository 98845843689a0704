package shrink

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is the scheduler shared by every search: the cache, trials,
// the Jobs slots and speculation, budgets, the step log and the progress
// events. The searches themselves are the machines of machines.go; the
// scheduler only ever sees candidates and outcomes.
//
// Concurrency: everything here runs on the goroutine that called Run,
// except work, which runs one oracle call and sends its result back on
// e.results. So the engine's state needs no locks, and Progress is called
// from one goroutine.

// entry is one candidate's answer, or the state of getting it.
type entry struct {
	s     set
	chain *entry // next entry with the same hash

	trials            int // trials recorded
	fail, pass, unres int // per outcome
	verdict           Outcome
	err               error // the oracle's error; decides the entry too
	seeded            bool  // came from Options.Seed
	// firstTrial numbers this entry's first trial: 0, or Options.Trials
	// for a fresh replay of a candidate the search answered already, so
	// that every replay of a candidate has a trial number of its own.
	firstTrial int
	accepted   bool // the search has used this answer
	follow     bool // asked ahead for Options.ThenRest: not canceled when Run ends
	job        *job // the trial in flight, if any
	want       uint64
	prio       int
}

func (en *entry) decided() bool { return en.verdict != 0 || en.err != nil }

// record adds one trial and decides the verdict as soon as the policy
// allows, so that no trial is spent on a decided candidate.
func (en *entry) record(o Outcome, trials int, policy TrialPolicy) {
	en.trials++
	switch o {
	case Fail:
		en.fail++
	case Pass:
		en.pass++
	default:
		en.unres++
	}
	nonFail := func() Outcome {
		if en.pass > 0 {
			return Pass
		}
		return Unresolved
	}
	switch policy {
	case FailIfAll:
		if o != Fail {
			en.verdict = nonFail()
		} else if en.trials >= trials {
			en.verdict = Fail
		}
	default: // FailIfAny
		if o == Fail {
			en.verdict = Fail
		} else if en.trials >= trials {
			en.verdict = nonFail()
		}
	}
}

// disagreements is the number of trials that disagree with the majority
// outcome of the entry.
func (en *entry) disagreements() int {
	return en.trials - max(en.fail, en.pass, en.unres)
}

type job struct {
	ent      *entry
	trial    int
	spec     bool
	canceled bool
	cancel   context.CancelFunc
}

type jobResult struct {
	job *job
	out Outcome
	err error
}

// errStop unwinds a search that must stop early (budget, time, context).
type errStop struct{ reason Reason }

func (e errStop) Error() string { return "shrink: stopped: " + string(e.reason) }

type engine struct {
	ctx  context.Context
	opts Options
	n    int
	// call runs the caller's oracle on a candidate.
	call func(ctx context.Context, s set, trial int) (Outcome, error)
	// valued: the engine runs Boundary/LargestPassing; a candidate {i}
	// stands for the value base+i.
	valued bool
	base   int64

	start    time.Time
	table    map[uint64]*entry
	order    []*entry // table entries in creation order, for export
	results  chan jobResult
	running  map[*job]struct{}
	inflight int
	gen      uint64

	phase  Phase
	steps  []Step
	phases map[Phase]*PhaseStats
	// Counters. calls: oracle calls made. accepted: calls whose answers
	// the search used. tests: candidates the search asked for.
	calls, accepted, tests, cacheHits, canceled int
	trials, disagree                            int

	// Knowledge the searches may use. It is only ever updated from
	// accepted answers, never from speculative ones, so that it is the
	// same for every Jobs and every timing.
	anyPass   bool
	passes    []set
	passUnion set // union of passes

	best    set
	hasBest bool
	reason  Reason
	// rest is every unit but the first culprit set, once it is found: the
	// question Options.ThenRest names.
	rest set
}

func newEngine(ctx context.Context, opts Options, n int) *engine {
	return &engine{
		ctx:     ctx,
		opts:    opts,
		n:       n,
		start:   opts.Clock.Now(),
		table:   make(map[uint64]*entry),
		results: make(chan jobResult, opts.Jobs),
		running: make(map[*job]struct{}),
		phases:  make(map[Phase]*PhaseStats),
		steps:   make([]Step, 0, 64),
	}
}

// lookup returns the table entry for s, creating an undecided one.
func (e *engine) lookup(s set) *entry {
	h := s.hash()
	head := e.table[h]
	for en := head; en != nil; en = en.chain {
		if en.s.equal(s) {
			return en
		}
	}
	en := &entry{s: s, chain: head}
	e.table[h] = en
	e.order = append(e.order, en)
	return en
}

func (e *engine) candidate(s set, trial int) Candidate {
	return Candidate{s: s, n: e.n, trial: trial}
}

func (e *engine) emit(ev Event) {
	if e.opts.Progress == nil {
		return
	}
	ev.Phase = e.phase
	ev.Calls, ev.Tests = e.calls, e.tests
	if e.valued {
		if ev.Candidate.s.n > 0 {
			ev.Value = e.base + int64(ev.Candidate.s.first())
		}
		ev.Candidate = Candidate{}
	}
	e.opts.Progress(ev)
}

func (e *engine) setPhase(p Phase) {
	e.phase = p
	e.emit(Event{Kind: PhaseChanged})
}

func (e *engine) phaseStats() *PhaseStats {
	ps := e.phases[e.phase]
	if ps == nil {
		ps = &PhaseStats{}
		e.phases[e.phase] = ps
	}
	return ps
}

// resetBest forgets the best candidate: a new culprit set search starts.
func (e *engine) resetBest() { e.best, e.hasBest = set{}, false }

// noteBest records s, which the search has verified to fail, if it is the
// smallest such candidate of the current search.
func (e *engine) noteBest(s set) {
	if e.hasBest && s.len() >= e.best.len() {
		return
	}
	e.best, e.hasBest = s, true
	e.emit(Event{Kind: NewBest, Candidate: e.candidate(s, 0)})
}

// test answers candidate s for the search, from the cache or by calling
// the oracle. m is the search's current state; with Jobs > 1 it is used to
// speculate on what the search will ask next.
func (e *engine) test(s set, m machine) (Outcome, error) {
	en := e.lookup(s)
	if !en.decided() && e.inflight > 0 {
		e.drain() // the answer may be waiting already: then no speculation
	}
	if !en.decided() {
		var spec []*entry
		if e.opts.Jobs > 1 && m != nil {
			spec = e.speculate(m, en)
		}
		if err := e.await([]*entry{en}, spec); err != nil {
			return 0, err
		}
	}
	return e.accept(en)
}

// accept hands the answer of a decided entry to the search and logs the
// step. Whether the step counts as a cache hit depends only on what the
// search had accepted before (or on the seed), not on speculation, so the
// step log is the same for every Jobs.
func (e *engine) accept(en *entry) (Outcome, error) {
	ps := e.phaseStats()
	e.tests++
	ps.Tests++
	cached := en.accepted || en.seeded
	if cached {
		e.cacheHits++
		ps.CacheHits++
	} else {
		e.accepted += en.trials
		ps.Calls += en.trials
		e.trials += en.trials
		e.disagree += en.disagreements()
	}
	if !en.accepted {
		en.accepted = true
		if !en.seeded && en.err == nil {
			for t := 0; t < en.trials; t++ {
				e.emit(Event{Kind: Used, Candidate: e.candidate(en.s, en.firstTrial+t), Trial: en.firstTrial + t, Outcome: en.verdict})
			}
		}
		if en.verdict == Pass {
			e.anyPass = true
			e.passes = append(e.passes, en.s)
			e.passUnion = union(e.passUnion, en.s)
		}
	}
	if en.err != nil {
		return 0, en.err
	}
	st := Step{Phase: e.phase, Size: en.s.len(), Outcome: en.verdict, Cached: cached}
	if e.valued {
		st.Value = e.base + int64(en.s.first())
	} else {
		st.Candidate = en.s.r
	}
	e.steps = append(e.steps, st)
	if cached {
		e.emit(Event{Kind: CacheHit, Candidate: e.candidate(en.s, 0), Outcome: en.verdict})
	}
	return en.verdict, nil
}

// drain records the results that have already arrived, without waiting.
func (e *engine) drain() {
	for {
		select {
		case r := <-e.results:
			e.finish(r)
		default:
			return
		}
	}
}

// speculate lists the candidates the search may ask for after the current
// one, breadth first down its decision tree (both outcomes of every
// unanswered test, the known outcome of answered ones), at most Jobs-1 of
// them that are not answered yet.
func (e *engine) speculate(m machine, cur *entry) []*entry {
	want := e.opts.Jobs - 1
	queue := []machine{m.after(Fail), m.after(Pass)}
	var out []*entry
	for i := 0; i < len(queue) && len(out) < want && i < 2*want+4; i++ {
		c, ok := queue[i].next()
		over := !ok
		if over {
			// The search would end here: what the caller asks next.
			if c, ok = e.followUp(queue[i]); !ok {
				continue
			}
		}
		en := e.lookup(c)
		if en.decided() {
			if en.err == nil && !over {
				queue = append(queue, queue[i].after(en.verdict))
			}
			continue
		}
		if en != cur && !containsEntry(out, en) {
			en.follow = over
			out = append(out, en)
		}
		if !over {
			queue = append(queue, queue[i].after(Fail), queue[i].after(Pass))
		}
	}
	return out
}

// followUp is the candidate Options.ThenRest names after the first
// culprit set search ends in state m: every unit but the set found.
func (e *engine) followUp(m machine) (set, bool) {
	if !e.opts.ThenRest || !e.opts.StopAfterFirst || (e.phase != PhaseFirst && e.phase != PhaseMinimal) {
		return set{}, false
	}
	b, ok := m.(keeper)
	if !ok {
		return set{}, false
	}
	found, _ := b.best()
	rest := minus(span(0, e.n), found)
	return rest, !rest.empty()
}

func containsEntry(list []*entry, en *entry) bool {
	for _, x := range list {
		if x == en {
			return true
		}
	}
	return false
}

// await returns when every entry of req is decided, keeping up to Jobs
// calls in flight: the trials of req first, then those of opt (the
// speculation, in priority order). It returns errStop when a budget, the
// clock or the context forbids the call a required entry still needs.
func (e *engine) await(req, opt []*entry) error {
	for {
		done := true
		for _, r := range req {
			if !r.decided() {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		if e.ctx.Err() != nil {
			return e.halt(ReasonCanceled)
		}
		if reason := e.launch(req, opt); reason != ReasonNone {
			for _, r := range req {
				if !r.decided() && r.job == nil {
					return e.halt(reason)
				}
			}
		}
		if e.inflight == 0 {
			// Nothing runs and nothing could start: only a budget can do
			// that, and launch reported it above. Never wait forever.
			return e.halt(ReasonMaxTests)
		}
		select {
		case r := <-e.results:
			e.finish(r)
		case <-e.ctx.Done():
			return e.halt(ReasonCanceled)
		}
	}
}

// blocked says why no new call may start, or ReasonNone.
func (e *engine) blocked() Reason {
	switch {
	case e.ctx.Err() != nil:
		return ReasonCanceled
	case e.opts.MaxTests > 0 && e.calls >= e.opts.MaxTests:
		return ReasonMaxTests
	case e.opts.MaxDuration > 0 && e.opts.Clock.Now().Sub(e.start) >= e.opts.MaxDuration:
		return ReasonMaxDuration
	}
	return ReasonNone
}

// launch starts the next trials of the wanted entries while slots and
// budgets allow. Calls of entries no longer wanted (a branch of the
// speculation the search did not take) are canceled when their slots are
// needed.
func (e *engine) launch(req, opt []*entry) Reason {
	if reason := e.blocked(); reason != ReasonNone {
		return reason
	}
	e.gen++
	for i, en := range opt {
		en.want, en.prio = e.gen, i+1
	}
	for _, en := range req {
		en.want, en.prio = e.gen, 0
	}
	reserve := 0 // required entries that still need a call
	for _, en := range req {
		if en.decided() || en.job != nil {
			continue
		}
		if e.inflight >= e.opts.Jobs {
			e.freeSlot(true)
			reserve++
			continue
		}
		if e.opts.MaxTests > 0 && e.calls >= e.opts.MaxTests {
			return ReasonMaxTests
		}
		e.startCall(en, false)
	}
	for _, en := range opt {
		if en.decided() || en.job != nil || en.want != e.gen || en.prio == 0 {
			continue
		}
		if e.inflight >= e.opts.Jobs {
			e.freeSlot(false)
			break
		}
		// Speculation never spends the budget a required call needs.
		if e.opts.MaxTests > 0 && e.calls+reserve+1 >= e.opts.MaxTests {
			break
		}
		e.startCall(en, true)
	}
	return ReasonNone
}

// freeSlot cancels the calls of entries that are no longer wanted; when a
// required entry waits and there are none, it also cancels the
// least-wanted speculative call.
func (e *engine) freeSlot(required bool) {
	var worst *job
	stale := false
	for j := range e.running {
		if j.canceled || j.ent.follow {
			// A call for ThenRest is the caller's next question: let it run.
			continue
		}
		if j.ent.want != e.gen {
			e.cancelJob(j)
			stale = true
			continue
		}
		if j.ent.prio > 0 && (worst == nil || j.ent.prio > worst.ent.prio) {
			worst = j
		}
	}
	if required && !stale && worst != nil && !e.cancelPending() {
		e.cancelJob(worst)
	}
}

// cancelPending reports whether a canceled call is still running: its slot
// will free up soon, so there is no need to cancel another one.
func (e *engine) cancelPending() bool {
	for j := range e.running {
		if j.canceled {
			return true
		}
	}
	return false
}

func (e *engine) cancelJob(j *job) {
	j.canceled = true
	j.cancel()
}

func (e *engine) startCall(en *entry, spec bool) {
	j := &job{ent: en, trial: en.firstTrial + en.trials, spec: spec, cancel: func() {}}
	en.job = j
	e.running[j] = struct{}{}
	e.inflight++
	e.calls++
	e.emit(Event{Kind: TestStarted, Candidate: e.candidate(en.s, j.trial), Trial: j.trial, Speculative: spec})
	if e.opts.Jobs == 1 {
		// One call at a time and nothing to cancel: call the oracle on
		// this goroutine. The result goes through the channel like any
		// other (its buffer holds it), so the rest of the engine does not
		// know the difference; the goroutine handoff it saves is most of
		// the engine's cost per test.
		e.work(e.ctx, j, en.s)
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	j.cancel = cancel
	go e.work(ctx, j, en.s)
}

// work runs on its own goroutine: one oracle call.
func (e *engine) work(ctx context.Context, j *job, s set) {
	r := jobResult{job: j}
	func() {
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("oracle panicked: %v", p)
			}
		}()
		r.out, r.err = e.call(ctx, s, j.trial)
	}()
	e.results <- r
}

// finish records the result of a call.
func (e *engine) finish(r jobResult) {
	j, en := r.job, r.job.ent
	delete(e.running, j)
	e.inflight--
	en.job = nil
	j.cancel()
	ev := Event{Kind: TestFinished, Candidate: e.candidate(en.s, j.trial), Trial: j.trial, Speculative: j.spec, Outcome: r.out, Err: r.err}
	// An answer that comes back after its context was canceled - by the
	// engine or by the caller - is not trusted: an oracle that kills its
	// process on cancellation may well report that as Unresolved.
	if j.canceled || e.ctx.Err() != nil {
		if j.canceled {
			e.canceled++
		}
		if ev.Err == nil {
			ev.Err = context.Canceled
		}
		ev.Outcome = 0
		e.emit(ev)
		return
	}
	switch {
	case r.err != nil:
		en.err = &OracleError{Candidate: en.s.String(), Trial: j.trial, Err: r.err}
	case !r.out.valid():
		en.err = &OracleError{Candidate: en.s.String(), Trial: j.trial, Err: fmt.Errorf("invalid outcome %d", uint8(r.out))}
	default:
		en.record(r.out, e.opts.Trials, e.opts.Policy)
	}
	e.emit(ev)
}

func (e *engine) halt(reason Reason) error {
	if e.reason == ReasonNone {
		e.reason = reason
	}
	return errStop{reason}
}

// shutdown cancels the calls still in flight and waits for them, so that
// no goroutine and no Progress call outlives Run.
func (e *engine) shutdown() {
	for j := range e.running {
		// The caller's next question is let run: it will ask it, where
		// the run ended with a first culprit set and this is every unit
		// but that set.
		if !j.ent.follow || e.ctx.Err() != nil || e.reason != ReasonNone || !j.ent.s.equal(e.rest) {
			e.cancelJob(j)
		}
	}
	for e.inflight > 0 {
		e.finish(<-e.results)
	}
}

// fresh evaluates candidates again, ignoring and bypassing the cache (the
// reconfirmation of culprit sets). Its trials are numbered after the
// search's (Options.Trials on), so the oracle can tell them apart. It
// returns the verdicts, 0 where a budget stopped it.
func (e *engine) fresh(sets []set) ([]Outcome, error) {
	ents := make([]*entry, len(sets))
	for i, s := range sets {
		ents[i] = &entry{s: s, firstTrial: e.opts.Trials}
	}
	err := e.await(ents, nil)
	out := make([]Outcome, len(sets))
	for i, en := range ents {
		if !en.decided() {
			continue
		}
		o, aerr := e.accept(en)
		if aerr != nil {
			return out, aerr
		}
		out[i] = o
	}
	return out, err
}

func isStop(err error) bool {
	var s errStop
	return errors.As(err, &s)
}

// drive runs a search machine to completion (or until an error), asking
// the engine for each candidate it wants answered.
func (e *engine) drive(m machine) (machine, error) {
	for {
		c, ok := m.next()
		if !ok {
			return m, nil
		}
		o, err := e.test(c, m)
		if err != nil {
			return m, err
		}
		m = m.after(o)
		if b, ok := m.(keeper); ok {
			if s, ok := b.best(); ok {
				e.noteBest(s)
			}
		}
	}
}

// largestPass returns the part within u of the accepted Pass answer that
// covers most of u: by monotonicity, every subset of it passes too.
func (e *engine) largestPass(u set) set {
	var bestSet set
	for _, p := range e.passes {
		if x := intersect(p, u); x.len() > bestSet.len() {
			bestSet = x
		}
	}
	return bestSet
}
