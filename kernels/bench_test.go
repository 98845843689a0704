package kernels

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// Large inputs for BenchmarkSelect, built on first use so that plain test
// runs never allocate them.
var benchInputs struct {
	once       sync.Once
	rows       *Tensor // float32 [65536, 1024], 256 MiB, contiguous
	cl         *Tensor // float32 [4096, 64, 16, 16], 256 MiB, channels_last
	transposed *Tensor // float32 [65536, 1024] stored column-major (batch dim innermost)
}

func benchTensors() (rows, cl, transposed *Tensor) {
	benchInputs.once.Do(func() {
		benchInputs.rows = MustNew(Float32, 65536, 1024)
		fillDistinct(benchInputs.rows)
		benchInputs.cl = permuteView(MustNew(Float32, 4096, 16, 16, 64), 0, 3, 1, 2)
		fillDistinct(benchInputs.cl)
		benchInputs.transposed = permuteView(MustNew(Float32, 1024, 65536), 1, 0)
		fillDistinct(benchInputs.transposed)
	})
	return benchInputs.rows, benchInputs.cl, benchInputs.transposed
}

// BenchmarkSelect reports the bytes of the result per second (b.SetBytes).
func BenchmarkSelect(b *testing.B) {
	rows, cl, transposed := benchTensors()
	everyOther := func(n int64) []int64 {
		idx := make([]int64, n/2)
		for k := range idx {
			idx[k] = int64(2 * k)
		}
		return idx
	}
	firstHalf := func(n int64) []int64 {
		idx := make([]int64, n/2)
		for k := range idx {
			idx[k] = int64(k)
		}
		return idx
	}
	randomHalf := func(n int64) []int64 {
		r := rand.New(rand.NewPCG(1, 2))
		idx := make([]int64, n/2)
		for k := range idx {
			idx[k] = r.Int64N(n)
		}
		return idx
	}
	cases := []struct {
		name string
		t    *Tensor
		idx  []int64
	}{
		{"contiguous/1-row", rows, []int64{12345}},
		{"contiguous/half-every-other", rows, everyOther(65536)},
		{"contiguous/half-consecutive", rows, firstHalf(65536)},
		{"contiguous/half-random", rows, randomHalf(65536)},
		{"channels_last/1-sample", cl, []int64{77}},
		{"channels_last/half-every-other", cl, everyOther(4096)},
		{"transposed/half-every-other", transposed, everyOther(65536)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			out, err := c.t.Select(0, c.idx)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out.Data)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.t.Select(0, c.idx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
