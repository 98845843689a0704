package reduction

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"reduce/internal/regress"
	"reduce/kernels"
	"reduce/shrink"
)

// sampleMode finds the culprit sets by dropping samples, then reduces the
// elements of each. It switches to neutralizing (keeping the size) when the
// failure needs samples only for their number, and to the size search when
// it needs no values at all.
func (r *run) sampleMode(ctx context.Context) ([]Finding, error) {
	r.mode, r.modeReason = ModeSamples, "the failure depends on which samples are in the batch"
	n := int(r.batch.Samples)
	oracle := func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		units := cand.Units()
		if len(units) == 0 {
			// A batch without samples is not a candidate.
			return shrink.Unresolved, nil
		}
		return r.ask(ctx, keepRows(rowsOf(units), len(units)), cand.Trial())
	}
	opts := r.shrinkOptions()
	opts.StopAfterFirst = true
	// A replay costs by its samples: candidates that halve. The batch
	// without the culprits is asked next (neighbours): with -j N, ahead.
	opts.Halve, opts.ThenRest = true, true
	// The confirmation showed that the original fails.
	opts.Seed = []shrink.CacheEntry{{Candidate: []shrink.Range{{Lo: 0, Hi: n}}, Outcome: shrink.Fail}}
	r.setPhase(PhaseSamples, n)
	res, err := r.search(ctx, n, oracle, opts)
	if ctx.Err() != nil || res.Incomplete {
		return r.partialSamples(res), nil
	}
	if err != nil {
		return nil, fmt.Errorf("shrink samples: %w", err)
	}
	if len(res.Culprits) == 0 {
		return nil, nil
	}
	if slices.Contains(res.Unconfirmed, 0) {
		r.logf("samples: culprit set %v failed in the search but not in its fresh replays: the failure is flaky (a higher --trials helps)", res.Culprits[0])
	}
	if r.history == "" {
		// Innocent-looking samples that pass from the step's own weights
		// fail only against the recorded state.
		if r.history, err = r.freshStatePasses(ctx, rowsOf(res.Culprits[0])); err != nil || ctx.Err() != nil {
			return nil, err
		}
	}
	if r.history != "" {
		// The samples fail against a state an earlier step broke: the
		// first set is a witness, and neither its elements nor further
		// sets would name a cause.
		set := res.Culprits[0]
		r.modeReason = predatesReason(r.history)
		r.emit(&CulpritFound{Event: "culprit", Indices: set, IDs: r.idsOf(set)})
		sub, err := r.rows(rowsOf(set))
		return []Finding{{Indices: set, IDs: r.idsOf(set), Batch: sub}}, err
	}
	first, err := r.reduceSet(ctx, res.Culprits[0])
	if err != nil || ctx.Err() != nil {
		return []Finding{first}, err
	}
	longer, values := r.batch.LongerSamples(first.Indices), r.batch.SampleValues()
	if first.ContentFree && first.Relation == nil && r.batch.Samples == 1 && (longer != "" || len(values) > 0) {
		// A batch of one sample that fails whatever its values: its size
		// first (the last batch of an epoch under BatchNorm), before its
		// length or per-sample values, which one sample cannot tell apart.
		if grown, ok, err := r.growMode(ctx, first); err != nil || ok {
			return grown, err
		}
	}
	switch {
	case first.ContentFree && first.Relation != nil:
		// Other pairs may share other keys: the search goes on below.
		r.modeReason = "every tensor value neutralized, the samples still fail: the cause is a relation between their per-sample values: " + first.Relation.Text
	case first.Shape != nil && first.Shape.Squeezed:
		r.modeReason = "a shape decides it, not a value: " + first.Shape.Text
		return []Finding{first}, nil
	case first.Shape != nil:
		r.modeReason = r.neutralized() + " neutralized, the samples still fail: a size decides it: " + first.Shape.Text
		return []Finding{first}, nil
	case first.ContentFree && longer != "":
		// Padded to the longest sample: no value matters, the length does.
		r.modeReason = r.neutralized() + " neutralized, the samples still fail: " + longer
		return []Finding{first}, nil
	case first.ContentFree && len(values) > 0:
		// The reduction edits tensors only: the per-sample Python values
		// the step also got may be the cause.
		r.modeReason = fmt.Sprintf("every tensor value neutralized, the samples still fail: the cause is in their per-sample values (%s)", strings.Join(values, ", "))
		if len(first.Indices) > 1 {
			r.modeReason += ", a relation between them"
		}
		return []Finding{first}, nil
	case first.Canonical && len(first.Indices) == 1:
		// No sample passed without it: every sample may fail the same way,
		// and a search for further sets would find each of them.
		r.modeReason = "the failure depends on the values of the samples, and no other sample of the batch passes without this one: any sample may hold the same values"
		return []Finding{first}, nil
	case first.ContentFree && len(first.Indices) == 1:
		if grown, ok, err := r.growMode(ctx, first); err != nil || ok {
			return grown, err
		}
		r.modeReason = r.neutralized() + " neutralized, one sample still fails: the cause is a shape or dtype, which any sample has"
		return []Finding{first}, nil
	case first.ContentFree:
		return r.sizeMode(ctx, fmt.Sprintf("the failure needs %s but none of their values: it depends on the batch size", regress.Count(int64(len(first.Indices)), "sample")))
	case len(first.Elements) > 0 && len(first.Indices) > 1 && len(rowsWithElements(first)) < len(first.Indices):
		return r.neutralizeMode(ctx, first)
	}

	// Further, independent culprit sets: the journal answers the first
	// set's candidates again, so only new ones are replayed.
	opts.StopAfterFirst = false
	opts.MaxCulprits = r.o.MaxFindings
	r.setPhase(PhaseSamples, n)
	all, err := r.search(ctx, n, oracle, opts)
	found := []Finding{first}
	if ctx.Err() != nil || all.Incomplete {
		return found, nil
	}
	if err != nil {
		return found, fmt.Errorf("shrink samples: %w", err)
	}
	for k, set := range all.Culprits {
		if slices.Equal(set, first.Indices) {
			continue // the first set, found again from the journal's answers
		}
		if slices.Contains(all.Unconfirmed, k) {
			// Found, but its fresh replays did not fail: not a finding to
			// write a regression test for.
			r.logf("samples: culprit set %v did not fail again in fresh replays; left out (flaky)", set)
			continue
		}
		f, err := r.reduceSet(ctx, set)
		found = append(found, f)
		if err != nil || ctx.Err() != nil {
			return found, err
		}
	}
	if len(all.Culprits) == r.o.MaxFindings {
		r.logf("samples: stopped after %d culprit sets; more may exist", r.o.MaxFindings)
	}
	return found, nil
}

// partialSamples is the finding of an interrupted sample search: its
// smallest failing candidate, or the original.
func (r *run) partialSamples(res shrink.Result) []Finding {
	set := res.Partial
	if set == nil {
		set = make([]int, r.batch.Samples)
		for i := range set {
			set[i] = i
		}
	}
	if len(res.Culprits) > 0 {
		set = res.Culprits[0]
	}
	sub, err := r.rows(rowsOf(set))
	if err != nil {
		return nil
	}
	return []Finding{{Indices: set, IDs: r.idsOf(set), Batch: sub, Partial: true}}
}

// reduceSet reduces the elements of one culprit set of samples, after
// replaying the batch without them (the neighbour, and the donors of the
// dropped elements' values).
func (r *run) reduceSet(ctx context.Context, set []int) (Finding, error) {
	r.logf("%s", strings.TrimSpace(fmt.Sprintf("samples: culprit set %v %s", set, strings.Join(r.idsOf(set), " "))))
	r.emit(&CulpritFound{Event: "culprit", Indices: set, IDs: r.idsOf(set)})
	rows := rowsOf(set)
	sub, err := r.rows(rows)
	if err != nil {
		return Finding{}, err
	}
	f := Finding{Indices: set, IDs: r.idsOf(set), Batch: sub}
	// Resumed, the set's failure may be the journal's alone: seen again
	// before its elements are searched, so that a journal that does not
	// hold is refused now rather than after the diagnoses.
	if err := r.failsHere(ctx, sub, "the culprit set"); err != nil && ctx.Err() == nil {
		return f, err
	}
	r.setPhase(PhaseNeighbours, int(r.batch.Samples)-len(set))
	wrows, wb, err := r.without(ctx, set)
	if err != nil || ctx.Err() != nil {
		f.Partial = ctx.Err() != nil
		return f, err
	}
	f.Without = wb
	var donors []int64
	if _, err := kernels.Lookup(r.batch.Op); err != nil {
		donors = r.donorsFor(set, wrows) // a step of the user's own: no op says what is neutral
	}
	orig := func(pos int64) int64 { return int64(set[pos]) }
	er, err := r.elements(ctx, rows, sub, nil, orig, donors, false)
	if err == nil && ctx.Err() == nil && er.contentFree && wrows == nil && len(donors) > 0 {
		// No sample passed without the culprits, so the donors' values were
		// no replay's: the culprits may hold the very values that fail in
		// every sample (every target -100). Then the values are searched
		// against zeros, the dtype's own.
		r.logf("elements: with the other samples' values the culprits still fail, and no sample passes without them: searching against zeros")
		var zer elementResult
		if zer, err = r.elements(ctx, rows, sub, nil, orig, nil, true); err == nil && !zer.contentFree && !zer.partial && len(zer.elements) > 0 {
			er, f.Canonical = zer, true
			for i, e := range er.elements {
				if r.everySample(e) {
					er.elements[i].Shared = true
					f.Shared = append(f.Shared, fmt.Sprintf("%s%s = %s", regress.TensorLabel(e.Tensor), perSample(e), valueText(e)))
				}
			}
		}
	}
	f.Elements, f.ContentFree, f.Partial = er.elements, er.contentFree, er.partial
	f.Relation, f.Boundary, f.OtherEnd = er.relation, er.boundary, er.otherEnd
	if er.reduced != nil {
		f.Batch = er.reduced
	}
	if err != nil || ctx.Err() != nil || !f.ContentFree || er.reducedCand == nil {
		return f, err
	}
	// No tensor value matters: equal per-sample values may (two samples
	// with one key), or a dim's size (a sequence longer than the model's
	// positions).
	if len(set) > 1 && len(r.batch.SampleValues()) > 0 {
		if err := r.valueRelation(ctx, &f, er.reducedCand); err != nil || f.Relation != nil {
			return f, err
		}
	}
	longer := r.batch.LongerSamples(set)
	why := "with " + r.neutralized() + " neutralized"
	switch {
	case longer != "":
		why += ": " + longer
	case len(set) == 1:
		why += ", and every sample fails alone with it"
	}
	if longer != "" || len(set) == 1 {
		f.Shape, err = r.shape(ctx, &f, er.reducedCand, why)
	}
	return f, err
}

func rowsWithElements(f Finding) map[int64]bool {
	rows := map[int64]bool{}
	for _, e := range f.Elements {
		rows[e.row] = true
	}
	return rows
}

// neutralized says which values the element phase neutralizes: every one
// but those of bool tensors (masks), which it leaves as they are.
func (r *run) neutralized() string {
	var bools []string
	for _, e := range r.batch.Tensors {
		if e.BatchDim != nil && e.DType == kernels.Bool {
			bools = append(bools, e.Name)
		}
	}
	if len(bools) == 0 {
		return "every value"
	}
	return "every value but those of the bool tensors (" + strings.Join(bools, ", ") + ", left as recorded)"
}

// everySample reports whether every sample of the recorded batch holds
// e's value at e's place.
func (r *run) everySample(e Element) bool {
	for _, t := range r.batch.Tensors {
		if t.Name != e.Tensor || t.BatchDim == nil || t.Tensor == nil {
			continue
		}
		bd, idx := *t.BatchDim, slices.Clone(e.Index)
		for s := int64(0); s < r.batch.Samples; s++ {
			idx[bd] = s
			at, err := t.Tensor.StorageIndex(idx)
			if err != nil {
				return false
			}
			v := t.Tensor.LoadFloat(at)
			if !t.DType.IsFloat() {
				v = float64(t.Tensor.LoadInt(at))
			}
			if v != e.Value {
				return false
			}
		}
		return true
	}
	return false
}

// perSample is e's index without its batch dim, as a sample holds it:
// "" for a sample that is one number, "[3]" otherwise.
func perSample(e Element) string {
	if len(e.MinimalIndex) <= 1 {
		return ""
	}
	return indexText(e.MinimalIndex[1:])
}
