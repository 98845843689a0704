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
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/testenv"
	"reduce/kernels"
)

// expectedAnswer is the part of an example's .expected.json that states
// what a reduction must find (make_examples.py's doc).
type expectedAnswer struct {
	Name  string   `json:"name"`
	Flags []string `json:"flags"`
	// Step is the step of the user's own the example records
	// ("example_steps:unique_keys_step"), "" for a built-in op.
	Step string `json:"step"`
	// Torch is "2" for an example that fails only under torch 2 (a check
	// torch 1.13 does not make), "" for one that fails under both.
	Torch          string          `json:"torch"`
	Notes          string          `json:"notes"`
	Mode           string          `json:"mode"`
	Culprits       json.RawMessage `json:"culprits"`
	CulpritSets    [][]int         `json:"culprit_sets"`
	AnySampleFails bool            `json:"any_sample_fails"`
	MinimalSamples int             `json:"minimal_samples"`
	LargestPassing *int64          `json:"largest_passing"`
	SmallestFail   *int64          `json:"smallest_failing"`
	// Predates: the cause lies before the batch (the recorded state is
	// broken): the summary says so, and names witnesses, no culprit.
	Predates bool `json:"predates"`
	// SmallestPass: a batch too small; this many copies pass.
	SmallestPass  *int64 `json:"smallest_passing"`
	OtherFailures *bool  `json:"other_failures"`
	BadElements   []struct {
		Sample int     `json:"sample"`
		Tensor string  `json:"tensor"`
		Index  []int64 `json:"index"`
		// Value is nil where JSON cannot hold it; ValueText says it
		// ("NaN").
		Value     *float64 `json:"value"`
		ValueText string   `json:"value_text"`
		Pass      *float64 `json:"passing"`
	} `json:"bad_elements"`
	// Relation: the culprits fail only together, for a relation between
	// an element of each ("equal": doc_key[5] == doc_key[222]).
	Relation *struct {
		Kind    string `json:"kind"`
		Tensor  string `json:"tensor"`
		Samples []int  `json:"samples"`
	} `json:"relation"`
	// Shape: the failure is a size along a dim of the samples.
	Shape *struct {
		Tensor          string `json:"tensor"`
		Dim             int    `json:"dim"`
		LargestPassing  int64  `json:"largest_passing"`
		SmallestFailing int64  `json:"smallest_failing"`
		// Squeezed: the dim has size 1, and the batch passes without it.
		Squeezed bool `json:"squeezed"`
	} `json:"shape"`
	Boundary *struct {
		ValidMax *float64 `json:"valid_max"`
		ValidMin *float64 `json:"valid_min"`
	} `json:"boundary"`
	// Window: the cause lies in a recorded window's earlier steps: the
	// culprit samples by step, and the elements of which the answer names
	// Named (any of them, each one listed).
	Window *struct {
		Steps []struct {
			Index  int64    `json:"index"`
			Before int64    `json:"before"`
			Rows   []int    `json:"rows"`
			IDs    []string `json:"ids"`
		} `json:"steps"`
		Elements []windowElement `json:"elements"`
		Named    int             `json:"named"`
	} `json:"window"`
	// WindowAlone: the failing step's batch of a recorded window fails
	// alone from the window's start, and is reduced as one recorded
	// without it.
	WindowAlone bool `json:"window_alone"`
	// ReplaysAtMost bounds the whole job's replays (a window's: one
	// culprit among k steps of n samples, log2(k n) + 10).
	ReplaysAtMost int `json:"replays_at_most"`
}

// summaryAnswers are the fields of the --json summary that the examples'
// relation, shape and NaN answers are checked against, decoded from the
// JSON (the contract) on their own.
type summaryAnswers struct {
	Culprits []struct {
		Indices  []int `json:"indices"`
		Relation *struct {
			Kind     string `json:"kind"`
			Elements []struct {
				Tensor string  `json:"tensor"`
				Index  []int64 `json:"index"`
			} `json:"elements"`
			Text string `json:"text"`
		} `json:"relation"`
	} `json:"culprits"`
	Shape *struct {
		Tensors         []string `json:"tensors"`
		Dims            []int    `json:"dims"`
		LargestPassing  int64    `json:"largest_passing"`
		SmallestFailing int64    `json:"smallest_failing"`
		Squeezed        bool     `json:"squeezed"`
		Text            string   `json:"text"`
	} `json:"shape"`
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
// summary against the example's expected answer. An example recorded for
// a step of the user's own runs on the torch backend only, from the
// repository's root, as a user runs reduce in their repository: the step
// (fixtures/examples/example_steps.py) lies in it.
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
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			var extra []string
			torchMajor := ""
			if backend == "torch" {
				py := testenv.Python(t, "torch")
				extra = []string{"--python", py}
				out, err := exec.Command(py, "-c", "import torch; print(torch.__version__.split('.')[0])").Output()
				require.NoError(t, err)
				torchMajor = strings.TrimSpace(string(out))
			}
			for _, p := range paths {
				data, err := os.ReadFile(p)
				require.NoError(t, err)
				var exp expectedAnswer
				require.NoError(t, json.Unmarshal(data, &exp), p)
				name := strings.TrimSuffix(filepath.Base(p), ".expected.json")
				t.Run(name, func(t *testing.T) {
					if exp.Step != "" && backend == "go" {
						t.Skipf("recorded for a step of its own (%s): the go backend runs built-in ops only", exp.Step)
					}
					if exp.Torch == "2" && torchMajor != "2" {
						t.Skipf("fails only under torch 2, this is torch %s.x: %s", torchMajor, exp.Notes)
					}
					t.Parallel()
					batch, err := filepath.Abs(strings.TrimSuffix(p, ".expected.json") + ".bin")
					require.NoError(t, err)
					args := append([]string{"--batch", batch, "--backend", backend, "--out", t.TempDir(), "--json", "-q"}, extra...)
					args = append(args, exp.Flags...)
					cmd := exec.Command(bin, args...)
					cmd.Env = examplesEnv(t)
					cmd.Dir = root
					line := summaryLine(t, cmd)
					var sum reduction.Summary
					require.NoError(t, json.Unmarshal(line, &sum))
					checkAnswer(t, exp, sum)
					var ans summaryAnswers
					require.NoError(t, json.Unmarshal(line, &ans))
					checkRelation(t, exp, ans)
					checkShape(t, exp, ans)
					checkNonFinite(t, exp, sum, batch)
				})
			}
		})
	}
}

// examplesEnv is the environment of a reduction of the examples: their
// folder, which holds the steps some of them record (example_steps.py),
// first on PYTHONPATH. The file records the step's absolute path; where
// that is gone (the repository cloned elsewhere), the step is imported by
// name.
func examplesEnv(t testing.TB) []string {
	t.Helper()
	dir, err := filepath.Abs("../../fixtures/examples")
	require.NoError(t, err)
	if old := os.Getenv("PYTHONPATH"); old != "" {
		dir += string(filepath.ListSeparator) + old
	}
	return append(os.Environ(), "PYTHONPATH="+dir) // the last of a key wins
}

// runSummary runs a reduction with --json and returns its summary, the
// last line of its standard output.
func runSummary(t *testing.T, cmd *exec.Cmd) reduction.Summary {
	t.Helper()
	var sum reduction.Summary
	require.NoError(t, json.Unmarshal(summaryLine(t, cmd), &sum))
	return sum
}

// summaryLine runs a reduction with --json and returns the last line of
// its standard output, the summary.
func summaryLine(t *testing.T, cmd *exec.Cmd) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return []byte(lines[len(lines)-1])
}

func checkAnswer(t *testing.T, exp expectedAnswer, sum reduction.Summary) {
	t.Helper()
	assert.False(t, sum.Partial)
	if exp.Mode != "" {
		assert.Equal(t, exp.Mode, string(sum.Mode), "mode (%s)", sum.ModeReason)
	}
	if exp.ReplaysAtMost > 0 {
		assert.LessOrEqual(t, sum.Replays, exp.ReplaysAtMost, "replays (%v)", sum.Phases)
	}
	if exp.WindowAlone {
		assert.Contains(t, sum.ModeReason, "the failing step's batch alone, replayed from the state at the window's start")
	}
	if exp.Window != nil {
		checkWindow(t, exp, sum)
		return
	}
	assert.Nil(t, sum.Window)
	if exp.Predates {
		assert.NotEmpty(t, sum.Predates, "the cause predates the batch (%s)", sum.ModeReason)
		return
	}
	assert.Empty(t, sum.Predates)
	if exp.SmallestPass != nil {
		require.NotNil(t, sum.Size, "size result")
		assert.Equal(t, *exp.SmallestPass, sum.Size.SmallestPassing, "smallest passing size")
		assert.Equal(t, *exp.SmallestFail, sum.Size.SmallestFailing, "smallest failing size")
		return
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
		// Any sample: its element holds the stated value, and passes
		// with one in the valid range.
		for _, be := range exp.BadElements {
			if be.Value == nil {
				continue
			}
			var e *regress.Element
			for _, x := range sum.Culprits[0].Elements {
				if x.Tensor == be.Tensor && x.Value == *be.Value {
					e = &x
				}
			}
			if assert.NotNil(t, e, "no element %s = %v: %+v", be.Tensor, *be.Value, sum.Culprits[0].Elements) && exp.Boundary != nil &&
				exp.Boundary.ValidMin != nil && assert.NotNil(t, e.Passing, "%s passing value", be.Tensor) {
				assert.GreaterOrEqual(t, *e.Passing, *exp.Boundary.ValidMin)
				assert.LessOrEqual(t, *e.Passing, *exp.Boundary.ValidMax)
			}
		}
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
				if be.ValueText != "" {
					assert.Equal(t, be.ValueText, e.ValueText, "%s%v value", e.Tensor, e.Index)
					continue // its passing value: checkNonFinite
				}
				if be.Value == nil {
					continue
				}
				assert.InDelta(t, *be.Value, e.Value, 1e-6, "%s%v value", e.Tensor, e.Index)
				wantPass := be.Pass
				if wantPass == nil && exp.Boundary != nil {
					switch {
					case exp.Boundary.ValidMax != nil && *be.Value > *exp.Boundary.ValidMax:
						wantPass = exp.Boundary.ValidMax
					case exp.Boundary.ValidMin != nil && *be.Value < *exp.Boundary.ValidMin:
						wantPass = exp.Boundary.ValidMin
					}
				}
				if wantPass != nil && assert.NotNil(t, e.Passing, "%s%v passing value", e.Tensor, e.Index) {
					assert.InDelta(t, *wantPass, *e.Passing, 1e-6, "%s%v passing value", e.Tensor, e.Index)
				}
			}
		}
		assert.True(t, found, "element %s%v not reported: %+v", be.Tensor, be.Index, sum.Culprits)
	}
}

// checkRelation: the culprit set of the expected relation reports it, kind
// and elements (the relation's tensor at each of its samples), with a text
// that names them.
// windowElement is an element the answer of a window example may name.
type windowElement struct {
	Tensor    string   `json:"tensor"`
	Index     []int64  `json:"index"`
	Value     *float64 `json:"value"`
	ValueText string   `json:"value_text"`
}

// checkWindow checks a cause found in a recorded window's earlier steps:
// the steps and samples, each found element one of those listed, and as
// many as the answer names.
func checkWindow(t *testing.T, exp expectedAnswer, sum reduction.Summary) {
	t.Helper()
	w := exp.Window
	require.NotNil(t, sum.Window, "a cause in the window's earlier steps (%s)", sum.ModeReason)
	require.Len(t, sum.Window.Steps, len(w.Steps), "steps with culprits: %+v", sum.Window.Steps)
	var found []regress.Element
	for i, s := range w.Steps {
		got := sum.Window.Steps[i]
		assert.Equal(t, s.Index, got.Index, "step")
		assert.Equal(t, s.Before, got.Before, "steps before the failing one")
		assert.Equal(t, s.Rows, got.Rows, "samples of step %d", s.Index)
		assert.Equal(t, s.IDs, got.IDs, "ids of step %d", s.Index)
		found = append(found, got.Elements...)
	}
	assert.Len(t, found, w.Named, "elements named: %+v", found)
	for _, e := range found {
		listed := slices.ContainsFunc(w.Elements, func(x windowElement) bool {
			return x.Tensor == e.Tensor && slices.Equal(x.Index, e.Index) && x.ValueText == e.ValueText &&
				(x.Value == nil || float64(float32(*x.Value)) == e.Value)
		})
		assert.True(t, listed, "element %s%v = %v %s is none of those listed", e.Tensor, e.Index, e.Value, e.ValueText)
	}
	// Every culprit listed is a witness: the failing step's batch, whole.
	require.Len(t, sum.Culprits, 1)
	assert.Len(t, sum.Culprits[0].Indices, 16, "the failing step's batch, whole")
}

func checkRelation(t *testing.T, exp expectedAnswer, ans summaryAnswers) {
	t.Helper()
	r := exp.Relation
	if r == nil {
		return
	}
	for _, c := range ans.Culprits {
		if !slices.Equal(slices.Sorted(slices.Values(c.Indices)), slices.Sorted(slices.Values(r.Samples))) {
			continue
		}
		if !assert.NotNil(t, c.Relation, "culprits %v: no relation in the summary", c.Indices) {
			return
		}
		assert.Equal(t, r.Kind, c.Relation.Kind, "relation kind")
		var want, got []string
		for _, s := range r.Samples {
			want = append(want, fmt.Sprintf("%s[%d]", r.Tensor, s))
		}
		for _, e := range c.Relation.Elements {
			got = append(got, fmt.Sprintf("%s%v", e.Tensor, e.Index))
		}
		assert.ElementsMatch(t, want, got, "relation elements")
		for _, w := range want {
			assert.Contains(t, c.Relation.Text, w, "relation text")
		}
		return
	}
	assert.Fail(t, "no culprit set of the relation", "want samples %v, got %+v", r.Samples, ans.Culprits)
}

// checkShape: the summary's shape names the expected tensor and dim and
// the same boundary.
func checkShape(t *testing.T, exp expectedAnswer, ans summaryAnswers) {
	t.Helper()
	w := exp.Shape
	if w == nil {
		return
	}
	g := ans.Shape
	if !assert.NotNil(t, g, "no shape in the summary") {
		return
	}
	i := slices.Index(g.Tensors, w.Tensor)
	if assert.GreaterOrEqual(t, i, 0, "shape tensors %v: want %s", g.Tensors, w.Tensor) && assert.Len(t, g.Dims, len(g.Tensors), "shape dims") {
		assert.Equal(t, w.Dim, g.Dims[i], "shape dim of %s", w.Tensor)
	}
	assert.Equal(t, w.Squeezed, g.Squeezed, "shape: a dim of size 1 dropped")
	assert.Equal(t, w.LargestPassing, g.LargestPassing, "shape: largest passing")
	assert.Equal(t, w.SmallestFailing, g.SmallestFailing, "shape: smallest failing")
	assert.NotEmpty(t, g.Text, "shape text")
}

// checkNonFinite: an element whose value JSON cannot hold (NaN) reports a
// finite passing value with which the op passes: the recorded batch with
// that one element set to it runs through the kernels (on the CPU) without
// a failure.
func checkNonFinite(t *testing.T, exp expectedAnswer, sum reduction.Summary, path string) {
	t.Helper()
	for _, be := range exp.BadElements {
		if be.ValueText == "" {
			continue
		}
		for _, c := range sum.Culprits {
			for _, e := range c.Elements {
				if e.Tensor != be.Tensor || !slices.Equal(e.Index, be.Index) {
					continue
				}
				if !assert.NotNil(t, e.Passing, "%s%v = %s: passing value", e.Tensor, e.Index, be.ValueText) {
					continue
				}
				p := *e.Passing
				if !assert.False(t, math.IsNaN(p) || math.IsInf(p, 0), "%s%v: passing %v is not finite", e.Tensor, e.Index, p) || exp.Step != "" {
					continue // a step's batch with the passing value was replayed by the reduction itself
				}
				b, err := fixtures.Read(path)
				require.NoError(t, err)
				op, err := kernels.Lookup(b.Op)
				require.NoError(t, err, "a non-finite element is checked on a built-in op")
				named := b.Named()
				edited := named[be.Tensor].Clone()
				require.NoError(t, edited.SetFloat(p, be.Index...))
				named[be.Tensor] = edited
				res, err := op.Run(kernels.ModeCPU, named, b.Attrs)
				require.NoError(t, err)
				assert.Nil(t, res.Failure, "%s with %s%v = %v (passing) still fails", b.Op, e.Tensor, e.Index, p)
			}
		}
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
	assert.Regexp(t, `(?m)^.*embedding-[0-9a-f]{12}\r?$`, text)

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
		{nan, `"indices":[1],"ids":[],"elements":[{"tensor":"input","index":[1],"value":"NaN","passing":0,"value_text":"NaN",`},
	} {
		out, err := exec.Command(bin, "--batch", tc.path, "--out", t.TempDir(), "--json", "-q").Output()
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		assert.Contains(t, lines[len(lines)-1], tc.want)
	}
}
