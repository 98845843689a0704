package reduction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/x448/float16"

	"reduce/internal/regress"
	"reduce/kernels"
	"reduce/shrink"
)

// tryValue replays the minimal batch with one element set to v.
type tryValue func(ctx context.Context, v value, trial int) (shrink.Outcome, error)

// all asks every trial of the value, as askTrials does.
func (try tryValue) all(ctx context.Context, v value, trials int) (shrink.Outcome, error) {
	return allTrials(trials, func(t int) (shrink.Outcome, error) { return try(ctx, v, t) })
}

// bounds is what a boundary search found for one element: the nearest
// value that passes (nil: none), and the other end of the valid range
// when the range was found to have two (nil otherwise). Both were
// replayed and passed.
type bounds struct {
	passing, other *value
}

// intBoundary finds the value nearest to v that passes, searching toward
// zero (the first valid index of every op here), or toward the neutral
// value when v is zero itself: past the largest value the other samples
// hold first, then v's neighbour. Then whether the
// search's far end is the other end of the valid range: it passes and the
// value just past it fails ("valid range [0, 4)": 3 and 0 pass, 4 and -1
// fail). When the search ended at its far end (v below the range: -1
// fails, 0 passes), the other end lies beyond it, and the candidate for it
// is what elsewhere gives (asked only then): the largest value the
// element's tensor holds in the batch's other samples, which passes while
// the next one fails ("valid range [0, 5)"). Without one, the rule says
// only which end was found ("the valid range starts at 0").
func (r *run) intBoundary(ctx context.Context, v, neutral int64, elsewhere func() (int64, bool), fe *regress.Element, try tryValue) (bounds, error) {
	fe.Value = float64(v)
	if v > 1<<53 || v < -(1<<53) {
		fe.ValueText = strconv.FormatInt(v, 10)
	}
	lo, hi := int64(0), v
	if v == 0 {
		lo = neutral
	}
	if lo > hi {
		lo, hi = hi, lo
	}
	if lo == hi {
		return bounds{}, nil
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
	// Most values out of range are one past its end (a label equal to the
	// number of classes, a token equal to the vocabulary's size): the
	// value's neighbour toward the search's far end is asked first, and
	// the bisection runs only when it does not pass.
	near, far := v-1, lo
	if v == lo {
		near, far = v+1, hi
	}
	var br shrink.BoundaryResult
	// The largest value m the other samples hold is most often the range's
	// last (the highest class a dataset uses): the value past it is asked
	// first, then m when that fails (255 where the classes end at 4: 5
	// fails and 4 passes, two replays where a bisection takes eight), and
	// v's neighbour when it passes (the end lies higher). Where v is close
	// to m (within 3), its neighbour is asked first: one replay either way.
	askNear := true
	if m, ok := elsewhere(); ok && v > m && m >= lo && m+1 < v && near-m > 2 {
		o, err := try.all(ctx, value{i: m + 1}, r.o.Trials)
		if err != nil {
			return bounds{}, err
		}
		switch o {
		case shrink.Pass:
			lo = m + 1
			if m+1 == near {
				br, askNear = shrink.BoundaryResult{Fail: v, Pass: near, PassOutcome: shrink.Pass}, false
			}
		case shrink.Fail:
			hi, askNear = m+1, false
			if m > lo {
				if br, err = r.guess(ctx, m, &lo, &hi, func(x int64) value { return value{i: x} }, try); err != nil {
					return bounds{}, err
				}
			}
		}
	}
	if askNear {
		o, err := try.all(ctx, value{i: near}, r.o.Trials)
		switch {
		case err != nil:
			return bounds{}, err
		case o == shrink.Pass && near != far:
			br = shrink.BoundaryResult{Fail: v, Pass: near, PassOutcome: shrink.Pass}
		case o == shrink.Unresolved && lo < hi-1:
			// Its neighbour fails otherwise: v is a sentinel (a target of
			// -100, ignore_index, where -99 is out of bounds), whose
			// bisection would meet only other failures. Its neutral value
			// is its passing one.
			return r.neutralPasses(ctx, v, neutral, fe, try)
		}
	}
	if br.PassOutcome != shrink.Pass {
		var err error
		br, err = r.boundary(ctx, lo, hi, func(ctx context.Context, x int64, trial int) (shrink.Outcome, error) {
			return try(ctx, value{i: x}, trial)
		}, r.shrinkOptions())
		if err != nil || br.Incomplete {
			return bounds{}, err
		}
		if br.PassOutcome != shrink.Pass {
			return r.neutralPasses(ctx, v, neutral, fe, try)
		}
	}
	p := float64(br.Pass)
	fe.Passing = &p
	out := bounds{passing: &value{i: br.Pass}}
	// The other end of the valid range: the search's far end passes (the
	// bisection asked it already, or the element phase did: it is often
	// the neutral value) and the value just past it fails.
	past := far - 1
	if far == hi {
		past = far + 1
	}
	probe := true
	if far == br.Pass {
		// The far end is the passing value: the range goes on past it.
		seen, ok := int64(0), false
		if v < br.Pass {
			seen, ok = elsewhere()
		}
		far, past, probe = seen, seen+1, ok && seen > br.Pass && seen < math.MaxInt64
	}
	closed := false
	if probe && (past < far) == (far < br.Pass) { // no wrap past the int64 range
		r.setPhase(PhaseRange, 1)
		// The value past the far end is asked next where the far end
		// passes (most often): with -j N, at the same time.
		end := r.prefetch(ctx, func(ctx context.Context) { _, _ = try.all(ctx, value{i: past}, r.o.Trials) })
		of, err := try.all(ctx, value{i: far}, r.o.Trials)
		end(err == nil && of == shrink.Pass)
		if err != nil {
			return out, err
		}
		if of == shrink.Pass {
			o, err := try.all(ctx, value{i: past}, r.o.Trials)
			if err != nil {
				return out, err
			}
			closed = o == shrink.Fail
			if a, ok := r.countAttr(past); o == shrink.Pass && past > far && ok {
				// Past the values seen, the range may end at a count the op
				// is given (one_hot's num_classes): a fails and a-1 passes.
				oa, err := try.all(ctx, value{i: a}, r.o.Trials)
				if err != nil {
					return out, err
				}
				if oa != shrink.Pass { // failing otherwise is out of range as well
					below := shrink.Pass
					if a-1 > past {
						if below, err = try.all(ctx, value{i: a - 1}, r.o.Trials); err != nil {
							return out, err
						}
					}
					if below == shrink.Pass {
						closed, far = true, a-1
					}
				}
			}
		}
	}
	f := float64(far)
	switch {
	case closed && br.Pass < v:
		fe.Rule = fmt.Sprintf("valid range [%d, %d)", far, br.Pass+1)
		fe.Valid = &regress.ValueRange{Lo: &f, Hi: &p}
		out.other = &value{i: far}
	case closed:
		fe.Rule = fmt.Sprintf("valid range [%d, %d)", br.Pass, far+1)
		fe.Valid = &regress.ValueRange{Lo: &p, Hi: &f}
		out.other = &value{i: far}
	case br.Pass < v:
		fe.Rule = fmt.Sprintf("the valid range ends at %d", br.Pass)
		fe.Valid = &regress.ValueRange{Hi: &p}
	default:
		fe.Rule = fmt.Sprintf("the valid range starts at %d", br.Pass)
		fe.Valid = &regress.ValueRange{Lo: &p}
	}
	return out, nil
}

// neutralPasses is the answer of an element whose bisection found no
// passing value (the values between it and its neutral value fail
// otherwise: a target of -100 fails as ignore_index, -99 to -1 are out of
// bounds): the neutral value, which the element phase replayed with the
// element dropped, when it passes; no range is claimed.
func (r *run) neutralPasses(ctx context.Context, v, neutral int64, fe *regress.Element, try tryValue) (bounds, error) {
	if neutral == v {
		return bounds{}, nil
	}
	o, err := try.all(ctx, value{i: neutral}, r.o.Trials)
	if err != nil || o != shrink.Pass {
		return bounds{}, err
	}
	p := float64(neutral)
	fe.Passing = &p
	return bounds{passing: &value{i: neutral}}, nil
}

// largestElsewhere is the largest value tensor ti of the batch holds in
// the samples outside rows (the culprits), those seen in a batch that
// passed where there are such (run.passed), when it is an integer tensor
// with a batch axis and such samples, and small enough (at most 1<<24
// elements) to read whole.
func (r *run) largestElsewhere(ti int, rows []int64) (int64, bool) {
	e := r.batch.Tensors[ti]
	if e.DType.IsFloat() || e.DType == kernels.Bool {
		return 0, false
	}
	// Values seen passing where there are such: a sample that fails
	// otherwise (a class of 7 of 4) says nothing of the range.
	_, hi, ok := r.span(ti, r.reference(rows, true))
	return hi.i, ok
}

// floatBits maps the magnitudes a float dtype holds to integers ordered
// like them: the dtype's own bit patterns, so that every probe is a value
// the tensor can hold and the answer is exact to the dtype's last bit.
func floatBits(dt kernels.DType) (bits func(x float64) int64, fromBits func(b int64) float64) {
	switch dt {
	case kernels.Float64:
		return func(x float64) int64 { return int64(math.Float64bits(x)) },
			func(b int64) float64 { return math.Float64frombits(uint64(b)) }
	case kernels.Float16:
		return func(x float64) int64 { return int64(float16.Fromfloat32(float32(x)).Bits()) },
			func(b int64) float64 { return float64(float16.Frombits(uint16(b)).Float32()) }
	case kernels.BFloat16:
		// A bfloat16 is the upper half of a float32.
		return func(x float64) int64 { return int64(math.Float32bits(float32(x)) >> 16) },
			func(b int64) float64 { return float64(math.Float32frombits(uint32(b) << 16)) }
	}
	return func(x float64) int64 { return int64(math.Float32bits(float32(x))) },
		func(b int64) float64 { return float64(math.Float32frombits(uint32(b))) }
}

// floatBoundary finds the float nearest to the element's value that
// passes, between it and zero: by bisection over the bit patterns of the
// magnitudes (floatBits), which are ordered like the values; then, as
// intBoundary does, whether zero is the other end of the valid range (the
// smallest float past it fails). A non-finite value's passing value is
// the nearest finite one: for ±Inf the largest finite float of its sign
// if it passes, else the bisection from there; for NaN, the element's
// neutral value (zero, or a donor sample's), else zero.
func (r *run) floatBoundary(ctx context.Context, t *kernels.Tensor, storage int64, neutral value, fe *regress.Element, try tryValue) (bounds, error) {
	v := t.LoadFloat(storage)
	fe.Value = v
	bits, fromBits := floatBits(t.DType)
	maxFinite := fromBits(bits(math.Inf(1)) - 1)
	switch {
	case math.IsNaN(v):
		fe.ValueText = "NaN"
		tries := []float64{0}
		if f := neutral.f; f != 0 && !math.IsNaN(f) && !math.IsInf(f, 0) {
			tries = []float64{f, 0}
		}
		for _, x := range tries {
			o, err := try.all(ctx, value{f: x}, r.o.Trials)
			if err != nil {
				return bounds{}, err
			}
			if o == shrink.Pass {
				fe.Passing = &x
				fe.Rule = "NaN fails; the finite value " + fmtValue(x, t.DType) + " passes"
				return bounds{passing: &value{f: x}}, nil
			}
		}
		fe.Rule = "NaN fails"
		return bounds{}, nil
	case math.IsInf(v, 0):
		m := math.Copysign(maxFinite, v)
		fe.ValueText = "+Inf"
		if v < 0 {
			fe.ValueText = "-Inf"
		}
		o, err := try.all(ctx, value{f: m}, r.o.Trials)
		if err != nil {
			return bounds{}, err
		}
		if o == shrink.Pass {
			fe.Passing = &m
			fe.Rule = fmt.Sprintf("%s fails; the largest finite %s of its sign, %s, passes", fe.ValueText, t.DType, fmtValue(m, t.DType))
			return bounds{passing: &value{f: m}}, nil
		}
		v = m
	}
	if v == 0 {
		return bounds{}, nil
	}
	sign := 1.0
	if v < 0 {
		sign = -1
	}
	at := func(b int64) float64 {
		if b == 0 {
			return 0
		}
		return sign * fromBits(b)
	}
	// A range's end is most often a round number (a probability's 1, a
	// class count): the round value below the element and the float just
	// past it are asked first. When they pass and fail, that is the
	// boundary, exact, in two replays rather than a bisection over every
	// float; else they narrow the bisection.
	lo, hi := int64(0), bits(math.Abs(v))
	var br shrink.BoundaryResult
	if c := roundBelow(math.Abs(v)); c > 0 && bits(c) < hi-1 {
		var err error
		if br, err = r.guess(ctx, bits(c), &lo, &hi, func(b int64) value { return value{f: at(b)} }, try); err != nil {
			return bounds{}, err
		}
	}
	if br.PassOutcome != shrink.Pass {
		var err error
		br, err = r.boundary(ctx, lo, hi, func(ctx context.Context, b int64, trial int) (shrink.Outcome, error) {
			return try(ctx, value{f: at(b)}, trial)
		}, r.shrinkOptions())
		if err != nil || br.Incomplete || br.PassOutcome != shrink.Pass {
			return bounds{}, err
		}
	}
	p := at(br.Pass)
	fe.Passing = &p
	out := bounds{passing: &value{f: p}}
	closed := false
	if br.Pass != 0 {
		// Zero passed (Boundary replays both ends): is the smallest float
		// on its other side a failure?
		r.setPhase(PhaseRange, 1)
		o, err := try.all(ctx, value{f: -sign * fromBits(1)}, r.o.Trials)
		if err != nil {
			return out, err
		}
		closed = o == shrink.Fail
	}
	zero := 0.0
	switch {
	case closed && sign > 0:
		fe.Rule = fmt.Sprintf("valid range [0, %s]", fmtValue(p, t.DType))
		fe.Valid = &regress.ValueRange{Lo: &zero, Hi: &p}
		out.other = &value{}
	case closed:
		fe.Rule = fmt.Sprintf("valid range [%s, 0]", fmtValue(p, t.DType))
		fe.Valid = &regress.ValueRange{Lo: &p, Hi: &zero}
		out.other = &value{}
	case sign > 0:
		fe.Rule = fmt.Sprintf("values up to %s pass", fmtValue(p, t.DType))
		fe.Valid = &regress.ValueRange{Hi: &p}
	default:
		fe.Rule = fmt.Sprintf("values from %s pass", fmtValue(p, t.DType))
		fe.Valid = &regress.ValueRange{Lo: &p}
	}
	return out, nil
}

// guess asks a likely boundary g of a bisection over [lo, hi] whose lo
// passes and hi fails (positions: integers, or a float's bit patterns,
// val makes the value), and the position past it: when g passes and g+1
// fails, that is the boundary, returned; otherwise lo or hi move to where
// the answers put them, and the zero result says to bisect.
func (r *run) guess(ctx context.Context, g int64, lo, hi *int64, val func(int64) value, try tryValue) (shrink.BoundaryResult, error) {
	o, err := try.all(ctx, val(g), r.o.Trials)
	if err != nil {
		return shrink.BoundaryResult{}, err
	}
	switch o {
	case shrink.Fail:
		*hi = g
	case shrink.Pass:
		past, err := try.all(ctx, val(g+1), r.o.Trials)
		if err != nil {
			return shrink.BoundaryResult{}, err
		}
		switch past {
		case shrink.Fail:
			return shrink.BoundaryResult{Fail: g + 1, Pass: g, PassOutcome: shrink.Pass}, nil
		case shrink.Pass:
			*lo = g + 1
		}
	}
	return shrink.BoundaryResult{}, nil
}

// roundBelow is the round number just below x > 0, where a range's end
// most often lies: the integer below x when x > 1, else the number of one
// significant digit below it (0.5 for 0.7, 0.01 for 0.013); 0 when there
// is none.
func roundBelow(x float64) float64 {
	if x > 1 {
		c := math.Floor(x)
		if c == x {
			c--
		}
		return c
	}
	if x <= 0 || math.IsNaN(x) {
		return 0
	}
	step := math.Pow(10, math.Floor(math.Log10(x)))
	c := math.Floor(x/step) * step
	if c >= x {
		c -= step
	}
	return c
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

// fmtValue prints a value of a tensor of dtype dt with the digits the dtype
// holds: a float32, float16 or bfloat16 value as the shortest text that
// reads back to it as a float32 (1e+30, not 1.0000000150474662e+30), an
// integer's as an integer, a float64's as the shortest that reads back to it.
func fmtValue(v float64, dt kernels.DType) string {
	switch {
	case dt == kernels.Float32 || dt == kernels.Float16 || dt == kernels.BFloat16:
		return strconv.FormatFloat(v, 'g', -1, 32)
	case !dt.IsFloat() && v == math.Trunc(v) && math.Abs(v) < 1<<63:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// countAttr is the smallest integer attribute of the batch's op above x
// (a count such as one_hot's num_classes), where there is one.
func (r *run) countAttr(x int64) (int64, bool) {
	best, found := int64(0), false
	for _, v := range r.batch.Attrs {
		var n int64
		switch a := v.(type) {
		case json.Number:
			i, err := a.Int64()
			if err != nil {
				continue
			}
			n = i
		case int64:
			n = a
		case int:
			n = int64(a)
		case float64:
			if a != math.Trunc(a) || math.Abs(a) > 1<<53 {
				continue
			}
			n = int64(a)
		default:
			continue
		}
		if n > x && (!found || n < best) {
			best, found = n, true
		}
	}
	return best, found
}
