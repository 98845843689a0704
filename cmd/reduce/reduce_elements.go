package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/x448/float16"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/kernels"
	"reduce/shrink"
)

// maxElementUnits bounds the element phase: past it the samples are
// reported without their elements.
const maxElementUnits = 1 << 22

// foundElement is a triggering element with where it lies in the batch
// that was searched.
type foundElement struct {
	regress.Element
	row int64 // its position along the batch axis of the searched batch
}

func (e foundElement) diagnosis() string {
	s := fmt.Sprintf("%s%v = %s triggers the failure", e.Tensor, e.Index, e.valueText())
	if e.Passing != nil {
		s += fmt.Sprintf("; %s passes", fmtValue(*e.Passing))
	}
	if e.Rule != "" {
		s += " (" + e.Rule + ")"
	}
	return s
}

func fmtValue(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func (e foundElement) valueText() string {
	if e.ValueText != "" {
		return e.ValueText
	}
	return fmtValue(e.Value)
}

// elementSearch says which elements the element phase searches: those of
// sub's batched tensors at the positions rows along the batch axis (all
// when nil); orig maps a position to the original batch's.
type elementSearch struct {
	sub  *fixtures.Batch
	rows []int64
	orig func(pos int64) int64
	key  string // names sub in journal keys
}

type elementResult struct {
	elements []foundElement
	reduced  *fixtures.Batch // sub with every other searched element neutralized
	boundary *fixtures.Batch // reduced with each triggering element at its passing value
	// contentFree: with every searched element neutralized it still fails.
	contentFree bool
	partial     bool
}

// element is one unit of the element phase.
type element struct {
	tensor  int
	storage int64
	index   []int64
	float   bool
}

// forced is a value put in an element: an integer or a float as its
// tensor's dtype holds.
type forced struct {
	i int64
	f float64
}

// elements finds, inside the kept samples, the elements that trigger the
// failure: the others are set to a benign value (the op's ignore_index for
// a target, else zero). Then for each it finds the nearest value that
// passes.
func (r *reduction) elements(ctx context.Context, es elementSearch) (elementResult, error) {
	sub := es.sub
	inRows := map[int64]bool{}
	for _, x := range es.rows {
		inRows[x] = true
	}
	var units []element
	benign := map[int]forced{}
	for ti, e := range sub.Tensors {
		if e.BatchDim == nil || e.DType == kernels.Bool || e.Layout().Has(kernels.LayoutExpanded) || e.Layout().Has(kernels.LayoutOverlapping) {
			continue
		}
		isFloat := e.DType.IsFloat()
		benign[ti] = forced{}
		if v, ok := intAttr(sub.Attrs, "ignore_index"); ok && e.Name == "target" && !isFloat {
			benign[ti] = forced{i: v}
		}
		bd := *e.BatchDim
		e.Each(func(idx []int64, s int64) {
			if es.rows != nil && !inRows[idx[bd]] {
				return
			}
			if len(units) <= maxElementUnits {
				units = append(units, element{tensor: ti, storage: s, index: append([]int64(nil), idx...), float: isFloat})
			}
		})
	}
	if len(units) == 0 || len(units) > maxElementUnits {
		return elementResult{}, nil
	}
	// elementsKey names the candidate that keeps the units keep.
	elementsKey := func(keep []int) string {
		return fmt.Sprintf("elements:%s:%s", es.key, rangesOf(keep))
	}
	build := func(keep []int, set map[int]forced) *fixtures.Batch {
		kept := make(map[int]bool, len(keep))
		for _, u := range keep {
			kept[u] = true
		}
		out := *sub
		out.Tensors = append([]*fixtures.Entry(nil), sub.Tensors...)
		clones := map[int]*kernels.Tensor{}
		for ui, u := range units {
			v, isSet := set[ui]
			if kept[ui] && !isSet {
				continue
			}
			t := clones[u.tensor]
			if t == nil {
				t = sub.Tensors[u.tensor].Tensor.Clone()
				clones[u.tensor] = t
				e := *sub.Tensors[u.tensor]
				e.Tensor = t
				out.Tensors[u.tensor] = &e
			}
			if !isSet {
				v = benign[u.tensor]
			}
			if u.float {
				t.StoreFloat(u.storage, v.f)
			} else {
				t.StoreInt(u.storage, v.i)
			}
		}
		return &out
	}
	r.setPhase("elements", len(units))
	opts := r.shrinkOptions()
	opts.StopAfterFirst = true
	opts.Strategy = shrink.Auto
	// Every element kept is sub itself, which failed in the sample phase.
	opts.Seed = []shrink.CacheEntry{{Candidate: []shrink.Range{{Lo: 0, Hi: len(units)}}, Outcome: shrink.Fail}}
	res, err := shrink.Run(ctx, len(units), func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		return r.ask(ctx, elementsKey(cand.Units()), cand.Len(), func() (*fixtures.Batch, error) { return build(cand.Units(), nil), nil })
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

	r.setPhase("boundary", len(keep))
	passing := map[int]forced{}
	for _, ui := range keep {
		u := units[ui]
		e := sub.Tensors[u.tensor]
		bd := *e.BatchDim
		idx := append([]int64(nil), u.index...)
		idx[bd] = es.orig(idx[bd])
		fe := foundElement{row: u.index[bd], Element: regress.Element{Tensor: e.Name, Index: idx, MinimalIndex: u.index}}
		orig := forced{i: e.Tensor.LoadInt(u.storage), f: e.Tensor.LoadFloat(u.storage)}
		try := func(ctx context.Context, v forced) (shrink.Outcome, error) {
			// Its own value and the benign one make candidates the element
			// phase has answered already.
			key := fmt.Sprintf("boundary:%s:%d=%d/%v", es.key, ui, v.i, v.f)
			switch {
			case u.float && v.f == orig.f, !u.float && v.i == orig.i:
				key = elementsKey(keep)
			case v == benign[u.tensor]:
				key = elementsKey(without(keep, ui))
			}
			return r.ask(ctx, key, len(keep), func() (*fixtures.Batch, error) {
				return build(keep, map[int]forced{ui: v}), nil
			})
		}
		var p *forced
		if u.float {
			p, err = r.floatBoundary(ctx, e.Tensor, u.storage, &fe, try)
		} else {
			p, err = r.intBoundary(ctx, e.Tensor.LoadInt(u.storage), benign[u.tensor].i, &fe, try)
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
			passing[ui] = *p
		}
		out.elements = append(out.elements, fe)
	}
	if len(passing) == len(keep) && len(keep) > 0 {
		out.boundary = build(keep, passing)
	}
	return out, nil
}

// intBoundary finds the value nearest to v that passes, searching toward
// zero (the first valid index of every op here), or toward the benign
// value when v is zero itself.
func (r *reduction) intBoundary(ctx context.Context, v, benign int64, fe *foundElement, try func(context.Context, forced) (shrink.Outcome, error)) (*forced, error) {
	fe.Value = float64(v)
	if v > 1<<53 || v < -(1<<53) {
		fe.ValueText = strconv.FormatInt(v, 10)
	}
	lo, hi := int64(0), v
	if v == 0 {
		lo = benign
	}
	if lo > hi {
		lo, hi = hi, lo
	}
	if lo == hi {
		return nil, nil
	}
	// The engine bisects ranges up to 2^62 wide: a sentinel such as
	// INT64_MAX is searched from 2^62 on, an end that must fail as well.
	const widest = 1 << 62
	if hi-lo > widest || hi-lo < 0 {
		if v > 0 {
			hi = lo + widest
		} else {
			lo = hi - widest
		}
	}
	br, err := shrink.Boundary(ctx, lo, hi, func(ctx context.Context, x int64) (shrink.Outcome, error) {
		return try(ctx, forced{i: x})
	}, shrink.Options{Jobs: r.jobs, Trials: r.trials})
	if err != nil || br.Incomplete || br.PassOutcome != shrink.Pass {
		return nil, err
	}
	p := float64(br.Pass)
	fe.Passing = &p
	switch {
	case br.Pass < v && br.Pass >= 0:
		fe.Rule = fmt.Sprintf("valid range [0, %d)", br.Pass+1)
	case br.Pass < v:
		fe.Rule = fmt.Sprintf("values up to %d pass", br.Pass)
	default:
		fe.Rule = fmt.Sprintf("values from %d pass", br.Pass)
	}
	return &forced{i: br.Pass}, nil
}

// floatBoundary finds the float nearest to v that passes, between v and
// zero: by bisection over the bit patterns of the magnitudes, which are
// ordered like the values, so the answer is exact to the last bit of the
// dtype (float32 patterns for the 16-bit dtypes, rounded on store).
func (r *reduction) floatBoundary(ctx context.Context, t *kernels.Tensor, storage int64, fe *foundElement, try func(context.Context, forced) (shrink.Outcome, error)) (*forced, error) {
	v := t.LoadFloat(storage)
	switch {
	case math.IsNaN(v):
		fe.ValueText, fe.Rule = "NaN", "the value is NaN"
		return nil, nil
	case math.IsInf(v, 1):
		fe.ValueText, fe.Rule = "+Inf", "the value is +Inf"
		return nil, nil
	case math.IsInf(v, -1):
		fe.ValueText, fe.Rule = "-Inf", "the value is -Inf"
		return nil, nil
	}
	fe.Value = v
	if v == 0 {
		return nil, nil
	}
	sign := 1.0
	if v < 0 {
		sign = -1
	}
	// Bit patterns of magnitudes in the dtype's own width, so that every
	// probe is a value the tensor can hold.
	var bits func(x float64) int64
	var fromBits func(b int64) float64
	switch t.DType {
	case kernels.Float64:
		bits = func(x float64) int64 { return int64(math.Float64bits(x)) }
		fromBits = func(b int64) float64 { return math.Float64frombits(uint64(b)) }
	case kernels.Float16:
		bits = func(x float64) int64 { return int64(float16.Fromfloat32(float32(x)).Bits()) }
		fromBits = func(b int64) float64 { return float64(float16.Frombits(uint16(b)).Float32()) }
	case kernels.BFloat16:
		// A bfloat16 is the upper half of a float32.
		bits = func(x float64) int64 { return int64(math.Float32bits(float32(x)) >> 16) }
		fromBits = func(b int64) float64 { return float64(math.Float32frombits(uint32(b) << 16)) }
	default:
		bits = func(x float64) int64 { return int64(math.Float32bits(float32(x))) }
		fromBits = func(b int64) float64 { return float64(math.Float32frombits(uint32(b))) }
	}
	value := func(b int64) float64 {
		if b == 0 {
			return 0
		}
		return sign * fromBits(b)
	}
	br, err := shrink.Boundary(ctx, 0, bits(math.Abs(v)), func(ctx context.Context, b int64) (shrink.Outcome, error) {
		return try(ctx, forced{f: value(b)})
	}, shrink.Options{Jobs: r.jobs, Trials: r.trials})
	if err != nil || br.Incomplete || br.PassOutcome != shrink.Pass {
		return nil, err
	}
	p := value(br.Pass)
	fe.Passing = &p
	if sign > 0 {
		fe.Rule = fmt.Sprintf("values up to %s pass", fmtValue(p))
	} else {
		fe.Rule = fmt.Sprintf("values from %s pass", fmtValue(p))
	}
	return &forced{f: p}, nil
}

func without(set []int, x int) []int {
	out := make([]int, 0, len(set))
	for _, u := range set {
		if u != x {
			out = append(out, u)
		}
	}
	return out
}

// rangesOf writes a sorted unit set as shrink writes candidates:
// {0-3,7}.
func rangesOf(units []int) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i := 0; i < len(units); {
		j := i
		for j+1 < len(units) && units[j+1] == units[j]+1 {
			j++
		}
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(units[i]))
		if j > i {
			sb.WriteString("-" + strconv.Itoa(units[j]))
		}
		i = j + 1
	}
	sb.WriteByte('}')
	return sb.String()
}

// boundaryTrouble says in words why a boundary search gave nothing.
func boundaryTrouble(err error) string {
	switch {
	case errors.Is(err, shrink.ErrNoBoundary):
		return "both ends answered alike (a flaky failure? try a higher --trials)"
	case errors.Is(err, shrink.ErrBudget):
		return "stopped early"
	}
	return err.Error()
}

func intAttr(attrs map[string]any, name string) (int64, bool) {
	switch v := attrs[name].(type) {
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	case int64:
		return v, true
	case int:
		return int64(v), true
	case float64:
		return int64(v), v == float64(int64(v))
	}
	return 0, false
}

// diagnosis is the finding's one line for a person.
func (r *reduction) diagnosis(f finding) string {
	op := r.batch.Op
	if op == "" {
		op = "the step"
	}
	where := fmt.Sprintf("sample %s", joinInts(f.indices, ", "))
	if len(f.ids) > 0 {
		where += " (" + strings.Join(f.ids, ", ") + ")"
	}
	switch {
	case r.mode == "size" && r.size != nil:
		return fmt.Sprintf("%s: %s at batch size %d; %d samples pass", op, r.want.Family, r.size.SmallestFailing, r.size.LargestPassing)
	case f.contentFree:
		return fmt.Sprintf("%s: %s whatever the values of %s: the cause is a shape, dtype or size, not a value", op, r.want.Family, where)
	case len(f.elements) > 0:
		var parts []string
		for _, e := range f.elements {
			s := fmt.Sprintf("%s%v = %s", e.Tensor, e.Index, fmtValue(e.Value))
			if e.Passing != nil {
				s += fmt.Sprintf(" fails where %s passes", fmtValue(*e.Passing))
			}
			if e.Rule != "" {
				s += " (" + e.Rule + ")"
			}
			parts = append(parts, s)
		}
		return fmt.Sprintf("%s: %s in %s: %s", op, r.want.Family, where, strings.Join(parts, "; "))
	}
	return fmt.Sprintf("%s: %s needs %s", op, r.want.Family, where)
}

// joinInts writes v's numbers separated by sep.
func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, sep)
}
