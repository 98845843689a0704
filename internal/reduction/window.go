package reduction

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/kernels"
	"reduce/shrink"
)

// A batch recorded with a window of earlier steps (fixtures.Window) is
// replayed from the state at the window's start, each kept step run in
// order with its optimizer update, then the failing step's batch. The
// reduction asks first whether that batch alone fails from the start
// state: then the cause is in it, and the window is dropped from every
// candidate (run.steps) for the usual reduction. Else the cause lies in
// the earlier steps: the whole steps are searched first (windowSteps),
// then the samples of those kept (windowSamples), the failing step's
// batch kept whole as the witness; then the culprit samples' elements
// that stand out from the window's other samples, set to typical values
// in one replay (windowElements).

// windowed reports whether the recorded batch has earlier steps with
// samples to search.
func (r *run) windowed() bool {
	return r.full.Window != nil && r.full.Window.Held() > 0
}

// noSteps keeps no sample of any earlier step.
func (r *run) noSteps() [][]int64 {
	out := make([][]int64, len(r.full.Window.Steps))
	for k := range out {
		out[k] = []int64{}
	}
	return out
}

// withSteps is c with the window's rows every candidate keeps unless it
// says its own (run.steps): the one place a candidate gets them, before
// it is keyed, replayed or built.
func (r *run) withSteps(c *candidate) *candidate {
	if r.steps == nil || c.Steps != nil {
		return c
	}
	d := *c
	d.Steps = r.steps
	return &d
}

// stepsCandidate keeps the samples rows[k] of each earlier step k and the
// failing step's batch whole.
func stepsCandidate(rows [][]int64, size int) *candidate {
	return &candidate{View: fixtures.View{Steps: rows}, size: size}
}

// windowMode reduces over the recorded window. It returns no finding and
// ok false when the failing step's batch alone fails from the window's
// start (run.steps then drops the window from every candidate).
func (r *run) windowMode(ctx context.Context) ([]Finding, bool, error) {
	w := r.full.Window
	r.setPhase(PhaseWindow, len(w.Steps))
	none := r.noSteps()
	alone := stepsCandidate(none, int(r.batch.Samples))
	out, err := r.askTrials(ctx, alone)
	if err != nil || ctx.Err() != nil {
		return nil, false, err
	}
	start, earlier := w.Start, w.Held()
	if out == shrink.Fail {
		r.steps = none
		r.windowNote = fmt.Sprintf("the failing step's batch alone, replayed from the state at the window's start (step %d), fails: the cause is in that batch, not in the %s recorded before it",
			start, regress.Count(int64(earlier), "step"))
		r.logf("window: %s", r.windowNote)
		return nil, false, nil
	}
	r.mode, r.modeReason = ModeWindow, fmt.Sprintf("the failing step's batch passes when replayed from the state at the window's start (step %d) without the %s recorded before it: the cause lies in them",
		start, regress.Count(int64(earlier), "step"))
	r.logf("window: %s", r.modeReason)

	steps, err := r.windowSteps(ctx)
	if err != nil || steps == nil {
		return nil, true, err
	}
	rows, err := r.windowSamples(ctx, steps)
	if err != nil || rows == nil {
		return nil, true, err
	}
	cause := &regress.WindowCause{Failed: w.Failed, Start: start}
	elements, boundary, err := r.windowElements(ctx, rows)
	if err != nil || ctx.Err() != nil {
		return nil, true, err
	}
	for k, kept := range rows {
		if len(kept) == 0 {
			continue
		}
		s := w.Steps[k]
		ws := regress.WindowSamples{Index: s.Index, Before: w.Before(k), IDs: []string{}, Elements: elements[k]}
		for j, x := range kept {
			ws.Rows = append(ws.Rows, int(x))
			if s.SampleIDs != nil {
				ws.IDs = append(ws.IDs, s.SampleIDs[x])
			}
			if countRows(rows) > 1 && r.otherWithout(rows, k, j) {
				ws.Companions = append(ws.Companions, int(x))
			}
		}
		cause.Steps = append(cause.Steps, ws)
	}
	minimal := stepsCandidate(rows, countRows(rows))
	all := make([]int, r.batch.Samples)
	for i := range all {
		all[i] = i
	}
	f := Finding{Indices: all, IDs: r.idsOf(all), Window: cause}
	if f.Batch, err = r.build(minimal); err != nil {
		return nil, true, err
	}
	// The failing step's batch without the culprits passed, and with the
	// elements that stand out set to typical values: the fixture's
	// neighbour and boundary.
	if f.Without, err = r.build(alone); err != nil {
		return nil, true, err
	}
	if boundary != nil {
		if f.Boundary, err = r.build(boundary); err != nil {
			return nil, true, err
		}
	}
	r.emit(&CulpritFound{Event: "culprit", Indices: all, IDs: f.IDs})
	return []Finding{f}, true, nil
}

// otherWithout says whether the culprit rows without sample j of step k
// were answered another failure (the search's check that the set is
// minimal asked it): the sample is then there only for its step to run.
func (r *run) otherWithout(rows [][]int64, k, j int) bool {
	without := slices.Clone(rows)
	without[k] = slices.Delete(slices.Clone(rows[k]), j, j+1)
	for i, kept := range without {
		if int64(len(kept)) == r.full.Window.Steps[i].Samples {
			without[i] = nil // a whole step, as the searches key it
		}
	}
	key := stepsCandidate(without, 0).key(r.batch.Samples)
	sig, _, ok := r.journal.answerAt(key, 0)
	return ok && r.judge.Rule(sig).Outcome == signature.OtherFailure
}

// errNoSet: a search of the window found no set that fails.
var errNoSet = errors.New("no set of them fails (the failure is flaky: a higher --trials helps)")

// firstSet is the first culprit set among n units, all of which are known
// to fail (the search's seed): nil, and no error, when ctx ended; an
// error naming the window's what when the search found none.
func (r *run) firstSet(ctx context.Context, n int, oracle shrink.Oracle, what string) ([]int, error) {
	opts := r.shrinkOptions()
	opts.StopAfterFirst, opts.Halve = true, true
	opts.Seed = []shrink.CacheEntry{{Candidate: []shrink.Range{{Lo: 0, Hi: n}}, Outcome: shrink.Fail}}
	res, err := r.search(ctx, n, oracle, opts)
	switch {
	case ctx.Err() != nil:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("shrink the window's %s: %w", what, err)
	case len(res.Culprits) == 0 || res.Incomplete:
		return nil, fmt.Errorf("shrink the window's %s: %w", what, errNoSet)
	}
	return res.Culprits[0], nil
}

// countRows counts the samples of rows.
func countRows(rows [][]int64) int {
	n := 0
	for _, x := range rows {
		n += len(x)
	}
	return n
}

// windowSteps finds the fewest earlier steps whose samples, all of them,
// keep the failing step failing: positions in the window, in order, or
// nil when no set was found.
func (r *run) windowSteps(ctx context.Context) ([]int, error) {
	w := r.full.Window
	var withSamples []int
	for k, s := range w.Steps {
		if s.Samples > 0 {
			withSamples = append(withSamples, k)
		}
	}
	oracle := func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		rows := r.noSteps()
		n := 0
		for _, u := range cand.Units() {
			k := withSamples[u]
			rows[k], n = nil, n+int(w.Steps[k].Samples)
		}
		return r.ask(ctx, stepsCandidate(rows, n), cand.Trial())
	}
	// The confirmation showed that the whole window fails.
	set, err := r.firstSet(ctx, len(withSamples), oracle, "steps")
	if set == nil {
		return nil, err
	}
	out := make([]int, len(set))
	for i, u := range set {
		out[i] = withSamples[u]
	}
	return out, nil
}

// windowSamples finds the fewest samples of the kept steps that keep the
// failing step failing: the rows each step keeps (empty for the others),
// or nil when no set was found.
func (r *run) windowSamples(ctx context.Context, steps []int) ([][]int64, error) {
	w := r.full.Window
	type unitOf struct {
		step int
		row  int64
	}
	var units []unitOf
	for _, k := range steps {
		for i := range w.Steps[k].Samples {
			units = append(units, unitOf{k, i})
		}
	}
	rowsOfUnits := func(us []int) [][]int64 {
		rows := r.noSteps()
		for _, u := range us {
			rows[units[u].step] = append(rows[units[u].step], units[u].row)
		}
		for _, k := range steps {
			if int64(len(rows[k])) == w.Steps[k].Samples {
				rows[k] = nil // the whole step: the steps search's own candidate
			}
		}
		return rows
	}
	r.setPhase(PhaseWindowSamples, len(units))
	oracle := func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		us := cand.Units()
		return r.ask(ctx, stepsCandidate(rowsOfUnits(us), len(us)), cand.Trial())
	}
	set, err := r.firstSet(ctx, len(units), oracle, "samples")
	if set == nil {
		return nil, err
	}
	rows := r.noSteps()
	for _, u := range set {
		rows[units[u].step] = append(rows[units[u].step], units[u].row)
	}
	return rows, nil
}

// windowElements names the culprit samples' elements that stand out: a
// non-finite value, or one farther from the window's other samples'
// values at the same place than their whole spread. Set all together to
// the middle of the others' values, in one replay, the failing step must
// pass, else none is named; then the fewest of them that, kept as
// recorded with the others set, still fail are searched as the samples
// are. It returns them by step, and the candidate with all of them set
// (the fixture's boundary batch).
func (r *run) windowElements(ctx context.Context, rows [][]int64) (map[int][]regress.Element, *candidate, error) {
	type outlier struct {
		step, tensor int
		at           int64 // in the candidate's batch of the kept rows
		dt           kernels.DType
		typical      float64
		el           regress.Element
	}
	var all []outlier
	for k, kept := range rows {
		if len(kept) == 0 {
			continue
		}
		paths := r.full.Paths(k)
		for _, path := range slices.Sorted(maps.Keys(paths)) {
			ti := paths[path]
			e := r.full.Tensors[ti]
			if e.BatchDim == nil || e.Pad != nil || e.DType == kernels.Bool {
				continue
			}
			others := r.windowPeers(path, k, kept, e)
			if len(others) < 2 {
				continue
			}
			for j, row := range kept {
				r.outlying(e, row, others, func(idx []int64, v, lo, hi float64) {
					// The middle of the others' range, one decimal, as the
					// dtype holds it.
					typical := math.Round((lo+(hi-lo)/2)*10)/10 + 0 // + 0: never -0
					if e.DType.IsFloat() {
						typical = e.DType.Round(typical)
					} else {
						typical = math.Round(typical)
					}
					at := slices.Clone(idx)
					at[*e.BatchDim] = int64(j)
					shape := slices.Clone(e.Shape)
					shape[*e.BatchDim] = int64(len(kept))
					el := regress.Element{Tensor: path, Index: idx, MinimalIndex: at, Value: v, Passing: &typical,
						Rule: fmt.Sprintf("the window's other samples hold %s to %s here", fmtValue(lo, e.DType), fmtValue(hi, e.DType))}
					switch {
					case math.IsNaN(v):
						el.Value, el.ValueText = 0, "NaN"
					case math.IsInf(v, 1):
						el.Value, el.ValueText = 0, "+Inf"
					case math.IsInf(v, -1):
						el.Value, el.ValueText = 0, "-Inf"
					}
					all = append(all, outlier{step: k, tensor: ti, at: linear(at, shape), dt: e.DType, typical: typical, el: el})
				})
			}
		}
	}
	if len(all) == 0 || len(all) > maxWindowElements {
		return nil, nil, nil
	}
	// keeping is the minimal candidate with the outliers not kept set to
	// their typical values.
	keeping := func(kept []int) *candidate {
		c := stepsCandidate(rows, countRows(rows))
		sets := map[int]*fixtures.ElementSet{}
		for u, o := range all {
			if slices.Contains(kept, u) {
				continue
			}
			set := sets[o.tensor]
			if set == nil {
				set = &fixtures.ElementSet{Tensor: o.tensor}
				sets[o.tensor] = set
			}
			set.AddValue(o.at, o.dt, o.dt.IsFloat(), int64(o.typical), o.typical)
		}
		for _, ti := range slices.Sorted(maps.Keys(sets)) {
			c.Set = append(c.Set, *sets[ti])
		}
		return c
	}
	r.setPhase(PhaseElements, len(all))
	boundary := keeping(nil)
	out, err := r.askTrials(ctx, boundary)
	if err != nil || out != shrink.Pass {
		return nil, nil, err
	}
	kept := []int{0}
	if len(all) > 1 {
		oracle := func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
			return r.ask(ctx, keeping(cand.Units()), cand.Trial())
		}
		set, err := r.firstSet(ctx, len(all), oracle, "elements")
		if set == nil && errors.Is(err, errNoSet) {
			return nil, nil, nil // no element is named: the sample is, whole
		}
		if set == nil {
			return nil, nil, err
		}
		kept = set
	}
	found := map[int][]regress.Element{}
	for _, u := range kept {
		found[all[u].step] = append(found[all[u].step], all[u].el)
	}
	return found, boundary, nil
}

// maxWindowElements bounds the elements windowElements names: more stand
// out than a person reads, and the sample is named whole.
const maxWindowElements = 16

// windowPeers are the tensors at path of the window's samples other than
// the culprits (of every step, the failing one's included), as
// [tensor, its samples] pairs whose per-sample shape is e's.
func (r *run) windowPeers(path string, step int, culprits []int64, e *fixtures.Entry) []peer {
	var out []peer
	same := func(o *fixtures.Entry) bool {
		if o == nil || o.BatchDim == nil || *o.BatchDim != *e.BatchDim || len(o.Shape) != len(e.Shape) || o.DType != e.DType {
			return false
		}
		for d := range o.Shape {
			if d != *e.BatchDim && o.Shape[d] != e.Shape[d] {
				return false
			}
		}
		return true
	}
	at := func(k int) *fixtures.Entry {
		if i, ok := r.full.Paths(k)[path]; ok {
			return r.full.Tensors[i]
		}
		return nil
	}
	if o := at(-1); same(o) {
		out = append(out, peer{o, nil})
	}
	for k := range r.full.Window.Steps {
		o := at(k)
		if !same(o) {
			continue
		}
		p := peer{e: o}
		if k == step {
			p.skip = culprits
		}
		out = append(out, p)
	}
	return out
}

// peer is a tensor of the window whose samples, but those skipped, hold
// typical values.
type peer struct {
	e    *fixtures.Entry
	skip []int64
}

// outlying calls fn for each element of sample row of e that stands out
// from the peers' values at the same place, with its index in e, its
// value, and the peers' range.
func (r *run) outlying(e *fixtures.Entry, row int64, peers []peer, fn func(idx []int64, v, lo, hi float64)) {
	bd := *e.BatchDim
	e.Each(func(idx []int64, s int64) {
		if idx[bd] != row {
			return
		}
		v := e.LoadFloat(s)
		lo, hi, n := math.Inf(1), math.Inf(-1), 0
		at := slices.Clone(idx)
		for _, p := range peers {
			for i := range p.e.Shape[bd] {
				if slices.Contains(p.skip, i) {
					continue
				}
				at[bd] = i
				ps, err := p.e.StorageIndex(at)
				if err != nil {
					continue
				}
				x := p.e.LoadFloat(ps)
				if math.IsNaN(x) || math.IsInf(x, 0) {
					continue
				}
				lo, hi, n = min(lo, x), max(hi, x), n+1
			}
		}
		if n < 2 {
			return
		}
		spread := max(hi-lo, 1e-12*max(math.Abs(lo), math.Abs(hi)), math.SmallestNonzeroFloat64)
		if math.IsNaN(v) || math.IsInf(v, 0) || v < lo-spread || v > hi+spread {
			fn(slices.Clone(idx), v, lo, hi)
		}
	})
}

// fewIDs lists at most three ids, and how many more there are.
func fewIDs(ids []string) string {
	if len(ids) <= 3 {
		return strings.Join(ids, " ")
	}
	return fmt.Sprintf("%s … (%d more)", strings.Join(ids[:3], " "), len(ids)-3)
}
