package kernels

import (
	"math"
	"testing"
)

// fuzzBytes turns fuzz input into tensor fields. Every read past the end
// yields 0, so any input decodes.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

// int64 favours small values but reaches every corner: negatives, values
// around 2^40 and 2^62 and the int64 limits, where size arithmetic overflows.
func (f *fuzzBytes) int64() int64 {
	switch k := f.byte() % 16; k {
	case 8, 9, 10:
		return int64(f.byte())
	case 11:
		return int64(f.byte())<<8 | int64(f.byte())
	case 12:
		return -1 - int64(f.byte()%4)
	case 13:
		return 1<<40 + int64(f.byte()) - 128
	case 14:
		return 1<<62 + int64(f.byte()) - 128
	case 15:
		return math.MaxInt64 - int64(f.byte())
	default:
		return int64(k)
	}
}

// fuzzEncode is the inverse of fuzzTensor for seeds: values below 2^16 and
// the markers big (2^40), huge (2^62), top (MaxInt64) and neg (-1).
func fuzzEncode(dt DType, shape, strides []int64, offset int64, bytes int) []byte {
	b := []byte{byte(dt), byte(len(shape))}
	enc := func(v int64) {
		switch {
		case v == big:
			b = append(b, 13, 128)
		case v == huge:
			b = append(b, 14, 128)
		case v == math.MaxInt64:
			b = append(b, 15, 0)
		case v < 0:
			b = append(b, 12, byte(-1-v))
		case v < 8:
			b = append(b, byte(v))
		case v < 256:
			b = append(b, 8, byte(v))
		default:
			b = append(b, 11, byte(v>>8), byte(v))
		}
	}
	for _, v := range shape {
		enc(v)
	}
	switch len(strides) - len(shape) {
	case -1:
		b = append(b, 0)
	case 1:
		b = append(b, 1)
	default:
		b = append(b, 2)
	}
	for _, v := range strides {
		enc(v)
	}
	enc(offset)
	return append(b, byte(bytes>>8), byte(bytes))
}

const (
	big  = int64(1) << 40
	huge = int64(1) << 62
)

// fuzzTensor decodes a tensor: dtype (including invalid ones), rank (up to 7,
// or MaxDims+1), shape, strides (sometimes one too few or too many), offset,
// and a storage of up to 64 KiB, possibly not a whole number of elements.
func fuzzTensor(data []byte) (*Tensor, *fuzzBytes) {
	f := &fuzzBytes{data}
	dt := DType(f.byte() % 12)
	rb := f.byte()
	rank := int(rb % 8)
	if rb == 255 {
		rank = MaxDims + 1
	}
	shape := make([]int64, rank)
	for d := range shape {
		shape[d] = f.int64()
	}
	nst := rank
	switch f.byte() % 16 {
	case 0:
		nst = max(rank-1, 0)
	case 1:
		nst = rank + 1
	}
	strides := make([]int64, nst)
	for d := range strides {
		strides[d] = f.int64()
	}
	offset := f.int64()
	size := int(f.byte())<<8 | int(f.byte())
	return &Tensor{DType: dt, Shape: shape, Strides: strides, Offset: offset, Data: make([]byte, size)}, f
}

var fuzzSeeds = [][]byte{
	fuzzEncode(Float32, []int64{3, 4}, []int64{4, 1}, 0, 48),
	fuzzEncode(Float32, []int64{3, 4}, []int64{0, 1}, 0, 16),               // expanded rows
	fuzzEncode(Float16, []int64{3, 2}, []int64{1, 1}, 1, 64),               // overlapping
	fuzzEncode(Uint8, []int64{big, big}, []int64{0, 0}, 0, 8),              // numel overflows
	fuzzEncode(Float32, []int64{huge}, []int64{2}, 0, 256),                 // extent overflows
	fuzzEncode(Float32, []int64{3}, []int64{1}, math.MaxInt64, 256),        // offset + extent overflows
	fuzzEncode(Float32, []int64{3, 0}, []int64{7, 7}, 3, 0),                // empty
	fuzzEncode(BFloat16, []int64{2, 3, 2, 2}, []int64{12, 1, 6, 3}, 1, 64), // channels_last
	fuzzEncode(Float32, []int64{3, 4}, []int64{4}, 0, 48),                  // stride count
	fuzzEncode(Int16, []int64{1, 3, 1}, []int64{7, 1, 7}, 0, 32),           // size-1 dims
	fuzzEncode(Float32, []int64{big, 3}, []int64{0, 1}, 0, 12),             // 2^40 expanded rows
	fuzzEncode(0, []int64{3}, []int64{1}, 0, 12),                           // invalid dtype
	fuzzEncode(Float32, []int64{-1, 3}, []int64{3, 1}, 0, 256),             // negative size
	fuzzEncode(Int64, []int64{2, 3}, []int64{3, neg}, 0, 256),              // negative stride
	fuzzEncode(Int64, []int64{2, 3}, []int64{3, 1}, neg, 256),              // negative offset
	fuzzEncode(Float32, []int64{4, 1, 3}, []int64{20, 5, 1}, 2, 4*80),      // padding, size-1 dim
	fuzzEncode(Int8, []int64{4, 4, 4}, []int64{10, 2, 1}, 0, 40),           // windows
	append([]byte{9, 255}, make([]byte, 200)...),                           // too many dims
}

const neg = int64(-1)

// FuzzValidate: Validate never panics, and a tensor it accepts has every
// element Each visits inside its storage, at the element StorageIndex names,
// Numel times in all. The layout predicates never panic on it either.
func FuzzValidate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		x, _ := fuzzTensor(data)
		if err := x.Validate(); err != nil {
			return
		}
		n := x.Numel()
		if n < 0 {
			t.Fatalf("negative numel %d", n)
		}
		_ = x.Layout().String()
		_ = x.IsContiguous() || x.IsChannelsLast() || x.IsChannelsLast3d()
		if n > 0 {
			if end := x.Offset + x.Extent(); end > x.StorageElems() {
				t.Fatalf("valid tensor reaches element %d of %d", end-1, x.StorageElems())
			}
		}
		if n > 1<<14 {
			return // expanded views can be valid with 2^60 elements; don't walk them
		}
		var count int64
		have := x.StorageElems()
		x.Each(func(idx []int64, e int64) {
			count++
			if e < 0 || e >= have {
				t.Fatalf("element %v at storage %d, storage has %d", idx, e, have)
			}
			se, err := x.StorageIndex(idx)
			if err != nil || se != e {
				t.Fatalf("element %v: Each says %d, StorageIndex %d (%v)", idx, e, se, err)
			}
			_ = x.LoadFloat(e)
		})
		if count != n {
			t.Fatalf("Each visited %d elements of %d", count, n)
		}
	})
}

// FuzzSelect: on any tensor, Select, Replace and Contiguous either fail with
// an error (invalid tensor or index) or return a valid tensor with the
// right values; they never panic.
func FuzzSelect(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(append(append([]byte(nil), s...), 0, 3, 1, 0, 2))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		x, rest := fuzzTensor(data)
		for e := int64(0); e < x.StorageElems(); e++ {
			x.StoreInt(e, distinctValue(x.DType, e))
		}
		dim := int(int8(rest.byte()))
		m := int(rest.byte() % 8)
		idx := make([]int64, m)
		for k := range idx {
			idx[k] = int64(int8(rest.byte()))
		}
		valid := x.Validate() == nil
		got, err := x.Select(dim, idx)
		if !valid {
			if err == nil {
				t.Fatalf("Select accepted an invalid tensor")
			}
			return
		}
		if x.Numel() > 1<<14 {
			return
		}
		c := x.Contiguous()
		if err := c.Validate(); err != nil || !c.IsContiguous() {
			t.Fatalf("Contiguous: %v", err)
		}
		if err != nil {
			return // a bad dim or index
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("Select result invalid: %v", err)
		}
		if got.Numel() <= 1<<14 {
			d, _ := x.normDim(dim)
			if msg := selectedMismatch(x, d, idx, got); msg != "" {
				t.Fatalf("%v@%v+%d Select(%d, %v): %s", x.Shape, x.Strides, x.Offset, dim, idx, msg)
			}
		}
		if m > 0 {
			r, err := x.Replace(dim, idx[0], x, idx[m-1])
			if err != nil {
				if x.nests() {
					t.Fatalf("Replace on a non-overlapping tensor: %v", err)
				}
				return
			}
			if r.Validate() != nil || len(r.Data) != len(x.Data) {
				t.Fatalf("Replace changed the layout")
			}
		}
	})
}

func TestFuzzSeedsDecode(t *testing.T) {
	x, _ := fuzzTensor(fuzzEncode(BFloat16, []int64{2, 3, 2, 2}, []int64{12, 1, 6, 3}, 1, 64))
	if x.DType != BFloat16 || len(x.Data) != 64 || x.Offset != 1 ||
		!slicesEqual(x.Shape, []int64{2, 3, 2, 2}) || !slicesEqual(x.Strides, []int64{12, 1, 6, 3}) || x.Validate() != nil {
		t.Fatalf("seed decodes to %s %v@%v+%d (%d bytes)", x.DType, x.Shape, x.Strides, x.Offset, len(x.Data))
	}
	x, _ = fuzzTensor(fuzzEncode(Uint8, []int64{big, -1}, []int64{huge, math.MaxInt64, 300}, neg, 7))
	if !slicesEqual(x.Shape, []int64{big, -1}) || !slicesEqual(x.Strides, []int64{huge, math.MaxInt64, 300}) || x.Offset != -1 || len(x.Data) != 7 {
		t.Fatalf("seed decodes to %v@%v+%d (%d bytes)", x.Shape, x.Strides, x.Offset, len(x.Data))
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
