package reduction

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"reduce/internal/regress"
	"reduce/kernels"
	"reduce/shrink"
)

// relationFound is a relation between triggering units, with the units.
type relationFound struct {
	regress.Relation
	units []int
}

// relation tells whether triggering units of several samples fail by a
// relation between their values rather than each by its own: today
// equality (duplicate keys or ids, two writes to one position). Units of
// one tensor in different samples that hold one value are a relation of
// equality when setting any one of them to a value found nowhere in the
// batch passes, and setting all of them to one such value fails. It
// returns the relation and the batch that breaks it (the first unit at a
// fresh value: replayed, passed), or nil when there is none.
func (r *run) relation(ctx context.Context, sp *unitSpace, elem func(int) Element, keep []int,
	with func(map[int]value) *candidate) (*relationFound, map[int]value, error) {
	group := equalGroup(sp, keep)
	if group == nil {
		return nil, nil, nil
	}
	ti := sp.units[group[0]].tensor
	fresh, ok := r.freshValues(ti, sp.units[group[0]].float, 2)
	if !ok {
		return nil, nil, nil
	}
	if holds, err := equality(ctx, r, group, fresh[0], fresh[1], with); err != nil || !holds {
		return nil, nil, err
	}
	var names []string
	rel := &relationFound{units: group, Relation: regress.Relation{Kind: "equal"}}
	for _, u := range group {
		e := elem(u)
		rel.Elements = append(rel.Elements, regress.ElementRef{Tensor: e.Tensor, Index: e.Index})
		names = append(names, e.Tensor+indexText(e.Index))
	}
	rel.Text = strings.Join(names, " == ")
	r.logf("relation: %s (any one of them changed to a value found nowhere in the batch passes; all set to one such value fail)", rel.Text)
	return rel, map[int]value{group[0]: fresh[0]}, nil
}

// equalGroup is the first set of kept units of one tensor, in different
// samples, that hold the same value; nil when there is none.
func equalGroup(sp *unitSpace, keep []int) []int {
	type key struct {
		tensor int
		v      value
	}
	groups := map[key][]int{}
	var order []key
	for _, u := range keep {
		un := sp.units[u]
		v := sp.original(u)
		if un.float && math.IsNaN(v.f) {
			continue // NaN equals nothing
		}
		k := key{un.tensor, v}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], u)
	}
	for _, k := range order {
		g := groups[k]
		bd := *sp.sub.Tensors[k.tensor].BatchDim
		rows := map[int64]bool{}
		for _, u := range g {
			rows[sp.units[u].index[bd]] = true
		}
		if len(rows) > 1 {
			return g
		}
	}
	return nil
}

// freshValues are n distinct values that tensor ti (of the recorded batch)
// can hold and holds nowhere: for integers, gaps between its smallest and
// largest values first, then above the largest, then below the smallest;
// for floats, above and below. ok is false when the dtype has no room (a
// full uint8 tensor).
func (r *run) freshValues(ti int, isFloat bool, n int) ([]value, bool) {
	t := r.batch.Tensors[ti].Tensor
	seen := map[value]bool{}
	var hiI, loI int64 = math.MinInt64, math.MaxInt64
	hiF, loF := math.Inf(-1), math.Inf(1)
	t.Each(func(_ []int64, e int64) {
		if isFloat {
			f := t.LoadFloat(e)
			seen[value{f: f}] = true
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				hiF, loF = max(hiF, f), min(loF, f)
			}
			return
		}
		i := t.LoadInt(e)
		seen[value{i: i}] = true
		hiI, loI = max(hiI, i), min(loI, i)
	})
	probe := kernels.MustNew(t.DType, 1)
	holds := func(v value) bool {
		if isFloat {
			probe.StoreFloat(0, v.f)
			return probe.LoadFloat(0) == v.f
		}
		probe.StoreInt(0, v.i)
		return probe.LoadInt(0) == v.i
	}
	var out []value
	if !isFloat && hiI >= loI {
		// Inside the values' range first: an index-like key above every
		// other may be out of range, a failure of its own.
		for v, k := loI+1, 0; v < hiI && len(out) < n && k < 1<<16; v, k = v+1, k+1 {
			if x := (value{i: v}); !seen[x] {
				seen[x] = true
				out = append(out, x)
			}
		}
	}
	for _, dir := range []int64{1, -1} {
		for k := int64(1); k <= int64(n)+8 && len(out) < n; k++ {
			var v value
			switch {
			case isFloat && dir > 0:
				v = value{f: math.Max(hiF, 0) + float64(k)}
			case isFloat:
				v = value{f: math.Min(loF, 0) - float64(k)}
			case dir > 0 && hiI < math.MaxInt64-k:
				v = value{i: hiI + k}
			case dir < 0 && loI > math.MinInt64+k:
				v = value{i: loI - k}
			default:
				continue
			}
			if !seen[v] && holds(v) {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out, len(out) == n
}

// valueRelation looks, for a finding that fails whatever its tensors'
// values (base describes its batch), for a relation of equality between
// the per-sample Python values of its samples (keys or ids kept beside
// the tensors, which the element phase does not edit): as relation does
// for elements, any one of the equal values changed to a value found
// nowhere in the batch must pass and all of them set to one such value
// must fail, each replayed. On success it sets the finding's relation and
// its boundary batch (the first value changed).
func (r *run) valueRelation(ctx context.Context, f *Finding, base *candidate) error {
	for _, path := range r.batch.SampleValues() {
		leaf := r.batch.Structure.SampleLeaf(path)
		if leaf == nil {
			continue
		}
		groups := map[string][]int{}
		var order []string
		for k, i := range f.Indices {
			v := string(leaf.Values[i])
			if groups[v] == nil {
				order = append(order, v)
			}
			groups[v] = append(groups[v], k)
		}
		var group []int
		for _, v := range order {
			if len(groups[v]) > 1 {
				group = groups[v]
				break
			}
		}
		if group == nil {
			continue
		}
		fresh := freshJSON(leaf.Values, 2)
		if fresh == nil {
			continue
		}
		with := func(set map[int]json.RawMessage) *candidate {
			c := base.withValues(path, set)
			c.size = len(f.Indices)
			return c
		}
		if holds, err := equality(ctx, r, group, fresh[0], fresh[1], with); err != nil {
			return err
		} else if !holds {
			continue
		}
		rel := &regress.Relation{Kind: "equal"}
		var names []string
		for _, k := range group {
			rel.Elements = append(rel.Elements, regress.ElementRef{Tensor: path, Index: []int64{int64(f.Indices[k])}})
			names = append(names, fmt.Sprintf("%s[%d]", path, f.Indices[k]))
		}
		rel.Text = strings.Join(names, " == ")
		b, err := r.build(with(map[int]json.RawMessage{group[0]: fresh[0]}))
		if err != nil {
			return err
		}
		f.Relation, f.Boundary = rel, b
		r.logf("relation: %s (per-sample values; any one of them changed to a value found nowhere in the batch passes; all set to one such value fail)", rel.Text)
		return nil
	}
	return nil
}

// freshJSON are n JSON scalars of the kind values hold (strings, or
// numbers) that none of them is; nil for other kinds (booleans, mixed).
func freshJSON(values []json.RawMessage, n int) []json.RawMessage {
	seen := map[string]bool{}
	strs, nums := 0, 0
	hi := math.Inf(-1)
	for _, v := range values {
		seen[string(v)] = true
		var s string
		var f float64
		switch {
		case json.Unmarshal(v, &s) == nil:
			strs++
		case json.Unmarshal(v, &f) == nil:
			nums++
			hi = max(hi, f)
		}
	}
	var out []json.RawMessage
	for k := 1; len(out) < n && k < n+len(values)+2; k++ {
		var v []byte
		switch {
		case strs == len(values):
			v, _ = json.Marshal(fmt.Sprintf("reduce-fresh-%d", k))
		case nums == len(values) && hi < 1<<52:
			v = []byte(strconv.FormatInt(int64(math.Floor(hi))+int64(k), 10))
		default:
			return nil
		}
		if !seen[string(v)] {
			seen[string(v)] = true
			out = append(out, v)
		}
	}
	if len(out) < n {
		return nil
	}
	return out
}

// equality replays the test of a relation of equality between the
// members of group (positions that one edit sets): each one alone set to
// fresh0, a value found nowhere in the batch, must pass, and all of them
// set to fresh1, another such value, must fail. with builds the candidate
// of an edit. It stops at the first answer that rules the relation out.
func equality[V any](ctx context.Context, r *run, group []int, fresh0, fresh1 V, with func(map[int]V) *candidate) (bool, error) {
	r.setPhase(PhaseRelation, len(group))
	for _, k := range group {
		if o, err := r.askTrials(ctx, with(map[int]V{k: fresh0})); err != nil || o != shrink.Pass {
			return false, err
		}
	}
	all := map[int]V{}
	for _, k := range group {
		all[k] = fresh1
	}
	o, err := r.askTrials(ctx, with(all))
	return err == nil && o == shrink.Fail, err
}
