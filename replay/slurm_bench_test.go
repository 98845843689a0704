package replay

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reduce/internal/signature"
)

// BenchmarkSlurmVsLocal replays the seed example with the go backend, -j 2,
// b.N times through local processes and b.N times through the Slurm
// cluster (REDUCE_SLURM=1; make bench starts the local one), and reports
// both rates and their ratio: what a job per replay costs.
//
//	go test -run '^$' -bench SlurmVsLocal -benchtime 40x ./replay/
func BenchmarkSlurmVsLocal(b *testing.B) {
	requireSlurm(b)
	lo := goOptions(b, "cpu")
	lo.Jobs = 2
	local := exampleBackend(b, lo, "four_class_targets")
	remote := exampleBackend(b, slurmOptions(lo), "four_class_targets")
	rate := func(be Backend) float64 {
		if v := replayOK(b, be, whole); v.Signature.Family != signature.FamilyHostCheck {
			b.Fatalf("%s: %v\n%s", be.Kind(), v.Signature, v.Result.Stderr)
		}
		var next atomic.Int64
		var failed atomic.Value
		start := time.Now()
		var wg sync.WaitGroup
		for range lo.Jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					v, err := be.Replay(context.Background(), whole)
					if err != nil || v.Signature.Family != signature.FamilyHostCheck {
						failed.Store(v.Signature.String() + " " + string(v.Result.Stderr))
						return
					}
				}
			}()
		}
		wg.Wait()
		if f := failed.Load(); f != nil {
			b.Fatalf("replay: %v", f)
		}
		return float64(b.N) / time.Since(start).Seconds()
	}
	b.ResetTimer()
	l := rate(local)
	s := rate(remote)
	b.StopTimer()
	b.ReportMetric(l, "local-replays/s")
	b.ReportMetric(s, "slurm-replays/s")
	b.ReportMetric(s/l, "slurm/local")
}
