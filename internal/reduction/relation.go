package reduction

import (
	"context"
	"fmt"
	"math"
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
func (r *run) relation(ctx context.Context, sp *unitSpace, keep []int, elem func(int) Element,
	ask func(context.Context, map[int]value) (shrink.Outcome, error)) (*relationFound, map[int]value, error) {
	group := equalGroup(sp, keep)
	if group == nil {
		return nil, nil, nil
	}
	ti := sp.units[group[0]].tensor
	fresh, ok := r.freshValues(ti, sp.units[group[0]].float, 2)
	if !ok {
		return nil, nil, nil
	}
	for _, u := range group {
		o, err := ask(ctx, map[int]value{u: fresh[0]})
		if err != nil || o != shrink.Pass {
			return nil, nil, err
		}
	}
	all := map[int]value{}
	for _, u := range group {
		all[u] = fresh[1]
	}
	o, err := ask(ctx, all)
	if err != nil || o != shrink.Fail {
		return nil, nil, err
	}
	var names []string
	rel := &relationFound{units: group, Relation: regress.Relation{Kind: "equal"}}
	for _, u := range group {
		e := elem(u)
		rel.Elements = append(rel.Elements, regress.ElementRef{Tensor: e.Tensor, Index: e.Index})
		names = append(names, fmt.Sprintf("%s%v", e.Tensor, e.Index))
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
// can hold and holds nowhere: above its largest value, else below its
// smallest. ok is false when the dtype has no room (a full uint8 tensor).
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
