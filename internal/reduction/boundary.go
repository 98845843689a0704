package reduction

import (
	"context"
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

// intBoundary finds the value nearest to v that passes, searching toward
// zero (the first valid index of every op here), or toward the neutral
// value when v is zero itself.
func (r *run) intBoundary(ctx context.Context, v, neutral int64, fe *regress.Element, try tryValue) (*value, error) {
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
	br, err := shrink.Boundary(ctx, lo, hi, func(ctx context.Context, x int64, trial int) (shrink.Outcome, error) {
		return try(ctx, value{i: x}, trial)
	}, shrink.Options{Jobs: r.o.Jobs, Trials: r.o.Trials})
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
	return &value{i: br.Pass}, nil
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
// magnitudes (floatBits), which are ordered like the values.
func (r *run) floatBoundary(ctx context.Context, t *kernels.Tensor, storage int64, fe *regress.Element, try tryValue) (*value, error) {
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
	bits, fromBits := floatBits(t.DType)
	at := func(b int64) float64 {
		if b == 0 {
			return 0
		}
		return sign * fromBits(b)
	}
	br, err := shrink.Boundary(ctx, 0, bits(math.Abs(v)), func(ctx context.Context, b int64, trial int) (shrink.Outcome, error) {
		return try(ctx, value{f: at(b)}, trial)
	}, shrink.Options{Jobs: r.o.Jobs, Trials: r.o.Trials})
	if err != nil || br.Incomplete || br.PassOutcome != shrink.Pass {
		return nil, err
	}
	p := at(br.Pass)
	fe.Passing = &p
	if sign > 0 {
		fe.Rule = fmt.Sprintf("values up to %s pass", fmtValue(p))
	} else {
		fe.Rule = fmt.Sprintf("values from %s pass", fmtValue(p))
	}
	return &value{f: p}, nil
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

func fmtValue(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
