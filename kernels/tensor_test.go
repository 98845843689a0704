package kernels

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// view builds a tensor over a storage of n elements of dt; it does not
// validate, so tests can build broken ones.
func rawView(dt DType, n int64, shape, strides []int64, offset int64) *Tensor {
	return &Tensor{DType: dt, Shape: shape, Strides: strides, Offset: offset, Data: make([]byte, n*int64(dt.Size()))}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		t    *Tensor
		err  error // nil: valid
	}{
		{"contiguous", rawView(Float32, 12, []int64{3, 4}, []int64{4, 1}, 0), nil},
		{"scalar", rawView(Float32, 1, nil, nil, 0), nil},
		{"scalar without storage", rawView(Float32, 0, nil, nil, 0), ErrStorage},
		{"offset exactly fits", rawView(Int64, 17, []int64{3, 4}, []int64{4, 1}, 5), nil},
		{"one element short", rawView(Int64, 16, []int64{3, 4}, []int64{4, 1}, 5), ErrStorage},
		{"storage overflow by stride", rawView(Float32, 12, []int64{3, 4}, []int64{5, 1}, 0), ErrStorage},
		{"partial trailing element ignored", &Tensor{DType: Float32, Shape: []int64{2}, Strides: []int64{1}, Data: make([]byte, 7)}, ErrStorage},
		{"negative size", rawView(Float32, 12, []int64{-1, 4}, []int64{4, 1}, 0), ErrShape},
		{"negative stride", rawView(Float32, 12, []int64{3, 4}, []int64{-4, 1}, 0), ErrStrides},
		{"negative offset", rawView(Float32, 12, []int64{3, 4}, []int64{4, 1}, -1), ErrOffset},
		{"stride count", rawView(Float32, 12, []int64{3, 4}, []int64{1}, 0), ErrStrides},
		{"too many dims", rawView(Float32, 1, make([]int64, MaxDims+1), make([]int64, MaxDims+1), 0), ErrShape},
		{"invalid dtype", &Tensor{DType: 0, Shape: []int64{1}, Strides: []int64{1}, Data: []byte{0}}, ErrDType},
		{"numel overflows", rawView(Uint8, 1, []int64{1 << 40, 1 << 40}, []int64{0, 0}, 0), ErrOverflow},
		{"numel overflows even with a zero dim, as in torch", rawView(Uint8, 1, []int64{1 << 40, 1 << 40, 0}, []int64{0, 0, 0}, 0), ErrOverflow},
		{"extent overflows", rawView(Uint8, 1, []int64{1 << 40}, []int64{1 << 40}, 0), ErrOverflow},
		{"extent sum overflows", rawView(Uint8, 1, []int64{2, 2}, []int64{1 << 62, 1 << 62}, 0), ErrOverflow},
		{"offset+extent overflows", rawView(Uint8, 1, []int64{2}, []int64{1}, math.MaxInt64), ErrOverflow},
		{"expanded needs one element", rawView(Float32, 1, []int64{1 << 30, 7}, []int64{0, 0}, 0), nil},
		{"overlapping windows", rawView(Float32, 4, []int64{3, 2}, []int64{1, 1}, 0), nil},
		{"empty ignores storage and offset", rawView(Float32, 0, []int64{3, 0}, []int64{1 << 50, 1 << 50}, 1<<60), nil},
		{"size-1 dims ignore their stride", rawView(Float32, 3, []int64{1, 3}, []int64{math.MaxInt64, 1}, 0), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.t.Validate()
			if c.err == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.err)
		})
	}
}

func TestNew(t *testing.T) {
	x, err := New(Float16, 2, 0, 3)
	require.NoError(t, err)
	assert.Equal(t, []int64{3, 3, 1}, x.Strides, "torch lays out size-0 dims as if of size 1")
	assert.Empty(t, x.Data)
	x = MustNew(Int32, 2, 3)
	assert.Equal(t, []int64{3, 1}, x.Strides)
	assert.Len(t, x.Data, 24)
	require.NoError(t, x.Validate())
	_, err = New(0, 2)
	assert.ErrorIs(t, err, ErrDType)
	_, err = New(Float32, 1<<40, 1<<40)
	assert.ErrorIs(t, err, ErrOverflow)
	_, err = New(Float64, 1<<61)
	assert.ErrorIs(t, err, ErrOverflow)
	_, err = New(Float32, -2)
	assert.ErrorIs(t, err, ErrShape)
	assert.Panics(t, func() { MustNew(Float32, -1) })
	x, err = New(Float32, 0, 1<<62, 4)
	require.NoError(t, err, "empty, so no storage to overflow")
	assert.Equal(t, []int64{math.MaxInt64, 4, 1}, x.Strides, "strides saturate instead of wrapping")
	require.NoError(t, x.Validate())
}

func TestStorageIndexErrors(t *testing.T) {
	x := MustNew(Float32, 2, 3)
	_, err := x.Float(2, 0)
	assert.ErrorIs(t, err, ErrIndex)
	_, err = x.Float(0, -1)
	assert.ErrorIs(t, err, ErrIndex)
	_, err = x.Int(0)
	assert.ErrorIs(t, err, ErrIndex)
	assert.ErrorIs(t, x.SetFloat(1, 0, 3), ErrIndex)
	assert.ErrorIs(t, x.SetInt(1, 0, 0, 0), ErrIndex)
}

// TestElementRoundTrip writes through one accessor and reads through the
// others, for every dtype.
func TestElementRoundTrip(t *testing.T) {
	cases := []struct {
		dt    DType
		in    float64
		float float64 // what LoadFloat returns
		int   int64   // what LoadInt returns
	}{
		{Bool, 0, 0, 0},
		{Bool, -0.5, 1, 1},
		{Bool, math.NaN(), 1, 1},
		{Uint8, 255, 255, 255},
		{Uint8, 3.9, 3, 3},
		{Int8, -128, -128, -128},
		{Int8, -3.9, -3, -3},
		{Int16, -32768, -32768, -32768},
		{Int32, 2147483647, 2147483647, 2147483647},
		{Int64, -1 << 53, -1 << 53, -1 << 53},
		{Float16, 1.0 / 3, 0.333251953125, 0},
		{Float16, 65504, 65504, 65504},
		{Float16, 65520, math.Inf(1), math.MinInt64},               // rounds to +inf; int64(+Inf) is implementation-defined, so it is not compared
		{Float16, 1 + 1.0/2048, 1, 1},                              // tie: rounds to even
		{Float16, 1 + 3.0/2048, 1 + 2.0/1024, 1},                   // tie: rounds to even, upwards
		{Float16, 5.960464477539063e-08, 5.960464477539063e-08, 0}, // smallest subnormal
		{BFloat16, 1.0 / 3, 0.333984375, 0},
		{BFloat16, 1 + 1.0/256, 1, 1},                         // tie to even
		{BFloat16, 1 + 3.0/256, 1 + 1.0/64, 1},                // tie to even, upwards
		{BFloat16, 3e38, 3.00405527047391e+38, math.MinInt64}, // stays finite (int not compared)
		{Float32, 0.1, float64(float32(0.1)), 0},
		{Float32, -1e39, math.Inf(-1), math.MinInt64},
		{Float64, 0.1, 0.1, 0},
		{Float64, -2.5, -2.5, -2},
	}
	for _, c := range cases {
		x := MustNew(c.dt, 2)
		require.NoError(t, x.SetFloat(c.in, 1))
		got, err := x.Float(1)
		require.NoError(t, err)
		if math.IsInf(c.float, 0) {
			assert.Equal(t, c.float, got, "%s %v", c.dt, c.in)
		} else {
			assert.InDelta(t, c.float, got, math.Abs(c.float)*1e-7, "%s %v", c.dt, c.in)
		}
		if c.int != math.MinInt64 && math.Abs(got) < 1e18 {
			gi, err := x.Int(1)
			require.NoError(t, err)
			assert.Equal(t, c.int, gi, "%s %v as int", c.dt, c.in)
		}
		z, _ := x.Float(0)
		assert.Zero(t, z, "%s: writing element 1 touched element 0", c.dt)
	}
}

func TestNaNSurvivesEveryFloatDType(t *testing.T) {
	for _, dt := range []DType{Float16, BFloat16, Float32, Float64} {
		x := MustNew(dt, 1)
		require.NoError(t, x.SetFloat(math.NaN(), 0))
		v, _ := x.Float(0)
		assert.True(t, math.IsNaN(v), dt.String())
	}
}

func TestIntWraps(t *testing.T) {
	cases := []struct {
		dt   DType
		in   int64
		want int64
	}{
		{Uint8, 300, 44}, {Uint8, -1, 255}, {Int8, 200, -56}, {Int8, -129, 127},
		{Int16, 40000, -25536}, {Int32, 1 << 31, -1 << 31}, {Int64, math.MinInt64, math.MinInt64},
		{Bool, 2, 1}, {Bool, -7, 1}, {Bool, 0, 0},
		{Float32, 1<<24 + 1, 1 << 24}, // rounds to float32
		{Float64, 1<<53 + 1, 1 << 53},
	}
	for _, c := range cases {
		x := MustNew(c.dt, 1)
		require.NoError(t, x.SetInt(c.in, 0))
		got, _ := x.Int(0)
		assert.Equal(t, c.want, got, "%s %d", c.dt, c.in)
	}
}

func TestDTypeNames(t *testing.T) {
	for _, dt := range DTypes() {
		got, err := ParseDType(dt.String())
		require.NoError(t, err)
		assert.Equal(t, dt, got)
		got, err = ParseDType("torch." + dt.String())
		require.NoError(t, err)
		assert.Equal(t, dt, got)
		b, err := dt.MarshalText()
		require.NoError(t, err)
		var back DType
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, dt, back)
	}
	for alias, want := range map[string]DType{"long": Int64, "int": Int32, "short": Int16, "half": Float16, "float": Float32, "double": Float64, "torch.half": Float16} {
		got, err := ParseDType(alias)
		require.NoError(t, err)
		assert.Equal(t, want, got, alias)
	}
	for _, bad := range []string{"", "torch.", "float8", "complex64", "Float32"} {
		_, err := ParseDType(bad)
		assert.Error(t, err, bad)
	}
	assert.Equal(t, "dtype(0)", DType(0).String())
	assert.Equal(t, 0, DType(99).Size())
	_, err := DType(0).MarshalText()
	assert.Error(t, err)
}

func TestEachVisitsRowMajor(t *testing.T) {
	// A transposed view: storage [0 1 2 3 4 5] as [[0 3] [1 4] [2 5]].
	x := rawView(Int64, 6, []int64{3, 2}, []int64{1, 3}, 0)
	for e := int64(0); e < 6; e++ {
		x.StoreInt(e, e)
	}
	var got []int64
	var idxs [][]int64
	x.Each(func(idx []int64, e int64) {
		got = append(got, x.LoadInt(e))
		idxs = append(idxs, append([]int64(nil), idx...))
	})
	assert.Equal(t, []int64{0, 3, 1, 4, 2, 5}, got)
	assert.Equal(t, []int64{2, 1}, idxs[5])
	n := 0
	MustNew(Float32, 2, 0).Each(func([]int64, int64) { n++ })
	assert.Zero(t, n, "an empty tensor has no elements")
	MustNew(Float32).Each(func(idx []int64, e int64) { n++; assert.Empty(t, idx); assert.Zero(t, e) })
	assert.Equal(t, 1, n, "a scalar has one element")
}

func TestCloneIsDeep(t *testing.T) {
	x := rawView(Float32, 8, []int64{2, 2}, []int64{1, 2}, 3)
	y := x.Clone()
	require.NoError(t, y.SetFloat(7, 1, 1))
	y.Shape[0], y.Strides[0] = 9, 9
	v, _ := x.Float(1, 1)
	assert.Zero(t, v)
	assert.Equal(t, []int64{2, 2}, x.Shape)
	assert.Equal(t, []int64{1, 2}, x.Strides)
	assert.Equal(t, int64(3), y.Offset)
}
