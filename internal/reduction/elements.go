package reduction

import (
	"context"
	"fmt"
	"slices"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/shrink"
)

// maxElementUnits bounds the element phase: past it the samples are
// reported without their elements.
const maxElementUnits = 1 << 22

type elementResult struct {
	elements []Element
	reduced  *fixtures.Batch // the batch with every other searched element neutralized
	boundary *fixtures.Batch // reduced with each triggering element at its passing value
	// contentFree: with every searched element neutralized it still fails.
	contentFree bool
	partial     bool
}

// elements finds, inside sub (the batch of rows), the elements that
// trigger the failure: the others are set to their neutral value (the
// op's, such as a target's ignore_index, else zero), only those at the
// searched positions along the batch axis (all when nil) are searched, and
// orig maps a position to the original batch's. Then it finds, for each
// triggering element, the nearest value that passes.
func (r *run) elements(ctx context.Context, rows []int64, sub *fixtures.Batch, searched []int64, orig func(pos int64) int64) (elementResult, error) {
	sp := newUnitSpace(rows, sub, searched, maxElementUnits)
	if len(sp.units) == 0 || len(sp.units) > maxElementUnits {
		return elementResult{}, nil
	}
	keeping := func(keep []int, set map[int]value) *candidate {
		return &candidate{edit: &edit{space: sp, keep: keep, set: set}, size: len(keep)}
	}
	build := func(keep []int, set map[int]value) *fixtures.Batch {
		b, _ := keeping(keep, set).build(r.batch) // an edit's build cannot fail
		return b
	}
	r.setPhase(PhaseElements, len(sp.units))
	opts := r.shrinkOptions()
	opts.StopAfterFirst = true
	opts.Strategy = shrink.Auto
	// Every element kept is sub itself, which failed in the sample phase.
	opts.Seed = []shrink.CacheEntry{{Candidate: []shrink.Range{{Lo: 0, Hi: len(sp.units)}}, Outcome: shrink.Fail}}
	res, err := shrink.Run(ctx, len(sp.units), func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		return r.ask(ctx, keeping(cand.Units(), nil), cand.Trial())
	}, opts)
	if ctx.Err() != nil || res.Incomplete {
		out := elementResult{partial: true}
		if res.Partial != nil {
			out.reduced = build(res.Partial, nil)
		}
		return out, nil
	}
	if err != nil {
		return elementResult{}, fmt.Errorf("shrink elements: %w", err)
	}
	if len(res.Culprits) == 0 {
		return elementResult{}, nil
	}
	keep := res.Culprits[0]
	out := elementResult{reduced: build(keep, nil), contentFree: len(keep) == 0}

	r.setPhase(PhaseBoundary, len(keep))
	passing := map[int]value{}
	for _, u := range keep {
		un := sp.units[u]
		e := sub.Tensors[un.tensor]
		bd := *e.BatchDim
		idx := slices.Clone(un.index)
		idx[bd] = orig(idx[bd])
		fe := Element{row: un.index[bd], Element: regress.Element{Tensor: e.Name, Index: idx, MinimalIndex: un.index}}
		// Its own value and the neutral one describe candidates the
		// element search has answered already: the journal answers them.
		try := func(ctx context.Context, v value, trial int) (shrink.Outcome, error) {
			return r.ask(ctx, keeping(keep, map[int]value{u: v}), trial)
		}
		var p *value
		if un.float {
			p, err = r.floatBoundary(ctx, e.Tensor, un.storage, &fe.Element, try)
		} else {
			p, err = r.intBoundary(ctx, e.Tensor.LoadInt(un.storage), sp.neutral[un.tensor].i, &fe.Element, try)
		}
		if ctx.Err() != nil {
			out.partial = true
			out.elements = append(out.elements, fe)
			return out, nil
		}
		if err != nil {
			// The boundary is extra: without it the element is still
			// reported (a flaky failure, a budget).
			fe.Rule = "no passing value found: " + boundaryTrouble(err)
			p = nil
		}
		if p != nil {
			passing[u] = *p
		}
		out.elements = append(out.elements, fe)
	}
	if len(passing) == len(keep) && len(keep) > 0 {
		out.boundary = build(keep, passing)
	}
	return out, nil
}
