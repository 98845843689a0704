package reduction

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"reduce/internal/regress"
	"reduce/kernels"
)

// TestFmtValue: a value is printed with the digits its dtype holds, in
// every line a person reads.
func TestFmtValue(t *testing.T) {
	for _, c := range []struct {
		v    float64
		dt   kernels.DType
		want string
	}{
		{float64(float32(1e30)), kernels.Float32, "1e+30"},
		{float64(float32(0.1)), kernels.Float32, "0.1"},
		{3.140625, kernels.BFloat16, "3.140625"},
		{0.1, kernels.Float64, "0.1"},
		{1e6, kernels.Int64, "1000000"},
		{-100, kernels.Int64, "-100"},
		{1, kernels.Bool, "1"},
	} {
		assert.Equal(t, c.want, fmtValue(c.v, c.dt), "%v as %s", c.v, c.dt)
	}
	e := Element{dtype: kernels.Float32, Element: regress.Element{Tensor: "logits", Index: []int64{2, 0},
		Value: float64(float32(1e30)), Passing: func() *float64 { p := float64(float32(3.4e38)); return &p }()}}
	assert.Equal(t, "logits[2, 0] = 1e+30 triggers the failure; 3.4e+38 passes", e.Diagnosis())
}

// TestRoundBelow: the round number a float boundary search asks first.
func TestRoundBelow(t *testing.T) {
	for x, want := range map[float64]float64{1.5: 1, 7: 6, 255.5: 255, 0.7: 0.6, 0.5: 0.4, 0.013: 0.01, 1: 0, 0: 0} {
		assert.InDelta(t, want, roundBelow(x), 1e-12, "roundBelow(%v)", x)
	}
}
