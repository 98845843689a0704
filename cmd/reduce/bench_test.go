package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"reduce/fixtures"
	"reduce/internal/testenv"
	"reduce/kernels"
)

// The main job's benchmarks run the reduce binary as a user does, one
// reduction per iteration (make bench runs them with -benchtime=1x), and
// report the replays it used and the peak resident memory of the reduce
// process, besides the wall time (ns/op).

var (
	benchBinOnce sync.Once
	benchBin     string
	benchBinErr  error
)

// reduceBinary builds the reduce binary once per test binary: without
// the race detector, whatever the tests are built with, since a reduction
// starts it once per replay as its worker. $REDUCE_BENCH_BIN names a
// binary to use instead, so that scripts/bench-compare.sh measures two
// builds with the same benchmarks.
func reduceBinary(b testing.TB) string {
	if bin := os.Getenv("REDUCE_BENCH_BIN"); bin != "" {
		return bin
	}
	benchBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "reduce-bench-")
		if err != nil {
			benchBinErr = err
			return
		}
		benchBin = filepath.Join(dir, "reduce")
		out, err := exec.Command("go", "build", "-o", benchBin, ".").CombinedOutput()
		if err != nil {
			benchBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if benchBinErr != nil {
		b.Fatal(benchBinErr)
	}
	return benchBin
}

// benchReduce runs one reduction and reports its replays and peak memory.
func benchReduce(b *testing.B, args ...string) {
	bin := reduceBinary(b)
	var replays int
	var maxRSS int64
	for i := 0; i < b.N; i++ {
		out := b.TempDir()
		cmd := exec.Command(bin, append(args, "--out", out, "--json", "-q")...)
		cmd.Env = examplesEnv(b)
		// The repository's root, as a user runs reduce in their repository:
		// a recorded step is replayed from the tree reduce runs in.
		cmd.Dir = "../.."
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			b.Fatalf("reduce %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		var sum struct {
			Event   string `json:"event"`
			Replays int    `json:"replays"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Event != "summary" {
			b.Fatalf("no summary: %v\n%s", err, lines[len(lines)-1])
		}
		replays = sum.Replays
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			maxRSS = max(maxRSS, ru.Maxrss)
		}
	}
	b.ReportMetric(float64(replays), "replays")
	b.ReportMetric(float64(maxRSS)/1024, "peak-MiB")
}

type benchExample struct {
	name  string
	flags []string
	step  string // a step of the user's own: the torch backend only
	torch string // "2": it fails only under torch 2
}

func benchExamples(b *testing.B) []benchExample {
	paths, err := filepath.Glob("../../fixtures/examples/*.expected.json")
	if err != nil || len(paths) == 0 {
		b.Fatalf("no examples: %v", err)
	}
	var out []benchExample
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		var exp struct {
			Flags []string `json:"flags"`
			Step  string   `json:"step"`
			Torch string   `json:"torch"`
		}
		if err := json.Unmarshal(data, &exp); err != nil {
			b.Fatalf("%s: %v", p, err)
		}
		out = append(out, benchExample{name: strings.TrimSuffix(filepath.Base(p), ".expected.json"), flags: exp.Flags, step: exp.Step, torch: exp.Torch})
	}
	return out
}

// BenchmarkReduceExamples reduces every example with the go and the torch
// backend, one and two replays at a time.
func BenchmarkReduceExamples(b *testing.B) {
	python, major := "", ""
	for _, ex := range benchExamples(b) {
		for _, backend := range []string{"go", "torch"} {
			for _, jobs := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%s/j%d", ex.name, backend, jobs), func(b *testing.B) {
					if ex.step != "" && backend == "go" {
						b.Skipf("recorded for a step of its own (%s): the go backend runs built-in ops only", ex.step)
					}
					args := []string{"--batch", "fixtures/examples/" + ex.name + ".bin", "--backend", backend, "-j", fmt.Sprint(jobs)}
					if backend == "torch" {
						if python == "" {
							python = testenv.Python(b, "torch")
							out, err := exec.Command(python, "-c", "import torch; print(torch.__version__.split('.')[0])").Output()
							if err != nil {
								b.Fatal(err)
							}
							major = strings.TrimSpace(string(out))
						}
						args = append(args, "--python", python)
					}
					if ex.torch == "2" && major != "2" {
						b.Skipf("fails only under torch 2, this is torch %s.x", major)
					}
					benchReduce(b, append(args, ex.flags...)...)
				})
			}
		}
	}
}

// BenchmarkReduceLarge reduces a 100,000-sample cross_entropy batch with
// one bad target, with the go backend.
func BenchmarkReduceLarge(b *testing.B) {
	const n, classes, bad = 100_000, 10, 73_519
	input := kernels.MustNew(kernels.Float32, n, classes)
	target := kernels.MustNew(kernels.Int64, n)
	for i := int64(0); i < n; i++ {
		for c := int64(0); c < classes; c++ {
			input.StoreFloat(i*classes+c, float64((i*7+c*3)%11)/11)
		}
		target.StoreInt(i, (i*5)%classes)
	}
	target.StoreInt(bad, classes)
	zero := 0
	batch := &fixtures.Batch{
		Samples: n, Op: "cross_entropy",
		Tensors: []*fixtures.Entry{{Name: "input", BatchDim: &zero, Tensor: input}, {Name: "target", BatchDim: &zero, Tensor: target}},
		Error:   &fixtures.Failure{Text: fmt.Sprintf("IndexError: Target %d is out of bounds.", classes), Exception: "IndexError"},
	}
	path := filepath.Join(b.TempDir(), "large.bin")
	if err := fixtures.Write(path, batch); err != nil {
		b.Fatal(err)
	}
	for _, jobs := range []int{1, 2} {
		b.Run(fmt.Sprintf("go/j%d", jobs), func(b *testing.B) {
			benchReduce(b, "--batch", path, "-j", fmt.Sprint(jobs))
		})
	}
}
