package reduction

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"reduce/internal/regress"
	"reduce/shrink"
)

// sizeMode finds by bisection the largest batch size that passes, taking
// the first k samples for size k.
func (r *run) sizeMode(ctx context.Context, why string) ([]Finding, error) {
	r.mode, r.modeReason = ModeSize, why
	n := int64(r.batch.Samples)
	// What the answers showed: the smallest size that failed as kept (the
	// original's n, confirmed) and the largest that passed.
	var mu sync.Mutex
	smallestFail, largestPass := n, int64(0)
	pred := func(ctx context.Context, k int64, trial int) (shrink.Outcome, error) {
		return r.ask(ctx, keepRows(prefix(k), int(k)), trial)
	}
	opts := r.shrinkOptions()
	opts.Progress = func(ev shrink.Event) {
		// The answers the search used, as every -j uses the same ones.
		if ev.Kind != shrink.Used {
			return
		}
		k, o := ev.Value, ev.Outcome
		mu.Lock()
		switch {
		case o == shrink.Fail && k < smallestFail:
			smallestFail = k
		case o == shrink.Pass && k > largestPass && k < smallestFail:
			largestPass = k
		}
		mu.Unlock()
	}
	r.setPhase(PhaseSize, int(n))
	if n > 1 {
		res, err := r.largestPassing(ctx, 1, n-1, pred, opts)
		mu.Lock()
		sf, lp := smallestFail, largestPass
		mu.Unlock()
		switch {
		case ctx.Err() != nil || res.Incomplete || errors.Is(err, shrink.ErrBudget):
			// The best so far: the smallest batch that failed as kept.
			sub, err := r.rows(prefix(sf))
			if err != nil {
				return nil, err
			}
			r.size = &regress.SizeResult{LargestPassing: lp, SmallestFailing: sf}
			set := ints(prefix(sf))
			return []Finding{{Indices: set, IDs: r.idsOf(set), Batch: sub, Partial: true, ContentFree: true}}, nil
		case err != nil && !errors.Is(err, shrink.ErrNoPassing):
			return nil, fmt.Errorf("size search: %w", err)
		}
		if sf != lp+1 {
			// The size after the largest pass failed otherwise (a
			// different failure): the answer is the gap between them.
			r.modeReason += fmt.Sprintf("; sizes %d to %d fail otherwise, so the smallest batch failing as recorded has %s", lp+1, sf-1, regress.Count(sf, "sample"))
		}
		smallestFail, largestPass = sf, lp
	}
	r.size = &regress.SizeResult{LargestPassing: largestPass, SmallestFailing: smallestFail}
	r.logf("size: %s fail, %d pass", regress.Count(smallestFail, "sample"), largestPass)
	set := ints(prefix(smallestFail))
	sub, err := r.rows(prefix(smallestFail))
	if err != nil {
		return nil, err
	}
	f := Finding{Indices: set, IDs: r.idsOf(set), Batch: sub, ContentFree: true}
	if largestPass > 0 {
		if f.Boundary, err = r.rows(prefix(largestPass)); err != nil {
			return nil, err
		}
	}
	return []Finding{f}, nil
}

func ints(v []int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// growSizes are the batch sizes growMode tries, copies of one sample:
// BatchNorm's two, and a few more for a batch that must fill a device
// mesh or hold enough negatives.
var growSizes = []int64{2, 8, 64}

// growMode answers a failure that one sample has whatever its values,
// which may be the batch's size rather than any shape or dtype (BatchNorm
// in training refuses a batch of one): batches of copies of the sample,
// of growSizes, are replayed until one passes, and the sizes between the
// last that failed and it are bisected (grow); where copies fail at every
// size, the batch's other samples are the donors, in turn after it. It returns the finding in size
// mode when one passed (the passing batch its boundary), else ok false
// and the finding as it was.
func (r *run) growMode(ctx context.Context, first Finding) (found []Finding, ok bool, err error) {
	c := int64(first.Indices[0])
	copies := func(k int64) []int64 { return repeat(c, int(k)) }
	// Then donors: the batch's other samples, in turn after it, where
	// copies of one sample fail at every size (a step that wants distinct
	// samples).
	var others []int64
	for x := range r.batch.Samples {
		if x != c {
			others = append(others, x)
		}
	}
	withDonors := func(k int64) []int64 {
		out := make([]int64, k)
		for i := range out {
			out[i] = c
			if i%(len(others)+1) > 0 {
				out[i] = others[i%(len(others)+1)-1]
			}
		}
		return out
	}
	r.setPhase(PhaseSize, int(growSizes[len(growSizes)-1]))
	rowsOf, donors := copies, false
	passing, err := r.grow(ctx, int64(len(first.Indices)), copies)
	if err == nil && passing == 0 && len(others) > 0 {
		rowsOf, donors = withDonors, true
		passing, err = r.grow(ctx, int64(len(first.Indices)), withDonors)
	}
	if err != nil || passing == 0 {
		return nil, false, err
	}
	r.mode = ModeSize
	r.size = &regress.SizeResult{SmallestFailing: int64(len(first.Indices)), SmallestPassing: passing}
	r.modeReason = fmt.Sprintf("one sample fails whatever its values, and a batch of %d copies of it passes: the batch is too small", passing)
	r.grownWith = "copies of it"
	if donors {
		r.modeReason = fmt.Sprintf("one sample fails whatever its values, copies of it fail at every size, and a batch of %d with the batch's other samples passes: the batch is too small", passing)
		r.grownWith = "the batch's other samples"
	}
	r.logf("size: %s", r.size.Text())
	f := first
	if f.Batch, err = r.rows([]int64{c}); err != nil {
		return nil, false, err
	}
	if f.Boundary, err = r.rows(rowsOf(passing)); err != nil {
		return nil, false, err
	}
	f.Elements, f.Shape, f.Relation, f.OtherEnd, f.Without = nil, nil, nil, nil, nil
	return []Finding{f}, true, nil
}

// grow asks batches of rowsOf(k) for k in growSizes until one passes,
// then bisects the sizes between the last that failed and it: the
// smallest size that passes, 0 when none did; failing is the size known
// to fail.
func (r *run) grow(ctx context.Context, failing int64, rowsOf func(k int64) []int64) (passing int64, err error) {
	ask := func(k int64) (shrink.Outcome, error) { return r.askTrials(ctx, keepRows(rowsOf(k), int(k))) }
	for _, k := range growSizes {
		o, err := ask(k)
		if err != nil || ctx.Err() != nil || o == shrink.Unresolved {
			return 0, err
		}
		if o == shrink.Pass {
			passing = k
			break
		}
		failing = k
	}
	if passing == 0 {
		return 0, nil
	}
	for passing-failing > 1 {
		mid := failing + (passing-failing)/2
		o, err := ask(mid)
		if err != nil || ctx.Err() != nil {
			return 0, err
		}
		switch o {
		case shrink.Pass:
			passing = mid
		case shrink.Fail:
			failing = mid
		default:
			failing = passing - 1 // another failure between: the smallest pass known stands
		}
	}
	return passing, nil
}
