package kernels

import (
	"encoding/binary"
	"math"
	"runtime"
	"sync"
)

// The ops' fast paths: they read and write whole runs of elements with one
// dtype switch per run (loadFloats, loadInts, storeFloats), visit a view
// run by run (eachRun), and move bytes with copyPlan, where the general
// paths they replace take one element at a time through Each, a multi-index
// and LoadFloat's switch. A fast path computes what the general path
// computes, in the same order, bit for bit: TestFastPaths runs both on the
// differential generator's cases and on random layouts.

// generalOnly turns every fast path off. Only tests set it, to compare the
// fast paths with the general ones.
var generalOnly bool

// loadFloats sets dst[k] to t.LoadFloat(e + k·stride).
func (t *Tensor) loadFloats(dst []float64, e, stride int64) {
	le := binary.LittleEndian
	es := int64(t.DType.Size())
	b, step := e*es, stride*es
	d := t.Data
	switch t.DType {
	case Float32:
		for k := range dst {
			dst[k] = float64(math.Float32frombits(le.Uint32(d[b:])))
			b += step
		}
	case Float64:
		for k := range dst {
			dst[k] = math.Float64frombits(le.Uint64(d[b:]))
			b += step
		}
	case BFloat16:
		for k := range dst {
			dst[k] = float64(bfloat16ToFloat32(le.Uint16(d[b:])))
			b += step
		}
	case Float16:
		for k := range dst {
			dst[k] = float64(halfToFloat32(le.Uint16(d[b:])))
			b += step
		}
	default:
		for k := range dst {
			dst[k] = t.LoadFloat(e + int64(k)*stride)
		}
	}
}

// loadInts sets dst[k] to t.LoadInt(e + k·stride).
func (t *Tensor) loadInts(dst []int64, e, stride int64) {
	le := binary.LittleEndian
	es := int64(t.DType.Size())
	b, step := e*es, stride*es
	d := t.Data
	switch t.DType {
	case Int64:
		for k := range dst {
			dst[k] = int64(le.Uint64(d[b:]))
			b += step
		}
	case Int32:
		for k := range dst {
			dst[k] = int64(int32(le.Uint32(d[b:])))
			b += step
		}
	default:
		for k := range dst {
			dst[k] = t.LoadInt(e + int64(k)*stride)
		}
	}
}

// storeFloats does t.StoreFloat(e + k·stride, src[k]) for every k.
func (t *Tensor) storeFloats(e, stride int64, src []float64) {
	le := binary.LittleEndian
	es := int64(t.DType.Size())
	b, step := e*es, stride*es
	d := t.Data
	switch t.DType {
	case Float32:
		for _, v := range src {
			le.PutUint32(d[b:], math.Float32bits(float32(v)))
			b += step
		}
	case Float64:
		for _, v := range src {
			le.PutUint64(d[b:], math.Float64bits(v))
			b += step
		}
	default:
		for k, v := range src {
			t.StoreFloat(e+int64(k)*stride, v)
		}
	}
}

// eachRun calls fn for the runs of t's elements in row-major order: n
// elements from storage element e, stride apart. A contiguous t is one run;
// otherwise each run is one row of the last dim. A 0-d t is one run of 1.
func (t *Tensor) eachRun(fn func(e, n, stride int64)) {
	total := t.Numel()
	if total == 0 {
		return
	}
	nd := len(t.Shape)
	if nd == 0 || t.IsContiguous() {
		fn(t.Offset, total, 1)
		return
	}
	n, stride := t.Shape[nd-1], t.Strides[nd-1]
	rows := &Tensor{Shape: t.Shape[:nd-1], Strides: t.Strides[:nd-1], Offset: t.Offset}
	rows.Each(func(_ []int64, e int64) { fn(e, n, stride) })
}

// rowMajorFloats sets dst[k] to t's element lo+k in row-major order.
func (t *Tensor) rowMajorFloats(lo int64, dst []float64) {
	nd := t.Dims()
	if nd == 0 || t.IsContiguous() {
		t.loadFloats(dst, t.Offset+lo, 1)
		return
	}
	idx := make([]int64, nd)
	unravelInto(idx, lo, t.Shape)
	for len(dst) > 0 {
		n := min(int64(len(dst)), t.Shape[nd-1]-idx[nd-1])
		t.loadFloats(dst[:n], storageIndex(t, idx), t.Strides[nd-1])
		dst = dst[n:]
		idx[nd-1] += n
		for d := nd - 1; d > 0 && idx[d] == t.Shape[d]; d-- {
			idx[d] = 0
			idx[d-1]++
		}
	}
}

// floatValues reads t's elements as float64 in row-major order.
func floatValues(t *Tensor) []float64 { return values(t, t.loadFloats, t.LoadFloat) }

// intValues reads t's elements as integers in row-major order.
func intValues(t *Tensor) []int64 { return values(t, t.loadInts, t.LoadInt) }

// values reads t's elements in row-major order, run by run with load, or
// one by one with one on the general path.
func values[T any](t *Tensor, load func(dst []T, e, stride int64), one func(e int64) T) []T {
	if generalOnly {
		out := make([]T, 0, t.Numel())
		t.Each(func(_ []int64, e int64) { out = append(out, one(e)) })
		return out
	}
	out := make([]T, t.Numel())
	p := int64(0)
	t.eachRun(func(e, n, stride int64) {
		load(out[p:p+n], e, stride)
		p += n
	})
	return out
}

// unravelInto is unravel writing into idx.
func unravelInto(idx []int64, i int64, shape []int64) {
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = i % shape[d]
			i /= shape[d]
		} else {
			idx[d] = 0
		}
	}
}

// parallel splits [0, n) into ranges of at least grain and runs fn on them
// in up to GOMAXPROCS goroutines. Only work whose pieces write disjoint
// outputs and whose result does not depend on the split runs through it, so
// the result is the same bit for bit as one loop's.
func parallel(n, grain int64, fn func(lo, hi int64)) {
	w := int64(runtime.GOMAXPROCS(0))
	if generalOnly || w < 2 || n < 2*grain {
		fn(0, n)
		return
	}
	w = min(w, n/grain)
	var wg sync.WaitGroup
	for k := int64(0); k < w; k++ {
		lo, hi := n*k/w, n*(k+1)/w
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
