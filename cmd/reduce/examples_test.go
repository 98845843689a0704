package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/testenv"
	"reduce/kernels"
)

// expectedAnswer is the part of an example's .expected.json that states
// what a reduction must find.
type expectedAnswer struct {
	Name           string          `json:"name"`
	Flags          []string        `json:"flags"`
	Mode           string          `json:"mode"`
	Culprits       json.RawMessage `json:"culprits"`
	CulpritSets    [][]int         `json:"culprit_sets"`
	AnySampleFails bool            `json:"any_sample_fails"`
	MinimalSamples int             `json:"minimal_samples"`
	LargestPassing *int64          `json:"largest_passing"`
	SmallestFail   *int64          `json:"smallest_failing"`
	OtherFailures  *bool           `json:"other_failures"`
	BadElements    []struct {
		Sample int      `json:"sample"`
		Tensor string   `json:"tensor"`
		Index  []int64  `json:"index"`
		Value  float64  `json:"value"`
		Pass   *float64 `json:"passing"`
	} `json:"bad_elements"`
	Boundary *struct {
		ValidMax *float64 `json:"valid_max"`
		ValidMin *float64 `json:"valid_min"`
	} `json:"boundary"`
}

// sets returns the expected culprit sets: culprit_sets, or culprits as
// one set per listed sample when they are independent singletons.
func (e expectedAnswer) sets(t *testing.T) [][]int {
	if e.CulpritSets != nil {
		return e.CulpritSets
	}
	if len(e.Culprits) == 0 || string(e.Culprits) == "null" {
		return nil
	}
	var flat []int
	require.NoError(t, json.Unmarshal(e.Culprits, &flat), "%s: culprits", e.Name)
	return [][]int{flat}
}

// TestExamplesReduce reduces every example of fixtures/examples with the
// go backend and with the torch backend on real PyTorch, and checks the
// summary against the example's expected answer.
func TestExamplesReduce(t *testing.T) {
	paths, err := filepath.Glob("../../fixtures/examples/*.expected.json")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	backends := []string{"go", "torch"}
	if testing.Short() {
		backends = backends[:1]
	}
	// The reduce binary, as a user runs it (and not the race-instrumented
	// test binary as the go backend's worker, which is many times slower).
	bin := reduceBinary(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			var extra []string
			if backend == "torch" {
				extra = []string{"--python", testenv.Python(t, "torch")}
			}
			for _, p := range paths {
				data, err := os.ReadFile(p)
				require.NoError(t, err)
				var exp expectedAnswer
				require.NoError(t, json.Unmarshal(data, &exp), p)
				name := strings.TrimSuffix(filepath.Base(p), ".expected.json")
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					args := append([]string{"--batch", strings.TrimSuffix(p, ".expected.json") + ".bin",
						"--backend", backend, "--out", t.TempDir(), "--json", "-q"}, extra...)
					args = append(args, exp.Flags...)
					checkAnswer(t, exp, runSummary(t, exec.Command(bin, args...)))
				})
			}
		})
	}
}

// runSummary runs a reduction with --json and returns its summary, the
// last line of its standard output.
func runSummary(t *testing.T, cmd *exec.Cmd) summary {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var sum summary
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &sum))
	return sum
}

func checkAnswer(t *testing.T, exp expectedAnswer, sum summary) {
	t.Helper()
	assert.False(t, sum.Partial)
	if exp.Mode != "" {
		assert.Equal(t, exp.Mode, string(sum.Mode), "mode (%s)", sum.ModeReason)
	}
	if exp.LargestPassing != nil {
		require.NotNil(t, sum.Size, "size result")
		assert.Equal(t, *exp.LargestPassing, sum.Size.LargestPassing, "largest passing size")
		if exp.SmallestFail != nil {
			assert.Equal(t, *exp.SmallestFail, sum.Size.SmallestFailing, "smallest failing size")
		}
		return
	}
	if exp.OtherFailures != nil {
		assert.Equal(t, *exp.OtherFailures, len(sum.OtherFailures) > 0, "other failures: %v", sum.OtherFailures)
	}
	var got [][]int
	for _, c := range sum.Culprits {
		got = append(got, c.Indices)
	}
	if exp.AnySampleFails {
		n := max(exp.MinimalSamples, 1)
		require.Len(t, got, 1, "one finding")
		assert.Len(t, got[0], n, "any %d sample(s)", n)
		return
	}
	want := exp.sets(t)
	norm := func(s [][]int) []string {
		var out []string
		for _, x := range s {
			out = append(out, fmt.Sprint(x))
		}
		slices.Sort(out)
		return out
	}
	assert.Equal(t, norm(want), norm(got), "culprit sets")
	for _, be := range exp.BadElements {
		found := false
		for _, c := range sum.Culprits {
			for _, e := range c.Elements {
				if e.Tensor != be.Tensor || !slices.Equal(e.Index, be.Index) {
					continue
				}
				found = true
				assert.InDelta(t, be.Value, e.Value, 1e-6, "%s%v value", e.Tensor, e.Index)
				wantPass := be.Pass
				if wantPass == nil && exp.Boundary != nil {
					switch {
					case exp.Boundary.ValidMax != nil && be.Value > *exp.Boundary.ValidMax:
						wantPass = exp.Boundary.ValidMax
					case exp.Boundary.ValidMin != nil && be.Value < *exp.Boundary.ValidMin:
						wantPass = exp.Boundary.ValidMin
					}
				}
				if wantPass != nil && assert.NotNil(t, e.Passing, "%s%v passing value", e.Tensor, e.Index) {
					assert.InDelta(t, *wantPass, *e.Passing, 1e-6, "%s%v passing value", e.Tensor, e.Index)
				}
			}
		}
		assert.True(t, found, "element %s%v = %v not reported: %+v", be.Tensor, be.Index, be.Value, sum.Culprits)
	}
}

// TestProgressOnTerminal runs a reduction under a pseudo-terminal
// (util-linux's script): stderr gets the bar, redrawn in place with the
// phase, replays, sizes and rate, and cleared before the summary, which
// shares the terminal.
func TestProgressOnTerminal(t *testing.T) {
	scriptCmd, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give reduce a terminal")
	}
	bin := reduceBinary(t)
	cmdline := bin + " --batch ../../fixtures/examples/token_id_vocab.bin --out " + t.TempDir()
	out, err := exec.Command(scriptCmd, "-qec", cmdline, "/dev/null").CombinedOutput()
	require.NoError(t, err, "%s", out)
	text := string(out)
	assert.Regexp(t, `(confirm|samples|elements|boundary) +\d+ replays  size \d+  best \d+  [\d.]+/s`, text, "the bar (redrawn at most every 100 ms, so in whichever phase)")
	assert.Contains(t, text, "\r", "redrawn in place")
	// Each line of the summary starts a line of its own, the bar cleared.
	assert.Regexp(t, `(?m)(^|\r)signature: host_check`, text)
	assert.NotRegexp(t, `/s +signature:`, text)
	assert.Regexp(t, `(?m)^.*embedding-d819244e87e0\r?$`, text)

	// -q: no bar, no progress lines, only the summary.
	out, err = exec.Command(scriptCmd, "-qec", cmdline+" -q", "/dev/null").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "replays  size")
	assert.NotContains(t, string(out), "reduce: confirm")
}

// TestExtremeValues: a sentinel INT64_MAX target and a NaN probability
// are reported exactly (value_text), the sentinel's boundary is searched
// in a range the engine can bisect, and neither stops the reduction.
func TestExtremeValues(t *testing.T) {
	bin := reduceBinary(t)
	zero := 0
	write := func(name string, b *fixtures.Batch) string {
		b.Samples = b.Tensors[0].Shape[0]
		for _, e := range b.Tensors {
			e.BatchDim = &zero
		}
		path := filepath.Join(t.TempDir(), name)
		require.NoError(t, fixtures.Write(path, b))
		return path
	}
	input := kernels.MustNew(kernels.Float32, 4, 4)
	target := kernels.MustNew(kernels.Int64, 4)
	for i, v := range []int64{1, math.MaxInt64, 2, 0} {
		target.StoreInt(int64(i), v)
	}
	sentinel := write("sentinel.bin", &fixtures.Batch{Op: "cross_entropy",
		Tensors: []*fixtures.Entry{{Name: "input", Tensor: input}, {Name: "target", Tensor: target}},
		Error:   &fixtures.Failure{Text: "IndexError: Target 9223372036854775807 is out of bounds."}})
	probs := kernels.MustNew(kernels.Float32, 3)
	labels := kernels.MustNew(kernels.Float32, 3)
	probs.StoreFloat(0, 0.25)
	probs.StoreFloat(1, math.NaN())
	probs.StoreFloat(2, 0.5)
	nan := write("nan.bin", &fixtures.Batch{Op: "binary_cross_entropy",
		Tensors: []*fixtures.Entry{{Name: "input", Tensor: probs}, {Name: "target", Tensor: labels}},
		Error:   &fixtures.Failure{Text: "RuntimeError: all elements of input should be between 0 and 1"}})

	for _, tc := range []struct {
		path, want string
	}{
		{sentinel, `"indices":[1],"ids":[],"elements":[{"tensor":"target","index":[1],"value":9223372036854776000,"passing":3,"value_text":"9223372036854775807",`},
		{nan, `"indices":[1],"ids":[],"elements":[{"tensor":"input","index":[1],"value":0,"passing":null,"value_text":"NaN",`},
	} {
		out, err := exec.Command(bin, "--batch", tc.path, "--out", t.TempDir(), "--json", "-q").Output()
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		assert.Contains(t, lines[len(lines)-1], tc.want)
	}
}
