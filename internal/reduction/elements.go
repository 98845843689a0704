package reduction

import (
	"context"
	"fmt"
	"math"
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
	// reducedCand describes reduced (nil when the search did not finish).
	reducedCand *candidate
	// boundary is reduced with each triggering element at its passing
	// value (a relation broken), replayed and passed; otherEnd the same
	// with each at the other end of its valid range, where one was found.
	boundary *fixtures.Batch
	otherEnd *fixtures.Batch
	relation *regress.Relation
	// contentFree: with every searched element neutralized it still fails.
	contentFree bool
	partial     bool
}

// elements finds, inside sub (the batch of rows), the elements that
// trigger the failure: the others are set to their neutral value (the
// op's, such as a target's ignore_index; for a step of the user's own the
// value of donors[k] for row k, see newUnitSpace), only those at the searched
// positions along the batch axis (all when nil) are searched, and orig
// maps a position to the original batch's. Then it tells a relation
// between them (relation.go) from values that fail each by itself, and
// finds for each of those the nearest value that passes (boundary.go).
// Every batch it returns besides the reduced one was replayed and passed.
// With precheck, the batch with every unit dropped is asked first, and
// when it still fails the search ends there (content-free, nothing else
// set): a second search, against other neutral values, costs one replay
// where it can find nothing. Without, it is asked first where no unit is
// an outlier (outliers), and its failure ends the search with the
// reduced batch content-free.
func (r *run) elements(ctx context.Context, rows []int64, sub *fixtures.Batch, searched []int64, orig func(pos int64) int64, donors []int64, precheck bool) (elementResult, error) {
	sp := newUnitSpace(rows, sub, searched, maxElementUnits, r.donorValues(donors))
	sp.donors = donors
	if precheck && donors == nil {
		// Against zeros, where no sample passes without the culprits: the
		// values every sample holds alike are searched (every target
		// -100), where there are such; zeros elsewhere are no neutral
		// value (a length of 0 divides by zero).
		if shared := r.sharedUnits(sp); len(shared) > 0 {
			sp.units = shared
		}
	}
	if len(sp.units) == 0 || len(sp.units) > maxElementUnits {
		return elementResult{}, nil
	}
	keeping := func(keep []int, set map[int]value) *candidate {
		return &candidate{View: fixtures.View{Rows: sp.rows}, edit: &edit{space: sp, keep: keep, set: set}, size: len(keep)}
	}
	build := func(keep []int, set map[int]value) *fixtures.Batch {
		b, _ := r.build(keeping(keep, set)) // an edit's build cannot fail
		return b
	}
	r.setPhase(PhaseElements, len(sp.units))
	// Where no value sets the culprits apart from the other samples (no
	// outlier), the cause is most often no value at all (a length, a
	// relation of keys held elsewhere): the batch with every unit dropped
	// is asked first too, and when it fails the search ends in that one
	// replay.
	outliers := r.outliers(sp, rows)
	if precheck || len(outliers) == 0 {
		o, err := r.askTrials(ctx, keeping([]int{}, nil))
		if err != nil || ctx.Err() != nil {
			return elementResult{partial: ctx.Err() != nil}, err
		}
		if o == shrink.Fail && precheck {
			return elementResult{contentFree: true}, nil
		}
		if o == shrink.Fail {
			return elementResult{reduced: build([]int{}, nil), reducedCand: keeping([]int{}, nil), contentFree: true}, nil
		}
	}
	// Integer tensors hold the indices, labels, keys and lengths that
	// most failures are about: when the batch has other elements too,
	// keeping the integers alone is asked first, and when that fails the
	// search runs among them only (one replay more when it does not).
	var space []int // the units searched, by position; nil for all
	// The elements whose values no other sample of the batch holds (past
	// the tensor's range elsewhere, or not finite) are most often the
	// cause: keeping them alone is asked first, and when that fails the
	// search runs among them only. One culprit element out of range is
	// then found in one replay, not in log2 of the sample's elements.
	// Asked where it saves more than the replay it costs: the outliers
	// are at most a quarter of the elements.
	if out := outliers; len(out) > 0 && 4*len(out) <= len(sp.units) {
		// The integer outliers first, where there are floats too (an
		// image's extreme pixel beside a label past the classes).
		var tries [][]int
		if io := intsOf(sp, out); len(io) > 0 && len(io) < len(out) {
			tries = append(tries, io)
		}
		for _, cand := range append(tries, out) {
			o, err := r.askTrials(ctx, keeping(cand, nil))
			if err != nil || ctx.Err() != nil {
				return elementResult{partial: ctx.Err() != nil}, err
			}
			if o == shrink.Fail {
				space = cand
				break
			}
		}
	}
	if ints := intUnits(sp); space == nil && len(ints) > 0 && len(ints) < len(sp.units) {
		o, err := r.askTrials(ctx, keeping(ints, nil))
		if err != nil || ctx.Err() != nil {
			return elementResult{partial: ctx.Err() != nil}, err
		}
		if o == shrink.Fail {
			space = ints
		}
	}
	units := func(pos []int) []int {
		if space == nil || pos == nil {
			return pos
		}
		out := make([]int, len(pos))
		for i, p := range pos {
			out[i] = space[p]
		}
		return out
	}
	n := len(sp.units)
	if space != nil {
		n = len(space)
	}
	var keep []int
	// A lone outlier that fails kept alone is the element: whether it
	// fails dropped too (the batch content-free) is told by its boundary,
	// which asks its neutral value when no other value passes (lone).
	lone := space != nil && n == 1
	if lone {
		keep = space
	} else {
		opts := r.shrinkOptions()
		opts.StopAfterFirst = true
		opts.Strategy = shrink.Auto
		// Every unit of the space kept failed: sub itself (in the sample
		// phase), or the integers or outliers alone (just now).
		opts.Seed = []shrink.CacheEntry{{Candidate: []shrink.Range{{Lo: 0, Hi: n}}, Outcome: shrink.Fail}}
		res, err := r.search(ctx, n, func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
			return r.ask(ctx, keeping(units(cand.Units()), nil), cand.Trial())
		}, opts)
		if ctx.Err() != nil || res.Incomplete {
			out := elementResult{partial: true}
			if res.Partial != nil {
				out.reduced = build(units(res.Partial), nil)
			}
			return out, nil
		}
		if err != nil {
			return elementResult{}, fmt.Errorf("shrink elements: %w", err)
		}
		if len(res.Culprits) == 0 {
			return elementResult{}, nil
		}
		keep = units(res.Culprits[0])
	}
	if keep == nil {
		keep = []int{}
	}
	out := elementResult{reduced: build(keep, nil), reducedCand: keeping(keep, nil), contentFree: len(keep) == 0}

	r.setPhase(PhaseBoundary, len(keep))
	elem := func(u int) Element {
		un := sp.units[u]
		e := sub.Tensors[un.tensor]
		bd := *e.BatchDim
		idx := slices.Clone(un.index)
		idx[bd] = orig(idx[bd])
		return Element{row: un.index[bd], dtype: e.DType, Element: regress.Element{Tensor: e.Name, Index: idx, MinimalIndex: un.index}}
	}
	with := func(set map[int]value) *candidate { return keeping(keep, set) }
	ask := func(ctx context.Context, set map[int]value) (shrink.Outcome, error) {
		return r.askTrials(ctx, with(set))
	}

	// A relation first: its elements have no boundary of their own.
	rel, broken, err := r.relation(ctx, sp, elem, keep, with)
	if err != nil || ctx.Err() != nil {
		out.partial = ctx.Err() != nil
		return out, err
	}
	passing, otherEnd := map[int]value{}, map[int]value{}
	for u, v := range broken {
		passing[u], otherEnd[u] = v, v
	}
	if rel != nil {
		out.relation = &rel.Relation
		for _, u := range rel.units {
			fe := elem(u)
			fe.Value = valueFloat(sp, u, sp.original(u))
			fe.Rule = rel.Text
			out.elements = append(out.elements, fe)
		}
	}
	for _, u := range keep {
		if rel != nil && slices.Contains(rel.units, u) {
			continue
		}
		fe := elem(u)
		un := sp.units[u]
		r.setPhase(PhaseBoundary, len(keep)) // after another element's range
		one := func(ctx context.Context, v value, trial int) (shrink.Outcome, error) {
			return r.ask(ctx, with(map[int]value{u: v}), trial)
		}
		var b bounds
		if un.float {
			b, err = r.floatBoundary(ctx, sub.Tensors[un.tensor].Tensor, un.storage, un.neutral, &fe.Element, one)
		} else {
			elsewhere := func() (int64, bool) { return r.largestElsewhere(un.tensor, rows) }
			b, err = r.intBoundary(ctx, sub.Tensors[un.tensor].Tensor.LoadInt(un.storage), un.neutral.i, elsewhere, &fe.Element, one)
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
			b = bounds{}
		}
		if b.passing != nil {
			passing[u] = *b.passing
			otherEnd[u] = *b.passing
			if b.other != nil {
				otherEnd[u] = *b.other
			}
		}
		out.elements = append(out.elements, fe)
	}
	if lone && !hasPassing(passing, keep) {
		// No value of the lone outlier was seen to pass: the search did
		// not ask whether it matters at all. When the sample fails with it
		// dropped as well, no element is the cause.
		o, err := r.askTrials(ctx, keeping([]int{}, nil))
		if err != nil || ctx.Err() != nil {
			out.partial = ctx.Err() != nil
			return out, err
		}
		if o == shrink.Fail {
			return elementResult{reduced: build([]int{}, nil), reducedCand: keeping([]int{}, nil), contentFree: true}, nil
		}
	}
	// A boundary batch needs a passing value for every element, and a
	// relation broken.
	for _, u := range keep {
		if _, ok := passing[u]; !ok && !slices.Contains(relUnits(rel), u) {
			return out, nil
		}
	}
	if len(keep) == 0 || (rel != nil && len(broken) == 0) {
		return out, nil
	}
	// The boundary batch: each element at its passing value at once, which
	// no single search replayed (unless there is one element).
	if o, err := ask(ctx, passing); err != nil {
		return out, err
	} else if o == shrink.Pass {
		out.boundary = build(keep, passing)
	} else {
		r.logf("boundary: the minimal batch with every element at its passing value does not pass (%v); no boundary batch written", o)
		return out, nil
	}
	if !maps2Equal(passing, otherEnd, sp) {
		r.setPhase(PhaseRange, len(keep))
		if o, err := ask(ctx, otherEnd); err != nil {
			return out, err
		} else if o == shrink.Pass {
			out.otherEnd = build(keep, otherEnd)
		}
	}
	return out, nil
}

func relUnits(rel *relationFound) []int {
	if rel == nil {
		return nil
	}
	return rel.units
}

// maps2Equal reports whether a and b set the same units to the same values.
func maps2Equal(a, b map[int]value, sp *unitSpace) bool {
	if len(a) != len(b) {
		return false
	}
	for u, v := range a {
		w, ok := b[u]
		if !ok || !sp.same(u, v, w) {
			return false
		}
	}
	return true
}

// valueFloat is v as a float, for the record.
func valueFloat(sp *unitSpace, u int, v value) float64 {
	if sp.units[u].float {
		return v.f
	}
	return float64(v.i)
}

// intUnits are the units of integer tensors, in order.
func intUnits(sp *unitSpace) []int {
	all := make([]int, len(sp.units))
	for u := range all {
		all[u] = u
	}
	return intsOf(sp, all)
}

// outliers are the units of sp whose value lies outside the range their
// tensor holds in the samples seen passing (reference, without a
// fallback: a value a failing sample holds is no evidence), or is not
// finite: the values that set the culprits apart. A tensor too large to
// read whole or without such samples has no outliers but its non-finite
// values.
func (r *run) outliers(sp *unitSpace, rows []int64) []int {
	ref := r.reference(rows, false)
	type spanned struct {
		lo, hi value
		ok     bool
	}
	spans := map[int]spanned{}
	var out []int
	for u, un := range sp.units {
		v := sp.original(u)
		if un.float && (math.IsNaN(v.f) || math.IsInf(v.f, 0)) {
			out = append(out, u)
			continue
		}
		s, done := spans[un.tensor]
		if !done {
			s.lo, s.hi, s.ok = r.span(un.tensor, ref)
			spans[un.tensor] = s
		}
		switch {
		case !s.ok:
		case un.float && (v.f < s.lo.f || v.f > s.hi.f):
			out = append(out, u)
		case !un.float && (v.i < s.lo.i || v.i > s.hi.i):
			out = append(out, u)
		}
	}
	return out
}

// reference is the samples whose values count as seen passing for the
// culprits rows: those outside rows seen in a batch of whole samples that
// passed (run.passed); where none passed and anyElsewhere, every sample
// outside rows.
func (r *run) reference(rows []int64, anyElsewhere bool) func(x int64) bool {
	out := map[int64]bool{}
	r.mu.Lock()
	for x := range r.batch.Samples {
		if r.passed[x] || (anyElsewhere && len(r.passed) == 0) {
			out[x] = true
		}
	}
	r.mu.Unlock()
	for _, x := range rows {
		delete(out, x)
	}
	return func(x int64) bool { return out[x] }
}

// span is the range of the values tensor ti holds in the samples ref
// keeps, finite ones for a float; ok false when it has no batch axis, is
// too large to read whole (past 1<<24 elements) or ref keeps none.
func (r *run) span(ti int, ref func(x int64) bool) (lo, hi value, ok bool) {
	e := r.batch.Tensors[ti]
	if e.BatchDim == nil || e.Numel() > 1<<24 {
		return lo, hi, false
	}
	bd, isFloat := *e.BatchDim, e.DType.IsFloat()
	e.Each(func(idx []int64, st int64) {
		if !ref(idx[bd]) {
			return
		}
		var v value
		if isFloat {
			if v.f = e.Tensor.LoadFloat(st); math.IsNaN(v.f) || math.IsInf(v.f, 0) {
				return
			}
		} else {
			v.i = e.Tensor.LoadInt(st)
		}
		switch {
		case !ok:
			lo, hi, ok = v, v, true
		case isFloat:
			lo.f, hi.f = min(lo.f, v.f), max(hi.f, v.f)
		default:
			lo.i, hi.i = min(lo.i, v.i), max(hi.i, v.i)
		}
	})
	return lo, hi, ok
}

// sharedUnits are the units of sp whose value every sample of the
// recorded batch holds at the same place.
func (r *run) sharedUnits(sp *unitSpace) []unit {
	var out []unit
	for u, un := range sp.units {
		e := r.batch.Tensors[un.tensor]
		bd := *e.BatchDim
		idx := slices.Clone(un.index)
		want := sp.original(u)
		same := true
		for x := int64(0); x < r.batch.Samples && same; x++ {
			idx[bd] = x
			at, err := e.Tensor.StorageIndex(idx)
			if err != nil {
				same = false
				break
			}
			if un.float {
				same = e.Tensor.LoadFloat(at) == want.f
			} else {
				same = e.Tensor.LoadInt(at) == want.i
			}
		}
		if same {
			out = append(out, un)
		}
	}
	return out
}

// hasPassing reports whether every unit of keep has a passing value.
func hasPassing(passing map[int]value, keep []int) bool {
	for _, u := range keep {
		if _, ok := passing[u]; !ok {
			return false
		}
	}
	return true
}

// intsOf are the units of us that are integers.
func intsOf(sp *unitSpace, us []int) []int {
	var out []int
	for _, u := range us {
		if !sp.units[u].float {
			out = append(out, u)
		}
	}
	return out
}
