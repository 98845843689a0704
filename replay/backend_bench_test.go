package replay

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/kernels"
)

// Per-replay wall time of each backend, each replay a fresh process (or a
// fresh fork). Run side by side with
//
//	go test -run '^$' -bench 'Replay' -benchtime 20x ./replay/
//
// ns/op is the wall time per replay as the reducer sees it (for zygote-j2,
// two replays run at once, so it is total time / replays); ms/replay is the
// mean latency of one replay.

// crossEntropyBatch is a cross_entropy batch whose input takes about size
// bytes (float32 [N, 128]), with valid targets: the replay runs the whole
// op and passes.
func crossEntropyBatch(tb testing.TB, size int64) *fixtures.Batch {
	const classes = 128
	n := size / (classes * 4)
	input := kernels.MustNew(kernels.Float32, n, classes)
	for i := int64(0); i < n*classes; i++ {
		binary.LittleEndian.PutUint32(input.Data[i*4:], math.Float32bits(float32(i%97)/97-0.5))
	}
	target := kernels.MustNew(kernels.Int64, n)
	for i := int64(0); i < n; i++ {
		binary.LittleEndian.PutUint64(target.Data[i*8:], uint64(i%classes))
	}
	return &fixtures.Batch{
		Samples: n, Op: "cross_entropy",
		Attrs: map[string]any{"ignore_index": json.Number("-100"), "reduction": "mean"},
		Tensors: []*fixtures.Entry{
			{Name: "input", BatchDim: fixtures.Dim(0), Tensor: input},
			{Name: "target", BatchDim: fixtures.Dim(0), Tensor: target},
		},
	}
}

// benchReplays replays the whole batch be is bound to b.N times, jobs at
// a time.
func benchReplays(b *testing.B, be Backend, jobs int, want signature.Family) {
	b.Helper()
	// One replay first, untimed: the worker binary in the page cache, the
	// zygote's first child forked.
	if v, err := be.Replay(context.Background(), whole); err != nil || v.Signature.Family != want {
		b.Fatalf("warm-up replay: %v %v\n%s", v.Signature, err, v.Result.Stderr)
	}
	var next atomic.Int64
	var latency atomic.Int64
	var failed atomic.Value
	b.ResetTimer()
	var wg sync.WaitGroup
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				v, err := be.Replay(context.Background(), whole)
				if err != nil || v.Signature.Family != want {
					failed.Store(v.Signature.String() + " " + string(v.Result.Stderr))
					return
				}
				latency.Add(int64(v.Duration))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if f := failed.Load(); f != nil {
		b.Fatalf("replay: %v", f)
	}
	b.ReportMetric(float64(latency.Load())/float64(b.N)/float64(time.Millisecond), "ms/replay")
}

func BenchmarkGoReplay1MiB(b *testing.B) {
	batch := crossEntropyBatch(b, 1<<20)
	benchReplays(b, newBackend(b, goOptions(b, "cpu"), batch), 1, signature.FamilyPass)
}

var bigBatch struct {
	once sync.Once
	b    *fixtures.Batch
}

func BenchmarkGoReplay256MiB(b *testing.B) {
	bigBatch.once.Do(func() { bigBatch.b = crossEntropyBatch(b, 256<<20) })
	o := goOptions(b, "cpu")
	o.Timeout = 10 * time.Minute
	benchReplays(b, newBackend(b, o, bigBatch.b), 1, signature.FamilyPass)
}

func BenchmarkTorchReplay(b *testing.B) {
	for _, bc := range []struct {
		name     string
		jobs     int
		noZygote bool
	}{
		{"no-zygote", 1, true},
		{"zygote-j1", 1, false},
		{"zygote-j2", 2, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o := torchOptions(b, b.TempDir())
			o.Jobs, o.NoZygote = bc.jobs, bc.noZygote
			be := exampleBackend(b, o, "four_class_targets")
			benchReplays(b, be, bc.jobs, signature.FamilyHostCheck)
		})
	}
}
