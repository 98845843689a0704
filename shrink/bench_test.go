package shrink

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

var printTable = flag.Bool("table", false, "print the table of oracle calls (TestCallTable)")

// tableRow is one line of the call table: a failure family at one n,
// averaged over random placements.
type tableRow struct {
	n, k       int
	family     string
	conj       bool
	auto       float64 // mean calls after the confirmation, all culprit sets
	autoMax    int
	halve      float64 // the same with Options.Halve
	halveHeld  float64 // mean units held by the candidates after the confirmation, per unit: halve
	autoHeld   float64 // and auto
	autoFirst  float64 // mean calls to the first 1-minimal set
	ddmin      float64
	ddminFirst float64
	bound      int // ⌈log2 C(n,k)⌉
	target     float64
	halveMax   float64 // Halve's target
}

const (
	tableSeed       = 42
	tablePlacements = 20
)

var tableNs = []int{16, 256, 4096, 65536}

func callTable() []tableRow {
	var rows []tableRow
	for _, n := range tableNs {
		for _, f := range []struct {
			name string
			k    int
			conj bool
		}{
			{"one culprit", 1, false},
			{"2 independent", 2, false},
			{"4 independent", 4, false},
			{"8 independent", 8, false},
			{"conjunctive pair", 2, true},
		} {
			rng := rand.New(rand.NewPCG(tableSeed, uint64(n*100+f.k)))
			row := tableRow{n: n, k: f.k, family: f.name, conj: f.conj, bound: ceilLog2Binomial(n, f.k)}
			switch {
			case f.conj:
				row.target = float64(2*ceilLog2(n) + 4)
				row.halveMax = float64(3*ceilLog2(n) + 4)
			case f.k == 1:
				row.target = float64(ceilLog2(n) + 2)
			default:
				row.target = 1.5*float64(row.bound) + 2*float64(f.k)
			}
			for i := 0; i < tablePlacements; i++ {
				units := rng.Perm(n)[:f.k]
				d := singles(units...)
				if f.conj {
					d = dnf{units}
				}
				a, _ := Run(context.Background(), n, held(d.oracle(), &row.autoHeld), Options{})
				h, _ := Run(context.Background(), n, held(d.oracle(), &row.halveHeld), Options{Halve: true})
				row.halve += float64(h.Accepted - 1)
				dd, _ := Run(context.Background(), n, d.oracle(), Options{Strategy: DDMin})
				row.auto += float64(a.Accepted - 1)
				row.autoMax = max(row.autoMax, a.Accepted-1)
				row.autoFirst += float64(a.CallsToFirst)
				row.ddmin += float64(dd.Accepted - 1)
				row.ddminFirst += float64(dd.CallsToFirst)
			}
			row.auto /= tablePlacements
			row.halve /= tablePlacements
			row.autoHeld = row.autoHeld/tablePlacements/float64(n) - 1
			row.halveHeld = row.halveHeld/tablePlacements/float64(n) - 1
			if row.halveMax == 0 {
				row.halveMax = row.target
			}
			row.autoFirst /= tablePlacements
			row.ddmin /= tablePlacements
			row.ddminFirst /= tablePlacements
			rows = append(rows, row)
		}
	}
	return rows
}

// held counts the units of the candidates o is asked into *sum.
func held(o Oracle, sum *float64) Oracle {
	return func(ctx context.Context, c Candidate) (Outcome, error) {
		*sum += float64(c.Len())
		return o(ctx, c)
	}
}

func formatTable(rows []tableRow, nsPerTest map[int]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Oracle calls after the confirmation of the original, mean over %d random placements (seed %d).\n", tablePlacements, tableSeed)
	fmt.Fprintf(&b, "All culprit sets are searched for; \"first\" is the calls to the first 1-minimal set. ddmin runs uncapped.\n")
	fmt.Fprintf(&b, "%6s  %-17s %7s %5s %7s  %7s %7s  %6s %7s  %7s %7s  %6s %6s  %s\n",
		"n", "failure", "auto", "max", "first", "ddmin", "first", "bound", "target", "halve", "target", "held", "halved", "ok")
	for _, r := range rows {
		ok := "yes"
		if r.auto > r.target || r.halve > r.halveMax {
			ok = "NO"
		}
		fmt.Fprintf(&b, "%6d  %-17s %7.1f %5d %7.1f  %7.1f %7.1f  %6d %7.1f  %7.1f %7.1f  %6.1f %6.1f  %s\n",
			r.n, r.family, r.auto, r.autoMax, r.autoFirst, r.ddmin, r.ddminFirst, r.bound, r.target, r.halve, r.halveMax, r.autoHeld, r.halveHeld, ok)
	}
	fmt.Fprintf(&b, "bound: ⌈log2 C(n,k)⌉. targets: one culprit ⌈log2 n⌉+2, conjunctive pair 2⌈log2 n⌉+4 (halve: 3⌈log2 n⌉+4), k independent 1.5⌈log2 C(n,k)⌉+2k.\n")
	fmt.Fprintf(&b, "held: the units the candidates after the confirmation hold in all, per unit of n, auto and halve (Options.Halve).\n")
	if len(nsPerTest) > 0 {
		fmt.Fprintf(&b, "engine time per test (instant oracle, Jobs=1, 8 independent culprits):")
		for _, n := range tableNs {
			if v, ok := nsPerTest[n]; ok {
				fmt.Fprintf(&b, " n=%d %.0f ns", n, v)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestCallTable checks the call targets of the package documentation on
// the table's families; with -table it prints the table.
func TestCallTable(t *testing.T) {
	if testing.Short() {
		t.Skip("the call table takes a few seconds")
	}
	rows := callTable()
	if *printTable {
		fmt.Fprint(os.Stdout, formatTable(rows, nil))
	}
	for _, r := range rows {
		if r.auto > r.target {
			t.Errorf("n=%d %s: auto needs %.1f calls on average, target %.1f", r.n, r.family, r.auto, r.target)
		}
		if r.halve > r.halveMax {
			t.Errorf("n=%d %s: halve needs %.1f calls on average, target %.1f", r.n, r.family, r.halve, r.halveMax)
		}
		if r.k == 1 && (r.halve > r.auto || r.halveHeld > 3) {
			t.Errorf("n=%d one culprit: halve needs %.1f calls (auto %.1f) and holds %.1f units per unit (at most 3)", r.n, r.halve, r.auto, r.halveHeld)
		}
		if r.autoFirst > r.ddminFirst {
			t.Errorf("n=%d %s: auto needs %.1f calls to the first set on average, ddmin %.1f", r.n, r.family, r.autoFirst, r.ddminFirst)
		}
	}
}

var tableOnce sync.Once

// BenchmarkCalls prints the call table once (it is what `make bench`
// shows) and reports the engine's own time per test, with an instant
// oracle, as ns/test.
func BenchmarkCalls(b *testing.B) {
	tableOnce.Do(func() {
		ns := map[int]float64{}
		for _, n := range tableNs {
			ns[n] = engineNsPerTest(n, 8, 200)
		}
		fmt.Fprint(os.Stdout, "\n"+formatTable(callTable(), ns))
	})
	for _, n := range []int{256, 65536} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchOverhead(b, n, 8) })
	}
}

// BenchmarkOverhead is the engine's time per test for one and for eight
// independent culprits, with an instant oracle.
func BenchmarkOverhead(b *testing.B) {
	for _, n := range []int{4096, 65536} {
		for _, k := range []int{1, 8} {
			b.Run(fmt.Sprintf("n=%d/k=%d", n, k), func(b *testing.B) { benchOverhead(b, n, k) })
		}
	}
	b.Run("n=65536/k=8/jobs=4", func(b *testing.B) { benchOverheadJobs(b, 65536, 8, 4) })
}

func placements(n, k, count int) []Oracle {
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	out := make([]Oracle, count)
	for i := range out {
		out[i] = singles(rng.Perm(n)[:k]...).oracle()
	}
	return out
}

func benchOverhead(b *testing.B, n, k int) { benchOverheadJobs(b, n, k, 1) }

func benchOverheadJobs(b *testing.B, n, k, jobs int) {
	oracles := placements(n, k, 16)
	tests := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := Run(context.Background(), n, oracles[i%len(oracles)], Options{Jobs: jobs})
		if err != nil {
			b.Fatal(err)
		}
		tests += r.Tests
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tests), "ns/test")
	b.ReportMetric(float64(tests)/float64(b.N), "tests/run")
}

// engineNsPerTest measures the engine's time per test outside the
// benchmark framework, for the table's footer: runs Runs, best of three
// rounds, which discounts a busy machine.
func engineNsPerTest(n, k, runs int) float64 {
	oracles := placements(n, k, 16)
	best := math.Inf(1)
	for round := 0; round < 3; round++ {
		tests := 0
		start := time.Now()
		for i := 0; i < runs; i++ {
			r, _ := Run(context.Background(), n, oracles[i%len(oracles)], Options{})
			tests += r.Tests
		}
		best = min(best, float64(time.Since(start).Nanoseconds())/float64(tests))
	}
	return best
}
