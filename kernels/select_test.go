package kernels

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// elemBytes is the raw storage of element idx.
func elemBytes(t *Tensor, idx []int64) []byte {
	e, err := t.StorageIndex(idx)
	if err != nil {
		panic(err)
	}
	es := int64(t.DType.Size())
	return t.Data[e*es : (e+1)*es]
}

// selectedMismatch compares got with index_select(src, dim, indices) element
// by element, bitwise, and describes the first difference.
func selectedMismatch(src *Tensor, dim int, indices []int64, got *Tensor) string {
	want := append([]int64(nil), src.Shape...)
	want[dim] = int64(len(indices))
	if got.DType != src.DType || !slices.Equal(got.Shape, want) {
		return fmt.Sprintf("got %s %v, want %s %v", got.DType, got.Shape, src.DType, want)
	}
	var msg string
	sidx := make([]int64, len(want))
	got.Each(func(idx []int64, e int64) {
		if msg != "" {
			return
		}
		copy(sidx, idx)
		sidx[dim] = indices[idx[dim]]
		if g, w := elemBytes(got, idx), elemBytes(src, sidx); !bytes.Equal(g, w) {
			msg = fmt.Sprintf("element %v is %x, want %x (source element %v)", idx, g, w, sidx)
		}
	})
	return msg
}

func requireSelected(t *testing.T, src *Tensor, dim int, indices []int64, got *Tensor) {
	t.Helper()
	require.NoError(t, got.Validate())
	if msg := selectedMismatch(src, dim, indices, got); msg != "" {
		t.Fatal(msg)
	}
}

// storageLen is the number of storage elements Select promises to allocate.
func storageLen(src, got *Tensor) int64 {
	if got.Numel() == 0 {
		return min(src.Offset, src.StorageElems())
	}
	return got.Offset + got.Extent()
}

func nonTrivialStrides(t *Tensor) map[int]int64 {
	m := map[int]int64{}
	for d, s := range t.Shape {
		if s > 1 {
			m[d] = t.Strides[d]
		}
	}
	return m
}

func TestSelectKeepsEveryLayoutClass(t *testing.T) {
	for _, dt := range DTypes() {
		for _, v := range layoutZoo(dt) {
			t.Run(dt.String()+"/"+v.name, func(t *testing.T) {
				x := v.t
				require.NoError(t, x.Validate())
				n := x.Shape[0]
				idx := []int64{2, 0, 0, n - 1, 1}
				got, err := x.Select(0, idx)
				require.NoError(t, err)
				requireSelected(t, x, 0, idx, got)
				assert.Equal(t, x.Layout().String(), got.Layout().String())
				assert.Equal(t, x.IsContiguous(), got.IsContiguous())
				assert.Equal(t, x.IsChannelsLast(), got.IsChannelsLast())
				assert.Equal(t, x.IsChannelsLast3d(), got.IsChannelsLast3d())
				assert.Equal(t, x.StrideOrder(), got.StrideOrder())
				assert.Equal(t, x.Offset, got.Offset)
				assert.Equal(t, storageLen(x, got)*int64(dt.Size()), int64(len(got.Data)), "storage is offset + extent")
				assert.Equal(t, x.Data[:x.Offset*int64(dt.Size())], got.Data[:got.Offset*int64(dt.Size())], "the prefix before the offset is the original's")
				if order := x.StrideOrder(); len(order) == 0 || order[len(order)-1] == 0 {
					// dim 0 is outermost (or expanded): every stride that
					// addresses memory is kept exactly.
					assert.Equal(t, nonTrivialStrides(x), nonTrivialStrides(got))
				}
			})
		}
	}
}

func TestSelectOtherDims(t *testing.T) {
	for _, v := range layoutZoo(Float32) {
		for dim := 1; dim < v.t.Dims(); dim++ {
			if v.t.Shape[dim] < 2 {
				continue
			}
			t.Run(fmt.Sprintf("%s/dim%d", v.name, dim), func(t *testing.T) {
				x := v.t
				idx := []int64{x.Shape[dim] - 1, 0, x.Shape[dim] - 1}
				got, err := x.Select(dim-x.Dims(), idx) // negative dim
				require.NoError(t, err)
				requireSelected(t, x, dim, idx, got)
				if !x.Layout().Has(LayoutOverlapping) {
					assert.Equal(t, x.Layout().String(), got.Layout().String())
					assert.Equal(t, x.StrideOrder(), got.StrideOrder())
				}
			})
		}
	}
}

func TestSelectGrowsSizeOneDims(t *testing.T) {
	cases := []struct {
		name    string
		x       *Tensor
		dim     int
		strides []int64 // of the result of selecting [0, 0, 0]
	}{
		{"contiguous batch of 1", iotaTensor(Float32, 1, 3, 4), 0, []int64{12, 4, 1}},
		{"padded batch of 1 is contiguous: stays so", rawView(Float32, 12, []int64{1, 3, 4}, []int64{20, 4, 1}, 0), 0, []int64{12, 4, 1}},
		{"transposed column is contiguous: stays so", permuteView(iotaTensor(Float32, 3, 1), 1, 0), 0, []int64{3, 1}},
		{"stride 0 batch of 1", rawView(Float32, 3, []int64{1, 3}, []int64{0, 1}, 0), 0, []int64{3, 1}},
		{"channels_last batch of 1", channelsLastTensor(Float32, 1, 3, 2, 5), 0, []int64{30, 1, 15, 3}},
		{"channels_last one channel: contiguous wins", channelsLastTensor(Float32, 2, 1, 2, 5), 1, []int64{30, 10, 5, 1}},
		{"channels_last one row", channelsLastTensor(Float32, 2, 3, 1, 5), 2, []int64{45, 1, 15, 3}},
		{"channels_last_3d batch of 1", channelsLast3dTensor(Float32, 1, 2, 2, 3, 2), 0, []int64{24, 1, 12, 4, 2}},
		{"strided batch of 1", sliceView(iotaTensor(Float32, 1, 8), 1, 0, 8, 2), 0, []int64{8, 2}},
		{"size-1 dims below a growing one lend it no padding", rawView(Float32, 1, []int64{1, 1, 2}, []int64{2, 5, 0}, 0), 1, []int64{4, 1, 0}},
		{"strided batch of 1 from a wider buffer: no padding invented", rawView(Float32, 5, []int64{1, 3}, []int64{20, 2}, 0), 0, []int64{6, 2}},
		{"transposed batch of 1 stays transposed", sliceView(permuteView(iotaTensor(Float32, 4, 3), 1, 0), 0, 0, 1, 1), 0, []int64{1, 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			idx := []int64{0, 0, 0}
			got, err := c.x.Select(c.dim, idx)
			require.NoError(t, err)
			requireSelected(t, c.x, c.dim, idx, got)
			assert.Equal(t, c.strides, got.Strides)
			assert.Equal(t, c.x.IsContiguous(), got.IsContiguous(), "is_contiguous")
			if !(c.x.IsContiguous() && c.x.IsChannelsLast()) {
				assert.Equal(t, c.x.IsChannelsLast(), got.IsChannelsLast(), "channels_last")
			}
			assert.Equal(t, c.x.IsChannelsLast3d(), got.IsChannelsLast3d(), "channels_last_3d")
		})
	}
}

// TestSelectStrides pins the chain rule of Select on hand-computed cases.
func TestSelectStrides(t *testing.T) {
	cases := []struct {
		name    string
		x       *Tensor
		dim     int
		idx     []int64
		strides []int64
	}{
		{"rows with padding: selecting columns keeps the padding", rawView(Float32, 25, []int64{5, 3}, []int64{5, 1}, 0), 1, []int64{0, 2}, []int64{4, 1}},
		{"transposed along the inner dim", permuteView(iotaTensor(Float32, 6, 5), 1, 0), 0, []int64{0, 1, 2}, []int64{1, 3}},
		{"permuted: outer dims make room", permuteView(iotaTensor(Float32, 3, 5, 4), 1, 2, 0), 0, []int64{0, 0}, []int64{4, 1, 8}},
		{"channels_last along C", channelsLastTensor(Float32, 4, 3, 2, 5), 1, []int64{0, 2}, []int64{20, 1, 10, 2}},
		{"expanded middle dim", rawView(Float32, 6, []int64{3, 4, 2}, []int64{2, 0, 1}, 0), 0, []int64{0, 0, 0, 0}, []int64{2, 0, 1}},
		{"size-1 dim with a stride inside another dim's span keeps it", rawView(Float32, 20, []int64{4, 1, 5}, []int64{5, 2, 1}, 0), 2, []int64{0, 1, 2}, []int64{3, 2, 1}},
		{"growing size-1 dim placed by its stride: dense inside, padding above kept", rawView(Float32, 63, []int64{4, 1, 3}, []int64{20, 5, 1}, 0), 1, []int64{0, 0}, []int64{23, 3, 1}},
		{"growing size-1 dim with a huge stride stays small", rawView(Float32, 5, []int64{1, 3}, []int64{1 << 40, 2}, 0), 0, []int64{0, 0}, []int64{6, 2}},
		{"single column of a strided view", rawView(Float32, 60, []int64{5, 4}, []int64{10, 2}, 3), 1, []int64{3}, []int64{4, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, c.x.Validate())
			fillDistinct(c.x)
			got, err := c.x.Select(c.dim, c.idx)
			require.NoError(t, err)
			requireSelected(t, c.x, c.dim, c.idx, got)
			assert.Equal(t, c.strides, got.Strides)
		})
	}
}

func TestSelectOverlapping(t *testing.T) {
	windows := unfoldView(iotaTensor(Int32, 4, 10), 1, 4, 2) // [4, 4, 4] @ (10, 2, 1)
	got, err := windows.Select(0, []int64{3, 1, 3})
	require.NoError(t, err)
	requireSelected(t, windows, 0, []int64{3, 1, 3}, got)
	assert.Equal(t, []int64{10, 2, 1}, got.Strides, "windows inside a sample stay windows")
	assert.Len(t, got.Data, 30*4)

	// Along the window dim the overlap cannot be kept: the windows are spread
	// apart just enough (stride 4, not 2); the row padding of 2 stays.
	got, err = windows.Select(1, []int64{3, 0})
	require.NoError(t, err)
	requireSelected(t, windows, 1, []int64{3, 0}, got)
	assert.Equal(t, []int64{10, 4, 1}, got.Strides)

	sliding := rawView(Int64, 4, []int64{3, 2}, []int64{1, 1}, 0)
	fillDistinct(sliding)
	got, err = sliding.Select(0, []int64{2, 0})
	require.NoError(t, err)
	requireSelected(t, sliding, 0, []int64{2, 0}, got)
	assert.Equal(t, []int64{2, 1}, got.Strides)
}

func TestSelectEmptyAndExpanded(t *testing.T) {
	cl := channelsLastTensor(Float32, 4, 3, 2, 5)
	off := sliceView(cl, 0, 1, 4, 1) // offset 30
	got, err := off.Select(0, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 3, 2, 5}, got.Shape)
	assert.Equal(t, off.Strides, got.Strides)
	assert.Equal(t, int64(30), got.Offset)
	assert.Len(t, got.Data, 30*4, "an empty result keeps only the prefix")
	assert.True(t, got.IsContiguous(), "torch calls every empty tensor contiguous")
	assert.True(t, got.IsChannelsLast())
	require.NoError(t, got.Validate())

	exp := expandView(iotaTensor(Float64, 1, 4), 3, 4)
	idx := []int64{2, 2, 1, 0, 0, 1}
	got, err = exp.Select(0, idx)
	require.NoError(t, err)
	requireSelected(t, exp, 0, idx, got)
	assert.Equal(t, []int64{0, 1}, got.Strides)
	assert.Len(t, got.Data, 4*8, "an expanded dim is stored once")

	empty := MustNew(Int8, 3, 0)
	got, err = empty.Select(0, []int64{1})
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 0}, got.Shape)
}

func TestSelectCostFollowsTheSelection(t *testing.T) {
	big := iotaTensor(Float32, 4096, 256) // 4 MiB
	got, err := big.Select(0, []int64{4000})
	require.NoError(t, err)
	assert.Len(t, got.Data, 256*4)
	requireSelected(t, big, 0, []int64{4000}, got)
	allocs := func(rows []int64) float64 {
		return testing.AllocsPerRun(5, func() {
			if _, err := big.Select(0, rows); err != nil {
				panic(err)
			}
		})
	}
	many := make([]int64, 2000)
	for k := range many {
		many[k] = int64(k*7) % 4096
	}
	assert.Equal(t, allocs([]int64{1, 2, 3, 7}), allocs(many), "Select allocates per call, not per row")
}

func TestSelectErrors(t *testing.T) {
	x := iotaTensor(Float32, 3, 4)
	cases := []struct {
		name string
		t    *Tensor
		dim  int
		idx  []int64
		err  error
	}{
		{"dim too large", x, 2, []int64{0}, ErrIndex},
		{"dim too negative", x, -3, []int64{0}, ErrIndex},
		{"scalar has no dims", iotaTensor(Float32), 0, nil, ErrIndex},
		{"negative index", x, 0, []int64{0, -1}, ErrIndex},
		{"index past the end", x, 1, []int64{4}, ErrIndex},
		{"index into an empty dim", MustNew(Float32, 0, 2), 0, []int64{0}, ErrIndex},
		{"invalid tensor", rawView(Float32, 3, []int64{3, 4}, []int64{4, 1}, 0), 0, []int64{0}, ErrStorage},
		{"result too large to count", rawView(Uint8, 0, []int64{1, 1 << 62, 0}, []int64{0, 0, 0}, 0), 0, []int64{0, 0, 0, 0}, ErrOverflow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.t.Select(c.dim, c.idx)
			require.ErrorIs(t, err, c.err)
		})
	}
}

// genTensor draws a valid tensor of any layout class: a dense packing in a
// random dim order, with padding, a strided innermost dim, expanded dims,
// size-1 dims with arbitrary strides, overlaps and a storage offset.
func genTensor(rt *rapid.T, label string) *Tensor {
	rank := rapid.IntRange(0, 5).Draw(rt, label+"rank")
	shape := make([]int64, rank)
	for d := range shape {
		shape[d] = rapid.SampledFrom([]int64{1, 2, 3, 4, 1, 2, 3, 0}).Draw(rt, label+"size")
	}
	strides := make([]int64, rank)
	order := rapid.Permutation(seq(rank)).Draw(rt, label+"order") // innermost first
	next := rapid.SampledFrom([]int64{1, 1, 1, 2}).Draw(rt, label+"inner")
	for _, d := range order {
		strides[d] = next
		next = next*max(shape[d], 1) + rapid.SampledFrom([]int64{0, 0, 0, 1, 3}).Draw(rt, label+"gap")
	}
	for d := range shape {
		switch rapid.IntRange(0, 9).Draw(rt, label+"mutate") {
		case 0:
			strides[d] = 0 // expanded, or a size-1 dim with stride 0
		case 1:
			if shape[d] == 1 {
				strides[d] = rapid.SampledFrom([]int64{1, 5, 1000}).Draw(rt, label+"trivial")
			}
		case 2:
			strides[d] = max(1, strides[d]/2) // overlap
		}
	}
	dt := rapid.SampledFrom(DTypes()).Draw(rt, label+"dtype")
	offset := rapid.Int64Range(0, 6).Draw(rt, label+"offset")
	ext, err := extent(shape, strides)
	if err != nil {
		rt.Fatalf("extent: %v", err)
	}
	n := offset + ext + rapid.Int64Range(0, 3).Draw(rt, label+"slack")
	x := rawView(dt, n, shape, strides, offset)
	fillDistinct(x)
	if err := x.Validate(); err != nil {
		rt.Fatalf("generated an invalid tensor: %v", err)
	}
	return x
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestSelectProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		x := genTensor(rt, "")
		if x.Dims() == 0 {
			return
		}
		dim := rapid.IntRange(0, x.Dims()-1).Draw(rt, "dim")
		var idx []int64
		if x.Shape[dim] > 0 {
			idx = rapid.SliceOfN(rapid.Int64Range(0, x.Shape[dim]-1), 0, 6).Draw(rt, "indices")
		}
		got, err := x.Select(dim, idx)
		if err != nil {
			rt.Fatalf("Select(%d, %v) of %v@%v+%d: %v", dim, idx, x.Shape, x.Strides, x.Offset, err)
		}
		if err := got.Validate(); err != nil {
			rt.Fatalf("result invalid: %v", err)
		}
		if msg := selectedMismatch(x, dim, idx, got); msg != "" {
			rt.Fatalf("%v@%v: %s (result strides %v)", x.Shape, x.Strides, msg, got.Strides)
		}
		es := int64(x.DType.Size())
		if int64(len(got.Data)) != storageLen(x, got)*es {
			rt.Fatalf("storage of %d bytes, want %d elements", len(got.Data), storageLen(x, got))
		}
		if got.Offset != x.Offset || !bytes.Equal(got.Data[:min(got.Offset*es, int64(len(got.Data)))], x.Data[:min(x.Offset*es, int64(len(got.Data)))]) {
			rt.Fatalf("offset %d or its prefix not kept", got.Offset)
		}
		for d := range x.Shape {
			if x.Shape[d] > 1 && x.Strides[d] == 0 && got.Strides[d] != 0 {
				rt.Fatalf("expanded dim %d got stride %d", d, got.Strides[d])
			}
		}
		m := int64(len(idx))
		if m == 0 || x.Numel() == 0 {
			if !got.IsContiguous() {
				rt.Fatalf("empty result not contiguous")
			}
			return
		}
		if x.Layout().Has(LayoutOverlapping) || m < 2 {
			return // no layout promise: see Select
		}
		grown := x.Shape[dim] == 1
		if got.IsContiguous() != x.IsContiguous() {
			rt.Fatalf("%v@%v is_contiguous %v, result %v@%v %v", x.Shape, x.Strides, x.IsContiguous(), got.Shape, got.Strides, got.IsContiguous())
		}
		both := x.IsContiguous() && (x.IsChannelsLast() || x.IsChannelsLast3d())
		if !(grown && both) && (got.IsChannelsLast() != x.IsChannelsLast() || got.IsChannelsLast3d() != x.IsChannelsLast3d()) {
			rt.Fatalf("%v@%v channels_last %v/%v, result %v@%v %v/%v", x.Shape, x.Strides, x.IsChannelsLast(), x.IsChannelsLast3d(),
				got.Shape, got.Strides, got.IsChannelsLast(), got.IsChannelsLast3d())
		}
		xo, gotO := x.StrideOrder(), got.StrideOrder()
		if grown {
			gotO = slices.DeleteFunc(gotO, func(d int) bool { return d == dim })
		}
		if !slices.Equal(xo, gotO) {
			rt.Fatalf("%v@%v stride order %v, result %v@%v %v", x.Shape, x.Strides, xo, got.Shape, got.Strides, got.StrideOrder())
		}
		if x.Layout().Has(LayoutStrided) != got.Layout().Has(LayoutStrided) {
			rt.Fatalf("%v@%v is %s, result %v@%v %s", x.Shape, x.Strides, x.Layout(), got.Shape, got.Strides, got.Layout())
		}
	})
}

func TestReplace(t *testing.T) {
	for _, v := range layoutZoo(Int16) {
		t.Run(v.name, func(t *testing.T) {
			x := v.t
			donor := iotaTensor(Int16, append([]int64{2}, x.Shape[1:]...)...)
			for e := int64(0); e < donor.StorageElems(); e++ {
				donor.StoreInt(e, -1-e%1000) // differs from every value of x
			}
			got, err := x.Replace(0, 1, donor, 1)
			if !x.nests() {
				require.ErrorIs(t, err, ErrOverlap, "slice 1 shares storage with others")
			} else {
				require.NoError(t, err)
				requireReplaced(t, x, 0, 1, donor, 1, got)
			}
			// Slices that are one storage (expanded rows) or samples that do
			// not overlap each other (windows) take a donor that agrees.
			got, err = x.Replace(0, 2, x, 0)
			if x.nests() || v.name == "expanded rows" || v.name == "unfolded windows" {
				require.NoError(t, err)
			}
			if err == nil {
				requireReplaced(t, x, 0, 2, x, 0, got)
			}
		})
	}
}

func requireReplaced(t *testing.T, x *Tensor, dim int, i int64, donor *Tensor, j int64, got *Tensor) {
	t.Helper()
	assert.Equal(t, x.Shape, got.Shape)
	assert.Equal(t, x.Strides, got.Strides)
	assert.Equal(t, x.Offset, got.Offset)
	assert.Equal(t, len(x.Data), len(got.Data))
	didx := make([]int64, x.Dims())
	got.Each(func(idx []int64, e int64) {
		want := elemBytes(x, idx)
		if idx[dim] == i {
			copy(didx, idx)
			didx[dim] = j
			want = elemBytes(donor, didx)
		}
		if g := elemBytes(got, idx); !bytes.Equal(g, want) {
			t.Errorf("element %v is %x, want %x", idx, g, want)
		}
	})
}

func TestReplaceOtherDimsAndDonorLayouts(t *testing.T) {
	cl := channelsLastTensor(Float32, 3, 4, 2, 2)
	donor := iotaTensor(Float32, 3, 6, 2, 2) // contiguous, more channels
	for e := int64(0); e < donor.StorageElems(); e++ {
		donor.StoreFloat(e, -float64(e))
	}
	got, err := cl.Replace(1, 3, donor, 5)
	require.NoError(t, err)
	requireReplaced(t, cl, 1, 3, donor, 5, got)
	assert.True(t, got.IsChannelsLast())

	tr := permuteView(offsetTensor(Float64, 4, 5, 3), 1, 0)
	got, err = tr.Replace(-1, 4, tr, 0)
	require.NoError(t, err)
	requireReplaced(t, tr, 1, 4, tr, 0, got)
}

func TestReplaceErrors(t *testing.T) {
	x := iotaTensor(Float32, 3, 4)
	cases := []struct {
		name  string
		dim   int
		i, j  int64
		donor *Tensor
		err   error
	}{
		{"dtype", 0, 0, 0, iotaTensor(Float64, 3, 4), ErrDType},
		{"rank", 0, 0, 0, iotaTensor(Float32, 3, 4, 1), ErrShape},
		{"shape outside dim", 0, 0, 0, iotaTensor(Float32, 3, 5), ErrShape},
		{"i out of range", 0, 3, 0, x, ErrIndex},
		{"j out of range", 0, 0, -1, x, ErrIndex},
		{"dim", 2, 0, 0, x, ErrIndex},
		{"invalid donor", 0, 0, 0, rawView(Float32, 1, []int64{3, 4}, []int64{4, 1}, 0), ErrStorage},
		{"a column of itself", 1, 0, 3, x, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := x.Replace(c.dim, c.i, c.donor, c.j)
			if c.err == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.err)
		})
	}
	win := unfoldView(iotaTensor(Float32, 2, 6), 1, 3, 1) // [2, 4, 3] @ (6, 1, 1)
	_, err := win.Replace(1, 1, iotaTensor(Float32, 2, 4, 3), 0)
	require.ErrorIs(t, err, ErrOverlap)
	got, err := win.Replace(0, 0, win, 1) // whole samples do not overlap
	require.NoError(t, err)
	requireReplaced(t, win, 0, 0, win, 1, got)
}

func TestReplaceProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		x := genTensor(rt, "")
		if x.Dims() == 0 || x.Numel() == 0 {
			return
		}
		dim := rapid.IntRange(0, x.Dims()-1).Draw(rt, "dim")
		i := rapid.Int64Range(0, x.Shape[dim]-1).Draw(rt, "i")
		donor := x
		if rapid.Bool().Draw(rt, "fresh donor") {
			sh := append([]int64(nil), x.Shape...)
			sh[dim] = rapid.Int64Range(1, 3).Draw(rt, "donor size")
			donor = iotaTensor(x.DType, sh...)
			for e := int64(0); e < donor.StorageElems(); e++ {
				donor.StoreInt(e, 100-e)
			}
		}
		j := rapid.Int64Range(0, donor.Shape[dim]-1).Draw(rt, "j")
		got, err := x.Replace(dim, i, donor, j)
		if err != nil {
			if x.nests() {
				rt.Fatalf("Replace on a non-overlapping %v@%v: %v", x.Shape, x.Strides, err)
			}
			return
		}
		if !slices.Equal(got.Strides, x.Strides) || got.Offset != x.Offset || len(got.Data) != len(x.Data) {
			rt.Fatalf("layout changed")
		}
		didx := make([]int64, x.Dims())
		got.Each(func(idx []int64, e int64) {
			want := elemBytes(x, idx)
			if idx[dim] == i {
				copy(didx, idx)
				didx[dim] = j
				want = elemBytes(donor, didx)
			}
			if !bytes.Equal(elemBytes(got, idx), want) {
				rt.Fatalf("element %v of %v@%v wrong after Replace(%d, %d, _, %d)", idx, x.Shape, x.Strides, dim, i, j)
			}
		})
	})
}

func TestSetElements(t *testing.T) {
	x := channelsLastTensor(Int8, 2, 3, 2, 2)
	got, err := x.SetElements([][]int64{{0, 1, 1, 0}, {1, 2, 0, 1}}, -100)
	require.NoError(t, err)
	assert.Equal(t, x.Strides, got.Strides)
	x.Each(func(idx []int64, e int64) {
		want := x.LoadInt(e)
		if slices.Equal(idx, []int64{0, 1, 1, 0}) || slices.Equal(idx, []int64{1, 2, 0, 1}) {
			want = -100
		}
		assert.Equal(t, want, got.LoadInt(e), "%v", idx)
	})
	v, _ := x.Int(0, 1, 1, 0)
	assert.NotEqual(t, int64(-100), v, "the original is untouched")

	exp := expandView(iotaTensor(Float32, 1, 3), 4, 3)
	got, err = exp.SetElements([][]int64{{2, 1}}, 9)
	require.NoError(t, err)
	for r := int64(0); r < 4; r++ {
		v, _ := got.Float(r, 1)
		assert.Equal(t, 9.0, v, "an expanded dim shares its storage: every row changes")
	}
	_, err = x.SetElements([][]int64{{0, 3, 0, 0}}, 1)
	assert.ErrorIs(t, err, ErrIndex)
}

func TestContiguous(t *testing.T) {
	for _, dt := range []DType{Bool, Float16, Int64} {
		for _, v := range layoutZoo(dt) {
			x := v.t
			c := x.Contiguous()
			require.NoError(t, c.Validate(), v.name)
			assert.True(t, c.IsContiguous(), v.name)
			assert.Equal(t, ContiguousStrides(x.Shape), c.Strides, v.name)
			assert.Zero(t, c.Offset)
			assert.Len(t, c.Data, int(x.Numel())*dt.Size(), v.name)
			x.Each(func(idx []int64, e int64) {
				assert.Equal(t, elemBytes(x, idx), elemBytes(c, idx), "%s %v", v.name, idx)
			})
		}
	}
	assert.Empty(t, MustNew(Float32, 0, 3).Contiguous().Data)
	assert.Len(t, iotaTensor(Float64).Contiguous().Data, 8)
	assert.Panics(t, func() { rawView(Float32, 1, []int64{2}, []int64{1}, 0).Contiguous() })
}
