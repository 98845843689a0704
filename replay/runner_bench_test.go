package replay

import (
	"context"
	"testing"
)

// BenchmarkRunTrue measures the Runner's cost per run: /bin/true, started,
// waited for, its group killed and its (empty) output collected.
func BenchmarkRunTrue(b *testing.B) {
	var r Runner
	ctx := context.Background()
	cmd := Command{Path: "/bin/true"}
	b.ReportAllocs()
	for b.Loop() {
		if res := r.Run(ctx, cmd); res.ExitCode != 0 || res.Err != nil {
			b.Fatalf("true: %s", describe(res))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/run")
}

// BenchmarkRunTrueRunDir adds a per-run directory with a candidate file.
func BenchmarkRunTrueRunDir(b *testing.B) {
	r := Runner{TempRoot: b.TempDir()}
	ctx := context.Background()
	cmd := Command{Path: "/bin/true", Files: map[string][]byte{"candidate.bin": make([]byte, 4096)}}
	b.ReportAllocs()
	for b.Loop() {
		if res := r.Run(ctx, cmd); res.ExitCode != 0 || res.Err != nil {
			b.Fatalf("true: %s", describe(res))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/run")
}
