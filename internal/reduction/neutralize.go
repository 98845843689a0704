package reduction

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"reduce/internal/regress"
	"reduce/shrink"
)

// neutralizeMode keeps the batch size and replaces every sample not kept
// by a benign one from the batch: for a failure that needs some samples'
// values and a certain number of samples besides.
func (r *run) neutralizeMode(ctx context.Context, first Finding) ([]Finding, error) {
	n := int(r.batch.Samples)
	needed := rowsWithElements(first)
	// A benign sample: one whose copies fill the batch without failing.
	var candidates []int
	for pos, i := range first.Indices {
		if !needed[int64(pos)] {
			candidates = append(candidates, i)
		}
	}
	in := map[int]bool{}
	for _, i := range first.Indices {
		in[i] = true
	}
	for i := 0; i < n && len(candidates) < 4; i++ {
		if !in[i] {
			candidates = append(candidates, i)
		}
	}
	benign := -1
	r.setPhase(PhaseNeutralize, n)
	for _, cand := range candidates[:min(len(candidates), 4)] {
		o, err := r.ask(ctx, keepRows(repeat(int64(cand), n), n), 0)
		if err != nil {
			return []Finding{first}, err
		}
		if o == shrink.Pass {
			benign = cand
			break
		}
	}
	if benign < 0 {
		r.modeReason = fmt.Sprintf("the failure needs %s although only %d hold triggering values, but no sample of the batch could fill it without failing, so they were dropped, not neutralized", regress.Count(int64(len(first.Indices)), "sample"), len(needed))
		return []Finding{first}, nil
	}
	r.mode = ModeNeutralize
	r.modeReason = fmt.Sprintf("the failure needs %s but only %d of them for their values: the batch size matters, so samples were replaced by copies of sample %d (a batch of its copies passes) instead of dropped", regress.Count(int64(len(first.Indices)), "sample"), len(needed), benign)
	if msg := r.smallerFailsOtherwise(len(first.Indices)); msg != "" {
		// The companions are there for the batch to run at all (BatchNorm
		// refuses one sample), not for the failure.
		r.modeReason = fmt.Sprintf("%d of the %s hold the triggering values; a smaller batch fails otherwise (%s), so the batch needs its size to run at all: samples were replaced by copies of sample %d (a batch of its copies passes) instead of dropped", len(needed), regress.Count(int64(len(first.Indices)), "sample"), msg, benign)
	}
	r.logf("neutralize: %s", r.modeReason)
	build := func(keep []int) []int64 {
		idx := repeat(int64(benign), n)
		for _, u := range keep {
			idx[u] = int64(u)
		}
		return idx
	}
	oracle := func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		units := cand.Units()
		return r.ask(ctx, keepRows(build(units), len(units)), cand.Trial())
	}
	opts := r.shrinkOptions()
	opts.MaxCulprits = r.o.MaxFindings
	// Keeping every sample is the original, which the confirmation showed
	// to fail.
	opts.Seed = []shrink.CacheEntry{{Candidate: []shrink.Range{{Lo: 0, Hi: n}}, Outcome: shrink.Fail}}
	res, err := r.search(ctx, n, oracle, opts)
	if ctx.Err() != nil || res.Incomplete {
		set := res.Partial
		if len(res.Culprits) > 0 {
			set = res.Culprits[0]
		}
		if set == nil {
			return []Finding{first}, nil
		}
		sub, err := r.rows(build(set))
		if err != nil {
			return nil, err
		}
		return []Finding{{Indices: set, IDs: r.idsOf(set), Batch: sub, Partial: true}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("neutralize samples: %w", err)
	}
	var found []Finding
	for _, set := range res.Culprits {
		r.logf("neutralize: culprit set %v %s", set, strings.Join(r.idsOf(set), " "))
		r.emit(&CulpritFound{Event: "culprit", Indices: set, IDs: r.idsOf(set)})
		rows := build(set)
		sub, err := r.rows(rows)
		if err != nil {
			return found, err
		}
		f := Finding{Indices: set, IDs: r.idsOf(set), Batch: sub}
		er, err := r.elements(ctx, rows, sub, rowsOf(set), func(pos int64) int64 { return pos }, nil, false)
		f.Elements, f.ContentFree, f.Partial, f.Boundary = er.elements, er.contentFree, er.partial, er.boundary
		f.Relation, f.OtherEnd = er.relation, er.otherEnd
		if er.reduced != nil {
			f.Batch = er.reduced
		}
		found = append(found, f)
		if err != nil || ctx.Err() != nil {
			return found, err
		}
	}
	return found, nil
}

// smallerFailsOtherwise is the message of another failure first met by a
// batch of fewer than n whole samples, "" when there is none.
func (r *run) smallerFailsOtherwise(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(r.others)) {
		if k, ok := r.otherRows[key]; ok && k < n {
			o := r.others[key]
			return cmp.Or(o.Message, o.Signature.Expression)
		}
	}
	return ""
}
