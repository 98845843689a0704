package kernels

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// withGeneralOnly runs fn with every fast path turned off.
func withGeneralOnly(fn func()) {
	generalOnly = true
	defer func() { generalOnly = false }()
	fn()
}

// TestFastPaths runs the differential generator's cases (every op, random
// dtypes and layouts: contiguous, transposed, permuted, channels_last,
// offset, gapped, expanded; valid and failing) through the fast paths and
// through the general paths, in both modes: outputs must be identical bit
// for bit and failures identical (message, class, device asserts).
func TestFastPaths(t *testing.T) {
	cases := genOpCases(rand.New(rand.NewSource(13)), 1500)
	for _, c := range cases {
		op, err := Lookup(c.Op)
		require.NoError(t, err)
		for _, mode := range []Mode{ModeCPU, ModeCUDA} {
			checkFastPath(t, op, c, mode)
		}
	}
}

// checkFastPath runs case c through the fast paths and through the general
// ones: outputs, notes and failures must be identical. It returns the fast
// paths' result.
func checkFastPath(t *testing.T, op *Op, c *opCase, mode Mode) *Result {
	t.Helper()
	fast, err := op.Run(mode, c.Tensors, c.GoAttrs)
	require.NoError(t, err)
	var general *Result
	withGeneralOnly(func() { general, err = op.Run(mode, c.Tensors, c.GoAttrs) })
	require.NoError(t, err)
	msg := fmt.Sprintf("case %d (%s, mode %v): %s", c.ID, c.Op, mode, c.describe())
	require.Equal(t, general.Outputs, fast.Outputs, msg)
	require.Equal(t, general.Notes, fast.Notes, msg)
	// Printed, as a device assert may hold a NaN value.
	require.Equal(t, failureText(general.Failure), failureText(fast.Failure), msg)
	return fast
}

// TestFastReads checks the run-wise readers against Each and
// LoadFloat/LoadInt on random layouts of every dtype.
func TestFastReads(t *testing.T) {
	g := &opGen{rng: rand.New(rand.NewSource(5))}
	for i := 0; i < 400; i++ {
		dt := DTypes()[g.rng.Intn(len(DTypes()))]
		shape := g.dims(g.rng.Intn(5), 0, 5)
		x := g.tensor(dt, shape, g.pick(0.2), g.valuesFor(dt))
		var wantF []float64
		var wantI, wantE []int64
		x.Each(func(_ []int64, e int64) {
			wantF = append(wantF, x.LoadFloat(e))
			wantI = append(wantI, x.LoadInt(e))
			wantE = append(wantE, e)
		})
		desc := func() string { return dt.String() + " " + fmtSizes(x.Shape) + " " + fmtSizes(x.Strides) }
		gotF := floatValues(x)
		require.Len(t, gotF, len(wantF), desc())
		for k := range wantF {
			require.Equal(t, math.Float64bits(wantF[k]), math.Float64bits(gotF[k]), desc())
		}
		require.Equal(t, wantI, nilIfEmpty(intValues(x)), desc())
		require.Equal(t, wantE, nilIfEmpty(rowMajor(x)), desc())
		cv := contiguousView(x, x.Shape)
		var general *Tensor
		withGeneralOnly(func() { general = contiguousView(x, x.Shape) })
		require.Equal(t, general, cv, desc())
		// storeFloats writes what StoreFloat writes.
		if n := x.Numel(); n > 0 && n == x.StorageElems() && x.IsContiguous() {
			a, b := MustNew(dt, n), MustNew(dt, n)
			b.storeFloats(0, 1, wantF)
			for k, v := range wantF {
				a.StoreFloat(int64(k), v)
			}
			require.Equal(t, a.Data, b.Data, desc())
		}
	}
}

func failureText(f *Failure) string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("%+v", *f)
}

func nilIfEmpty(s []int64) []int64 {
	if len(s) == 0 {
		return nil
	}
	return s
}

// TestFastPathsLarge runs ops on inputs large enough for the fast paths to
// split their work across goroutines, against the general paths.
func TestFastPathsLarge(t *testing.T) {
	g := &opGen{rng: rand.New(rand.NewSource(9))}
	logits := g.tensor(Float32, []int64{300, 700}, false, g.randn)
	target := g.tensor(Int64, []int64{300}, false, g.classValue(700, -100, 0))
	probs := g.tensor(Float64, []int64{400, 500}, false, func() float64 { return g.rng.Float64() })
	ptarget := g.tensor(Float64, []int64{400, 500}, false, func() float64 { return g.rng.Float64() })
	// float32 inputs reaching 0 and 1, where the logs are clamped to -100.
	edge := func() float64 { return []float64{0, 1, g.rng.Float64(), 1e-40}[g.rng.Intn(4)] }
	probs32 := g.tensor(Float32, []int64{400, 500}, false, edge)
	ptarget32 := g.tensor(Float32, []int64{400, 500}, false, func() float64 { return g.rng.Float64() })
	cases := []struct {
		op      string
		tensors map[string]*Tensor
		attrs   map[string]any
	}{
		{"cross_entropy", map[string]*Tensor{"input": logits, "target": target}, map[string]any{"reduction": "none"}},
		{"cross_entropy", map[string]*Tensor{"input": logits, "target": target}, map[string]any{"label_smoothing": 0.2}},
		{"binary_cross_entropy", map[string]*Tensor{"input": probs, "target": ptarget}, map[string]any{"reduction": "none"}},
		{"binary_cross_entropy", map[string]*Tensor{"input": probs, "target": ptarget}, nil},
		{"binary_cross_entropy", map[string]*Tensor{"input": probs32, "target": ptarget32}, map[string]any{"reduction": "none"}},
		{"binary_cross_entropy", map[string]*Tensor{"input": probs32, "target": ptarget32}, map[string]any{"reduction": "sum"}},
	}
	for _, c := range cases {
		op, err := Lookup(c.op)
		require.NoError(t, err)
		fast, err := op.Run(ModeCPU, c.tensors, c.attrs)
		require.NoError(t, err)
		var general *Result
		withGeneralOnly(func() { general, err = op.Run(ModeCPU, c.tensors, c.attrs) })
		require.NoError(t, err)
		require.Equal(t, general.Outputs, fast.Outputs, c.op)
		require.Equal(t, failureText(general.Failure), failureText(fast.Failure), c.op)
	}
}

// TestContiguousTiles compares Contiguous with its tiled transposes on and
// off, on layouts whose two innermost levels are large enough to be tiled.
func TestContiguousTiles(t *testing.T) {
	cases := []*Tensor{
		permuteView(iotaTensor(Float32, 130, 200), 1, 0),
		permuteView(iotaTensor(Int64, 3, 70, 65), 0, 2, 1),
		permuteView(iotaTensor(Int8, 129, 3, 66), 2, 1, 0),
		permuteView(iotaTensor(BFloat16, 2, 100, 80, 3), 0, 3, 2, 1),
		sliceView(permuteView(iotaTensor(Float64, 300, 90), 1, 0), 1, 5, 290, 3),
	}
	for _, x := range cases {
		var general *Tensor
		withGeneralOnly(func() { general = x.Contiguous() })
		require.Equal(t, general, x.Contiguous(), "%s %v %v", x.DType, x.Shape, x.Strides)
		require.Equal(t, general, contiguousView(x, x.Shape), "%s %v %v", x.DType, x.Shape, x.Strides)
	}
}
