package kernels

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// Large inputs for BenchmarkOps, built on first use so that plain test runs
// never allocate them: the 256 MiB cross_entropy batch of issue 13 and the
// inputs of the other built-in ops at a comparable size.
var benchOpInputs benchOpSet

type benchOpSet struct {
	once        sync.Once
	logits      *Tensor // float32 [65536, 1024], 256 MiB
	probs       *Tensor // float32 [65536, 1024] in (0, 1), 256 MiB
	target      *Tensor // int64 [65536] in [0, 1024)
	tokens      *Tensor // int64 [64, 4096] in [0, 32768)
	table       *Tensor // float32 [32768, 256], 32 MiB
	rowIndex    *Tensor // int64 [32768] in [0, 65536)
	gatherIndex *Tensor // int64 [65536, 256] in [0, 1024)
	classes     *Tensor // int64 [1 << 20] in [0, 128)
	logitsT     *Tensor // logits' values stored column-major
	probTarget  *Tensor // float32 [65536, 1024] in [0, 1)
}

func benchOps() *benchOpSet {
	in := &benchOpInputs
	in.once.Do(func() {
		r := rand.New(rand.NewPCG(3, 4))
		randInts := func(hi int64, shape ...int64) *Tensor {
			t := MustNew(Int64, shape...)
			for e := range t.Numel() {
				t.StoreInt(e, r.Int64N(hi))
			}
			return t
		}
		randFloats := func(lo, hi float64, shape ...int64) *Tensor {
			t := MustNew(Float32, shape...)
			for e := range t.Numel() {
				t.StoreFloat(e, lo+(hi-lo)*r.Float64())
			}
			return t
		}
		in.logits = randFloats(-4, 4, 65536, 1024)
		in.probs = randFloats(0.01, 0.99, 65536, 1024)
		in.probTarget = randFloats(0, 1, 65536, 1024)
		in.target = randInts(1024, 65536)
		in.tokens = randInts(32768, 64, 4096)
		in.table = randFloats(-1, 1, 32768, 256)
		in.rowIndex = randInts(65536, 32768)
		in.gatherIndex = randInts(1024, 65536, 256)
		in.classes = randInts(128, 1<<20)
		in.logitsT = permuteView(randFloats(-4, 4, 1024, 65536), 1, 0)
	})
	return in
}

// BenchmarkOps runs each built-in op on a large batch; the bytes are those
// of the inputs (b.SetBytes), so MB/s compares with memory bandwidth.
func BenchmarkOps(b *testing.B) {
	in := benchOps()
	cases := []struct {
		name    string
		op      string
		tensors map[string]*Tensor
		attrs   map[string]any
	}{
		{"cross_entropy/256M", "cross_entropy", map[string]*Tensor{"input": in.logits, "target": in.target}, nil},
		{"cross_entropy/256M-none", "cross_entropy", map[string]*Tensor{"input": in.logits, "target": in.target}, map[string]any{"reduction": "none"}},
		{"cross_entropy/256M-transposed", "cross_entropy", map[string]*Tensor{"input": in.logitsT, "target": in.target}, nil},
		{"cross_entropy/256M-smoothed", "cross_entropy", map[string]*Tensor{"input": in.logits, "target": in.target}, map[string]any{"label_smoothing": 0.1}},
		{"cross_entropy/256M-prob", "cross_entropy", map[string]*Tensor{"input": in.logits, "target": in.probTarget}, nil},
		{"nll_loss/256M", "nll_loss", map[string]*Tensor{"input": in.logits, "target": in.target}, nil},
		{"embedding/64x4096x256", "embedding", map[string]*Tensor{"input": in.tokens, "weight": in.table}, nil},
		{"index_select/256M-half-rows", "index_select", map[string]*Tensor{"input": in.logits, "index": in.rowIndex}, map[string]any{"dim": int64(0)}},
		{"index/256M-half-rows", "index", map[string]*Tensor{"input": in.logits, "index": in.rowIndex}, map[string]any{"dim": int64(0)}},
		{"gather/256M", "gather", map[string]*Tensor{"input": in.logits, "index": in.gatherIndex}, map[string]any{"dim": int64(1)}},
		{"scatter_add/256M", "scatter_add", map[string]*Tensor{"input": in.logits, "index": in.gatherIndex, "src": in.probs}, map[string]any{"dim": int64(1)}},
		{"one_hot/1M-128", "one_hot", map[string]*Tensor{"tensor": in.classes}, nil},
		{"binary_cross_entropy/256M", "binary_cross_entropy", map[string]*Tensor{"input": in.probs, "target": in.probTarget}, nil},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			op, err := Lookup(c.op)
			if err != nil {
				b.Fatal(err)
			}
			var n int64
			for _, t := range c.tensors {
				n += int64(len(t.Data))
			}
			b.SetBytes(n)
			for b.Loop() {
				res, err := op.Run(ModeCPU, c.tensors, c.attrs)
				if err != nil {
					b.Fatal(err)
				}
				if res.Failure != nil {
					b.Fatal(res.Failure)
				}
			}
		})
	}
}

// BenchmarkViews measures the tensor model's copies on 256 MiB: Select of
// half the rows, Clone and Contiguous.
func BenchmarkViews(b *testing.B) {
	rows, _, transposed := benchTensors()
	half := make([]int64, 32768)
	for k := range half {
		half[k] = int64(2 * k)
	}
	cases := []struct {
		name string
		fn   func() *Tensor
	}{
		{"Select/half-rows", func() *Tensor { u, _ := rows.Select(0, half); return u }},
		{"Clone", rows.Clone},
		{"Contiguous/contiguous", rows.Contiguous},
		{"Contiguous/transposed", transposed.Contiguous},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(rows.Data)))
			for b.Loop() {
				if c.fn() == nil {
					b.Fatal("nil")
				}
			}
		})
	}
}
