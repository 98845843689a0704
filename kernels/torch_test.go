package kernels

// Differential tests against real PyTorch. They run testdata/torch_ref.py
// with the interpreter named by REDUCE_PYTHON, or /usr/bin/python3, and skip
// (saying why) when that interpreter cannot import torch. Data goes through
// files in a temp dir: raw storage bytes plus a JSON of dtype, shape,
// strides and offset.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reduce/internal/testenv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// torchPython returns the interpreter to use, or skips t.
func torchPython(t *testing.T) string {
	t.Helper()
	return testenv.Python(t)
}

// torchRef runs torch_ref.py with args and stdin, and decodes its stdout.
func torchRef(t *testing.T, stdin any, out any, args ...string) {
	t.Helper()
	py := torchPython(t)
	script, err := filepath.Abs(filepath.Join("testdata", "torch_ref.py"))
	require.NoError(t, err)
	cmd := exec.Command(py, append([]string{script}, args...)...)
	if stdin != nil {
		b, err := json.Marshal(stdin)
		require.NoError(t, err)
		cmd.Stdin = bytes.NewReader(b)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "torch_ref.py %v: %s", args, stderr.String())
	if out != nil {
		require.NoError(t, json.Unmarshal(stdout, out), "torch_ref.py %v output", args)
	}
}

type torchCase struct {
	ID              string  `json:"id"`
	Name            string  `json:"name"`
	DType           string  `json:"dtype"`
	Shape           []int64 `json:"shape"`
	Strides         []int64 `json:"strides"`
	Offset          int64   `json:"offset"`
	StorageElements int64   `json:"storage_elements"`
	Dim             int     `json:"dim"`
	Indices         []int64 `json:"indices"`
	Flags           [3]bool `json:"flags"`
	ExpectedShape   []int64 `json:"expected_shape"`
}

type torchResult struct {
	ID      string  `json:"id"`
	Shape   []int64 `json:"shape"`
	Strides []int64 `json:"strides"`
	Offset  int64   `json:"offset"`
}

type torchReport struct {
	ID            string  `json:"id"`
	Flags         [3]bool `json:"flags"`
	Equal         bool    `json:"equal"`
	StorageOffset int64   `json:"storage_offset"`
}

func goFlags(t *Tensor) [3]bool {
	return [3]bool{t.IsContiguous(), t.IsChannelsLast(), t.IsChannelsLast3d()}
}

// TestSelectAgainstTorch: torch builds tensors of every dtype in every layout
// class with its own view ops; Go selects from them; the values must equal
// torch.index_select's, and the result, rebuilt in torch with as_strided
// from Go's strides, offset and storage, must answer is_contiguous() and
// is_contiguous(memory_format=channels_last / channels_last_3d) as the
// original did. (index_select itself returns a contiguous tensor for every
// input, so its layout is not the reference; the original's is.)
func TestSelectAgainstTorch(t *testing.T) {
	torchPython(t)
	t.Parallel()
	dir := t.TempDir()
	torchRef(t, nil, nil, "make", dir)
	var cases []torchCase
	b, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &cases))
	require.GreaterOrEqual(t, len(cases), 200)

	byID := map[string]torchCase{}
	var results []torchResult
	for _, c := range cases {
		byID[c.ID] = c
		dt, err := ParseDType(c.DType)
		require.NoError(t, err)
		data, err := os.ReadFile(filepath.Join(dir, c.ID+".storage"))
		require.NoError(t, err)
		require.Len(t, data, int(c.StorageElements)*dt.Size(), c.ID)
		x := &Tensor{DType: dt, Shape: c.Shape, Strides: c.Strides, Offset: c.Offset, Data: data}
		require.NoError(t, x.Validate(), "%s %s", c.ID, c.Name)
		assert.Equal(t, c.Flags, goFlags(x), "%s %s: Go's predicates on torch's tensor", c.ID, c.Name)

		got, err := x.Select(c.Dim, c.Indices)
		require.NoError(t, err, "%s %s", c.ID, c.Name)
		require.Equal(t, c.ExpectedShape, got.Shape, c.ID)
		want, err := os.ReadFile(filepath.Join(dir, c.ID+".expected"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got.Contiguous().Data), "%s %s: values differ from index_select", c.ID, c.Name)
		assert.Equal(t, x.Offset, got.Offset, c.ID)
		if len(c.Indices) >= 2 && !x.Layout().Has(LayoutOverlapping) {
			assert.Equal(t, x.Layout().String(), got.Layout().String(), "%s %s", c.ID, c.Name)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, c.ID+".result"), got.Data, 0o600))
		results = append(results, torchResult{ID: c.ID, Shape: got.Shape, Strides: got.Strides, Offset: got.Offset})
	}
	b, err = json.Marshal(results)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "results.json"), b, 0o600))

	var reports []torchReport
	torchRef(t, nil, &reports, "check", dir)
	require.Len(t, reports, len(results))
	for k, r := range reports {
		c := byID[r.ID]
		assert.True(t, r.Equal, "%s %s: as_strided of Go's result differs from index_select", r.ID, c.Name)
		assert.Equal(t, results[k].Offset, r.StorageOffset, r.ID)
		want := c.Flags
		if len(c.Indices) == 0 {
			want[0] = true // torch: every empty tensor is contiguous
		}
		assert.Equal(t, want, r.Flags, "%s %s: torch's flags of Go's result (is_contiguous, channels_last, channels_last_3d); strides %v",
			r.ID, c.Name, results[k].Strides)
		g := &Tensor{Shape: results[k].Shape, Strides: results[k].Strides}
		assert.Equal(t, r.Flags, goFlags(g), "%s: Go's predicates on Go's result", r.ID)
	}
}

// TestContiguityPredicatesAgainstTorch compares IsContiguous, IsChannelsLast
// and IsChannelsLast3d with torch on random stride patterns: dense
// permutations (row-major, channels-last, others) whose size-1 dims get
// arbitrary strides, dense layouts with one stride nudged, and fully random
// strides, with sizes 0 to 3 so that empty tensors and size-1 dims are
// common.
func TestContiguityPredicatesAgainstTorch(t *testing.T) {
	torchPython(t)
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 13))
	type tcase struct {
		Shape   []int64 `json:"shape"`
		Strides []int64 `json:"strides"`
		Offset  int64   `json:"offset"`
	}
	var cases []tcase
	for len(cases) < 4000 {
		rank := rng.IntN(6)
		shape := make([]int64, rank)
		for d := range shape {
			shape[d] = int64(rng.IntN(4))
			if rng.IntN(3) > 0 && shape[d] == 0 {
				shape[d] = 1 // keep most tensors non-empty
			}
		}
		strides := make([]int64, rank)
		switch kind := rng.IntN(4); kind {
		case 0, 1, 2:
			var order []int // outermost first
			switch {
			case kind == 1 && rank == 4:
				order = []int{0, 2, 3, 1}
			case kind == 1 && rank == 5:
				order = []int{0, 2, 3, 4, 1}
			case kind == 2:
				order = rng.Perm(rank)
			default:
				order = seq(rank)
			}
			acc := int64(1)
			for k := rank - 1; k >= 0; k-- {
				strides[order[k]] = acc
				acc *= max(shape[order[k]], 1)
			}
			for d := range shape {
				if shape[d] <= 1 && rng.IntN(2) == 0 {
					strides[d] = int64(rng.IntN(30)) // torch ignores these
				}
			}
			if rank > 0 && rng.IntN(4) == 0 {
				d := rng.IntN(rank)
				strides[d] = max(0, strides[d]+int64(rng.IntN(3))-1)
			}
		default:
			for d := range strides {
				strides[d] = int64(rng.IntN(7))
			}
		}
		cases = append(cases, tcase{shape, strides, int64(rng.IntN(3))})
	}
	var got [][3]bool
	torchRef(t, map[string]any{"cases": cases}, &got, "flags")
	require.Len(t, got, len(cases))
	counts := map[[3]bool]int{}
	for k, c := range cases {
		x := &Tensor{Shape: c.Shape, Strides: c.Strides, Offset: c.Offset}
		assert.Equal(t, got[k], goFlags(x), "shape %v strides %v: torch says (contiguous, channels_last, channels_last_3d) = %v",
			c.Shape, c.Strides, got[k])
		counts[got[k]]++
	}
	// The sample must exercise every answer, or the comparison proves little.
	for _, f := range [][3]bool{{true, false, false}, {false, true, false}, {true, true, false}, {false, false, true}, {true, false, true}, {false, false, false}} {
		assert.Greater(t, counts[f], 10, "too few cases with flags %v", f)
	}
}

// TestConversionsAgainstTorch: StoreFloat and StoreInt produce the bytes of
// torch's tensor.to(dtype) from float64 and int64 tensors.
func TestConversionsAgainstTorch(t *testing.T) {
	torchPython(t)
	t.Parallel()
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, -2.5, 2.5, 3.75, 1.0 / 3, 1e-3,
		1 + 1.0/2048, 1 + 3.0/2048, 1 + 1.0/256, 1 + 3.0/256, 65504, 65519.99, 65520, -70000,
		5.960464477539063e-08, 2.9802322387695312e-08, 1e-8, 1.17549435e-38, 1e-40, 1e-46,
		3.4028234663852886e38, 3.5e38, 1e300, -1e300, 3e38, 99.5, -99.9, 127.9,
		math.Inf(1), math.Inf(-1), math.NaN(), 1.00000011920928955078125, 1.000000059604644775390625}
	ints := []int64{0, 1, -1, 2, 127, 128, 255, 256, 300, -129, 40000, -40000, 1 << 31, -1<<31 - 1,
		1<<53 + 1, 1<<60 + 1<<36 + 1, 16777217, 2049, 65520, math.MaxInt64, math.MinInt64}
	bitsOf := make([]uint64, len(floats))
	for k, f := range floats {
		bitsOf[k] = math.Float64bits(f)
	}
	var ref map[string]struct {
		Floats string `json:"floats"`
		Ints   string `json:"ints"`
	}
	torchRef(t, map[string]any{"floats": bitsOf, "ints": ints}, &ref, "convert")
	for _, dt := range DTypes() {
		r, ok := ref[dt.String()]
		require.True(t, ok, dt.String())
		wantF, err := hex.DecodeString(r.Floats)
		require.NoError(t, err)
		wantI, err := hex.DecodeString(r.Ints)
		require.NoError(t, err)
		es := dt.Size()
		x := MustNew(dt, int64(len(floats)))
		for k, f := range floats {
			x.StoreFloat(int64(k), f)
		}
		for k, f := range floats {
			if !dt.IsFloat() && dt != Bool && (math.IsNaN(f) || math.Abs(f) >= 127) {
				continue // out of the integer range: undefined behaviour in C++, torch's answer is the CPU's
			}
			if !dt.IsFloat() && dt == Uint8 && f < 0 {
				continue
			}
			got, want := x.Data[k*es:(k+1)*es], wantF[k*es:(k+1)*es]
			if math.IsNaN(f) && dt.IsFloat() {
				w := &Tensor{DType: dt, Shape: []int64{1}, Strides: []int64{1}, Data: want}
				assert.True(t, math.IsNaN(x.LoadFloat(int64(k))) && math.IsNaN(w.LoadFloat(0)), "%s NaN", dt)
				continue
			}
			assert.Equal(t, want, got, "%s from float64 %v (%x)", dt, f, math.Float64bits(f))
		}
		y := MustNew(dt, int64(len(ints)))
		for k, v := range ints {
			y.StoreInt(int64(k), v)
		}
		for k, v := range ints {
			assert.Equal(t, wantI[k*es:(k+1)*es], y.Data[k*es:(k+1)*es], "%s from int64 %d", dt, v)
		}
	}
}
