package reduction

import (
	"context"
	"fmt"

	"reduce/shrink"
)

// With -j N a search replays candidates ahead of need (shrink's
// speculation), and a later answer may make them useless. What an answer
// teaches the reduction - its count in its phase, the samples seen passing
// (run.passed), a different failure met - takes effect when a search uses
// the answer (shrink.Used), never when its replay ends, so that the
// reduction learns the same things in the same order, and writes the same
// fixture, for every -j. The replays no search used are Result.Ahead.

// ahead is one search run with Jobs > 1: the journal key and trial of
// each candidate it asked the oracle for, by the engine's name of it.
type ahead struct {
	ctx  context.Context // the search's: a replay canceled while it is not was canceled by the engine
	keys map[string]string
}

type aheadKey struct{}

// aheadCall is what the context of one oracle call of such a search holds.
type aheadCall struct {
	a    *ahead
	name string
}

// setName names a call as shrink's Used event names it: its units, or
// its value, and its trial.
func setName(c shrink.Candidate) string { return fmt.Sprintf("%v#%d", c.Ranges(), c.Trial()) }

func valueName(v int64, trial int) string { return fmt.Sprintf("v%d#%d", v, trial) }

// search runs shrink.Run with the answers of calls made ahead taking
// effect when used.
func (r *run) search(ctx context.Context, n int, oracle shrink.Oracle, opts shrink.Options) (shrink.Result, error) {
	if opts.Jobs <= 1 {
		return shrink.Run(ctx, n, oracle, opts)
	}
	a := r.ahead(ctx, &opts, func(ev shrink.Event) string { return setName(ev.Candidate) })
	return shrink.Run(ctx, n, func(ctx context.Context, c shrink.Candidate) (shrink.Outcome, error) {
		return oracle(context.WithValue(ctx, aheadKey{}, aheadCall{a, setName(c)}), c)
	}, opts)
}

// boundary is shrink.Boundary as search runs shrink.Run.
func (r *run) boundary(ctx context.Context, lo, hi int64, pred shrink.Predicate, opts shrink.Options) (shrink.BoundaryResult, error) {
	pred = r.aheadValues(ctx, pred, &opts) // before opts is passed: it sets opts.Progress
	return shrink.Boundary(ctx, lo, hi, pred, opts)
}

// largestPassing is shrink.LargestPassing as search runs shrink.Run.
func (r *run) largestPassing(ctx context.Context, lo, hi int64, pred shrink.Predicate, opts shrink.Options) (shrink.LargestResult, error) {
	pred = r.aheadValues(ctx, pred, &opts)
	return shrink.LargestPassing(ctx, lo, hi, pred, opts)
}

// aheadValues is pred, its calls named, where opts.Jobs > 1.
func (r *run) aheadValues(ctx context.Context, pred shrink.Predicate, opts *shrink.Options) shrink.Predicate {
	if opts.Jobs <= 1 {
		return pred
	}
	a := r.ahead(ctx, opts, func(ev shrink.Event) string { return valueName(ev.Value, ev.Trial) })
	return func(ctx context.Context, v int64, trial int) (shrink.Outcome, error) {
		return pred(context.WithValue(ctx, aheadKey{}, aheadCall{a, valueName(v, trial)}), v, trial)
	}
}

// ahead makes the record of a search with Jobs > 1, whose Used events
// (named by name) apply the answers' effects.
func (r *run) ahead(ctx context.Context, opts *shrink.Options, name func(shrink.Event) string) *ahead {
	a := &ahead{ctx: ctx, keys: map[string]string{}}
	next := opts.Progress
	opts.Progress = func(ev shrink.Event) {
		if ev.Kind == shrink.Used {
			r.mu.Lock()
			kt, ok := a.keys[name(ev)]
			r.mu.Unlock()
			if ok {
				r.use(kt)
			}
		}
		if next != nil {
			next(ev)
		}
	}
	return a
}

// prefetch asks ask in the background with -j N (N > 1), while the
// caller asks another question: one it will likely ask next, whose answer
// then takes effect when it is asked. The func it returns ends the
// prefetch: it waits for it where wanted, else cancels it.
func (r *run) prefetch(ctx context.Context, ask func(ctx context.Context)) (end func(wanted bool)) {
	if r.o.Jobs <= 1 {
		return func(bool) {}
	}
	a := &ahead{ctx: ctx, keys: map[string]string{}}
	pctx, cancel := context.WithCancel(context.WithValue(ctx, aheadKey{}, aheadCall{a, "prefetch"}))
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ask(pctx)
	}()
	return func(wanted bool) {
		if !wanted {
			cancel()
		}
		<-finished
		cancel()
	}
}

// use applies the effects of the answer kt (key#trial), if they wait.
func (r *run) use(kt string) {
	r.mu.Lock()
	w, ok := r.pending[kt]
	delete(r.pending, kt)
	r.mu.Unlock()
	if ok {
		w.learned()
	}
}

// waiting is an answer no search has used yet: what it teaches, and
// whether it was replayed (or read from the journal).
type waiting struct {
	learned func()
	replay  bool
}

// learn applies f, the effects of the answer kt, now, or when a search
// uses it where the call was made ahead (ctx says).
func (r *run) learn(ctx context.Context, kt string, f func(), replay bool) {
	if _, ok := ctx.Value(aheadKey{}).(aheadCall); !ok {
		f()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[string]waiting{}
	}
	r.pending[kt] = waiting{f, replay}
}

// noteCall records which answer an oracle call of a search with Jobs > 1
// got; an answer that waits and is asked again by a call not made ahead
// takes effect now.
func (r *run) noteCall(ctx context.Context, kt string) {
	call, ok := ctx.Value(aheadKey{}).(aheadCall)
	if !ok {
		r.use(kt)
		return
	}
	r.mu.Lock()
	call.a.keys[call.name] = kt
	r.mu.Unlock()
}

// canceledAhead counts a replay the engine canceled: made ahead, of a
// branch the search did not take.
func (r *run) canceledAhead(ctx context.Context) {
	if call, ok := ctx.Value(aheadKey{}).(aheadCall); ok && call.a.ctx.Err() == nil {
		r.mu.Lock()
		r.canceled++
		r.mu.Unlock()
	}
}

// unused is how many replays made ahead no search used; mu is held.
func (r *run) unused() int {
	n := r.canceled
	for _, w := range r.pending {
		if w.replay {
			n++
		}
	}
	return n
}
