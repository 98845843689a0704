package regress

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/internal/testenv"
	"reduce/kernels"
)

// strided is a tensor of dt with the given layout over a storage of
// offset + extent elements, storage element e holding fill(e).
func strided(dt kernels.DType, shape, strides []int64, offset int64, fill func(e int64) float64) *kernels.Tensor {
	t := &kernels.Tensor{DType: dt, Shape: shape, Strides: strides, Offset: offset}
	t.Data = make([]byte, (offset+t.Extent())*int64(dt.Size()))
	for e := range t.StorageElems() {
		t.StoreFloat(e, fill(e))
	}
	return t
}

func contiguous(dt kernels.DType, shape []int64, fill func(e int64) float64) *kernels.Tensor {
	return strided(dt, shape, kernels.ContiguousStrides(shape), 0, fill)
}

// shapeRegression is the reduction of a cross_entropy batch whose input
// (N, C, d) and target (N, d') disagree on d: content-free (no element
// triggers it), a host check on the CPU that torch raises whatever the
// values, from 8 samples to the 2 given.
func shapeRegression(t testing.TB, input, target *kernels.Tensor, ids []string) *Regression {
	t.Helper()
	b := &fixtures.Batch{Op: "cross_entropy", Attrs: map[string]any{"ignore_index": json.Number("-1")}, Samples: 2, SampleIDs: ids,
		Tensors: []*fixtures.Entry{
			{Name: "input", BatchDim: fixtures.Dim(0), Tensor: input},
			{Name: "target", BatchDim: fixtures.Dim(0), Tensor: target},
		},
		Meta: map[string]string{"torch": "1.13.1", "python": "3.11.2", "device": "cpu", "git": "0123abc"}}
	require.NoError(t, b.Validate())
	cpu, _, err := Replayed(b, 0)
	require.NoError(t, err)
	require.NotNil(t, cpu, "the batch fails on the CPU")
	rec := Record{
		Signature: signature.Signature{Family: signature.FamilyHostCheck, Backend: signature.BackendCPU, Kernel: "cross_entropy",
			Expression: "RuntimeError: Expected target size [N, N], got [N, N]", Exception: cpu.Exception},
		Match:       "strict",
		Mode:        "samples",
		ModeReason:  "dropping samples keeps the failure",
		Culprits:    []Culprit{{Indices: []int{3, 7}, IDs: ids, Elements: []Element{}}},
		Diagnosis:   "cross_entropy: host_check whatever the values of sample 3, 7 (" + strings.Join(ids, ", ") + "): the cause is a shape, dtype or size, not a value",
		CPU:         cpu,
		Replays:     12,
		Source:      RecordSource{File: "crash.bin", Samples: 8},
		Environment: RecordEnv{Backend: "go", Device: "cpu", Reduce: "test", GoOS: "linux", GoArch: "amd64"},
		Attrs:       b.Attrs,
	}
	return &Regression{Batch: b, Record: rec}
}

func ramp(e int64) float64   { return float64(e)*0.25 - 3 }
func labels(e int64) float64 { return float64(e % 3) }

// sectionOf is report.md's upstream section, from its heading.
func sectionOf(t *testing.T, report string) string {
	t.Helper()
	i := strings.Index(report, "\n## Upstream issue\n")
	require.GreaterOrEqual(t, i, 0, "no upstream section in:\n%s", report)
	return report[i+1:]
}

// issueOf is the fenced issue inside a section: the text between its
// opening fence and the one line that closes it, which must be the
// section's only closing fence.
func issueOf(t *testing.T, section string) string {
	t.Helper()
	m := regexp.MustCompile("(?m)^(```+)markdown$").FindStringSubmatchIndex(section)
	require.NotNil(t, m, "no fenced issue in:\n%s", section)
	fence := section[m[2]:m[3]]
	body := section[m[1]+1:]
	end := strings.Index(body, "\n"+fence+"\n")
	require.GreaterOrEqual(t, end, 0, "the issue's fence is not closed:\n%s", section)
	for _, l := range strings.Split(body[:end], "\n") {
		assert.False(t, strings.HasPrefix(l, fence), "a line of the issue could close its fence: %q", l)
	}
	assert.NotContains(t, body[end+len(fence)+2:], "```", "nothing fenced after the issue")
	return body[:end]
}

// snippetOf is the Python snippet of an issue.
func snippetOf(t *testing.T, issue string) string {
	t.Helper()
	m := regexp.MustCompile("(?m)^(```+)python\n").FindStringSubmatchIndex(issue)
	require.NotNil(t, m, "no Python snippet in:\n%s", issue)
	fence := issue[m[2]:m[3]]
	body := issue[m[1]:]
	end := strings.Index(body, "\n"+fence+"\n")
	require.GreaterOrEqual(t, end, 0, "the snippet's fence is not closed:\n%s", issue)
	return body[:end+1]
}

// snippetRun is what a snippet did under real torch: the exception it
// raised (nil: none), the tensors it built (variables, and a step's
// tensors dict as "tensors[<name>]"), and its "out".
type snippetRun struct {
	Raised  *string                  `json:"raised"`
	Message string                   `json:"message"`
	Tensors map[string]snippetTensor `json:"tensors"`
	Out     *snippetTensor           `json:"out"`
}

type snippetTensor struct {
	DType  string    `json:"dtype"`
	Shape  []int64   `json:"shape"`
	Stride []int64   `json:"stride"`
	Offset int64     `json:"offset"`
	Values []float64 `json:"values"`
}

const snippetHarness = `import json, sys
import torch

def describe(v):
    return {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape), "stride": list(v.stride()),
            "offset": v.storage_offset(), "values": v.detach().double().flatten().tolist()}

results = []
for src in json.load(open(sys.argv[1])):
    ns = {}
    r = {"raised": None, "message": "", "tensors": {}, "out": None}
    try:
        exec(compile(src, "<issue snippet>", "exec"), ns)
    except Exception as e:
        r["raised"], r["message"] = type(e).__name__, str(e)
    for k, v in ns.items():
        if isinstance(v, torch.Tensor) and k != "out":
            r["tensors"][k] = describe(v)
    for k, v in (ns.get("tensors") or {}).items():
        r["tensors"]["tensors[%s]" % k] = describe(v)
    if isinstance(ns.get("out"), torch.Tensor):
        r["out"] = describe(ns["out"])
    results.append(r)
json.dump(results, sys.stdout, allow_nan=False)
`

// runSnippets runs each snippet in a namespace of its own under the torch
// Python, on the CPU (a snippet for a GPU has its device set to "cpu").
func runSnippets(t *testing.T, snippets []string) []snippetRun {
	t.Helper()
	py := testenv.Python(t, "torch")
	dir := t.TempDir()
	var srcs []string
	for _, s := range snippets {
		s = strings.Replace(s, `device = "cuda"`, `device = "cpu"`, 1)
		srcs = append(srcs, strings.ReplaceAll(s, "torch.cuda.synchronize()", "pass"))
	}
	js, err := json.Marshal(srcs)
	require.NoError(t, err)
	in := filepath.Join(dir, "snippets.json")
	require.NoError(t, os.WriteFile(in, js, 0o644))
	cmd := exec.Command(py, "-c", snippetHarness, in)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var runs []snippetRun
	require.NoError(t, json.Unmarshal(out, &runs), "%s", out)
	require.Len(t, runs, len(snippets))
	return runs
}

// assertRebuilt checks that the snippet built e as recorded: dtype, shape,
// strides, offset and values (zeros when it had too many to list).
func assertRebuilt(t *testing.T, got snippetTensor, e *fixtures.Entry, what string) {
	t.Helper()
	assert.Equal(t, e.DType.String(), got.DType, what)
	assert.Equal(t, e.Shape, got.Shape, what)
	assert.Equal(t, e.Strides, got.Stride, what)
	assert.Equal(t, e.Offset, got.Offset, what)
	var want []float64
	e.Each(func(_ []int64, s int64) {
		if e.Numel() > maxSnippetValues {
			want = append(want, 0)
		} else {
			want = append(want, e.LoadFloat(s))
		}
	})
	if want == nil {
		want = []float64{}
	}
	assert.Equal(t, want, got.Values, what)
}

// deviceRegression is the reduction of a cross_entropy batch whose input
// (N, C, d) and target (N, d) meet the op's contract (every target a class
// in [0, C)), and whose minimal case fails on CUDA all the same: the
// kernel's assert fires on values inside their valid range, whatever the
// values (content-free), from 8 samples to the 2 given. The CPU replays
// nothing (CPU nil): torch computes the loss there.
func deviceRegression(t testing.TB, input, target *kernels.Tensor, ids []string) *Regression {
	t.Helper()
	b := &fixtures.Batch{Op: "cross_entropy", Attrs: map[string]any{"ignore_index": json.Number("-1")}, Samples: 2, SampleIDs: ids,
		Tensors: []*fixtures.Entry{
			{Name: "input", BatchDim: fixtures.Dim(0), Tensor: input},
			{Name: "target", BatchDim: fixtures.Dim(0), Tensor: target},
		},
		Error: &fixtures.Failure{Text: "RuntimeError: CUDA error: device-side assert triggered", Exception: "RuntimeError"},
		Meta:  map[string]string{"torch": "2.15.0", "python": "3.11.2", "cuda": "13.2", "device": "NVIDIA H200", "git": "0123abc"}}
	require.NoError(t, b.Validate())
	cpu, _, err := Replayed(b, 0)
	require.NoError(t, err)
	require.Nil(t, cpu, "the batch meets cross_entropy's contract: it passes on the CPU")
	rec := Record{
		Signature: signature.Signature{Family: signature.FamilyDeviceAssert, Backend: signature.BackendCUDA,
			Kernel: "nll_loss2d_forward_kernel", Expression: "t >= 0 && t < n_classes", Exception: "RuntimeError"},
		Match:       "strict",
		Mode:        "samples",
		ModeReason:  "dropping samples keeps the failure",
		Culprits:    []Culprit{{Indices: []int{3, 7}, IDs: ids, Elements: []Element{}}},
		Diagnosis:   "cross_entropy: device_assert whatever the values of sample 3, 7 (" + strings.Join(ids, ", ") + "): the cause is a shape, dtype or size, not a value",
		Replays:     12,
		Source:      RecordSource{File: "crash.bin", Samples: 8},
		Environment: RecordEnv{Backend: "torch", Device: "cuda", Reduce: "test", GoOS: "linux", GoArch: "amd64"},
		Attrs:       b.Attrs,
	}
	return &Regression{Batch: b, Record: rec}
}

// TestUpstreamIssueReproduces writes fixtures whose minimal case fails on
// the device with inputs that meet the op's contract (a genuine finding to
// report upstream), takes the Python snippet out of report.md's upstream
// issue and runs it with real torch on the CPU: every tensor is rebuilt as
// recorded (dtype, shape, strides, offset, values), whatever the layout:
// contiguous, permuted over a short storage, column-major at a far offset
// (a long storage), too big to list (zeros when the finding says values do
// not matter, or a stand-in that says what the values were when it needs
// them); and the op's call runs on them (the CPU's checks accept the
// inputs: they meet the contract). TestUpstreamSnippetRaises checks that a
// snippet raises what the CPU recorded.
func TestUpstreamIssueReproduces(t *testing.T) {
	ids := []string{"img-000003", "img-000007"}
	cases := map[string]func() *Regression{
		"contiguous": func() *Regression {
			return deviceRegression(t, contiguous(kernels.Float32, []int64{2, 3, 4}, ramp), contiguous(kernels.Int64, []int64{2, 4}, labels), ids)
		},
		"non-contiguous": func() *Regression {
			return deviceRegression(t,
				strided(kernels.Float32, []int64{2, 3, 4}, []int64{1, 2, 6}, 5, ramp),
				strided(kernels.Int64, []int64{2, 4}, []int64{1, 2}, 700, labels), ids)
		},
		"zeros": func() *Regression {
			return deviceRegression(t,
				strided(kernels.Float32, []int64{2, 3, 40}, []int64{1, 2, 6}, 3, ramp),
				contiguous(kernels.Int64, []int64{2, 40}, labels), ids)
		},
		"values matter": func() *Regression {
			reg := deviceRegression(t, contiguous(kernels.Float64, []int64{2, 3, 40}, ramp), contiguous(kernels.Int64, []int64{2, 40}, labels), ids)
			// An element that no rule explains: its value is in range, and
			// it may matter.
			reg.Record.Culprits[0].Elements = []Element{{Tensor: "target", Index: []int64{3, 0}, MinimalIndex: []int64{0, 0}}}
			return reg
		},
	}
	names := slices.Sorted(maps.Keys(cases))
	var regs []*Regression
	var snippets []string
	for _, name := range names {
		reg := cases[name]()
		dir, err := Write(t.TempDir(), reg)
		require.NoError(t, err, name)
		report, err := os.ReadFile(filepath.Join(dir, ReportFile))
		require.NoError(t, err)
		assert.NotContains(t, string(report), "## Cause", "%s: valid inputs have no misuse, rule or own exception", name)
		issue := issueOf(t, sectionOf(t, string(report)))
		assert.Contains(t, issue, "Title: `torch.nn.functional.cross_entropy` raises `RuntimeError` on CUDA for a 2-sample batch", name)
		assert.Contains(t, issue, "whose inputs meet its contract as far as reduce can tell", name)
		assert.Contains(t, issue, "RuntimeError: CUDA error: device-side assert triggered", name)
		snippet := snippetOf(t, issue)
		assert.Contains(t, snippet, "out = torch.nn.functional.cross_entropy(input, target, ignore_index=-1)\n", name)
		switch name {
		case "zeros":
			assert.Contains(t, snippet, "# 240 values, which do not matter: zeros fail the same way\n", name)
			assert.Contains(t, snippet, "input = torch.zeros(243, dtype=torch.float32, device=device).as_strided((2, 3, 40), (1, 2, 6), 3)\n")
		case "values matter":
			assert.Contains(t, snippet, "# 240 values stand in for the recorded ones (from -3 to 56.75), which may matter\n", name)
		case "non-contiguous":
			assert.Contains(t, snippet, ".as_strided((2, 3, 4), (1, 2, 6), 5)\n")
			assert.Contains(t, snippet, "target = torch.zeros(708, dtype=torch.int64, device=device)\n")
		}
		regs = append(regs, reg)
		snippets = append(snippets, snippet)
		if testing.Verbose() {
			t.Logf("%s:\n%s", name, sectionOf(t, string(report)))
		}
	}
	for i, run := range runSnippets(t, snippets) {
		name, reg := names[i], regs[i]
		require.Nil(t, run.Raised, "%s: the CPU refuses the inputs (%s), which the finding says meet the contract:\n%s", name, run.Message, snippets[i])
		require.NotNil(t, run.Out, "%s: the snippet calls no op", name)
		for _, arg := range []string{"input", "target"} {
			got, ok := run.Tensors[arg]
			require.True(t, ok, "%s: no tensor %s", name, arg)
			assertRebuilt(t, got, reg.Batch.Tensor(arg), name+"/"+arg)
		}
	}
}

// TestUpstreamSnippetRaises: the snippet of a minimal case that fails on
// the CPU raises, under real torch, the recorded class and the first line
// of the recorded message, with its tensors rebuilt as recorded, in every
// layout. (These cases are misuses, a target of the wrong shape, whose
// report.md offers no issue: the snippet is checked on its own.)
func TestUpstreamSnippetRaises(t *testing.T) {
	ids := []string{"img-000003", "img-000007"}
	regs := []*Regression{
		shapeRegression(t, contiguous(kernels.Float32, []int64{2, 3, 4}, ramp), contiguous(kernels.Int64, []int64{2, 5}, labels), ids),
		shapeRegression(t,
			strided(kernels.Float32, []int64{2, 3, 4}, []int64{1, 2, 6}, 5, ramp),
			strided(kernels.Int64, []int64{2, 5}, []int64{1, 2}, 700, labels), ids),
		shapeRegression(t,
			strided(kernels.Float32, []int64{2, 3, 40}, []int64{1, 2, 6}, 3, ramp),
			contiguous(kernels.Int64, []int64{2, 7}, labels), ids),
	}
	var snippets []string
	for i, reg := range regs {
		assert.Empty(t, upstreamIssue(&reg.Record, reg), "case %d: a misuse gets no upstream issue", i)
		snippet := reproduce(&reg.Record, reg, newRedactor(&reg.Record, reg))
		assert.Contains(t, snippet, "out = torch.nn.functional.cross_entropy(input, target, ignore_index=-1)\n")
		snippets = append(snippets, snippet)
	}
	assert.Contains(t, snippets[2], "input = torch.zeros(243, dtype=torch.float32).as_strided((2, 3, 40), (1, 2, 6), 3)\n",
		"the kernels confirm that zeros fail the same way")
	for i, run := range runSnippets(t, snippets) {
		reg := regs[i]
		require.NotNil(t, run.Raised, "case %d: the snippet ran without error:\n%s", i, snippets[i])
		assert.Equal(t, reg.Record.CPU.Exception, *run.Raised, i)
		assert.Equal(t, firstLine(reg.Record.CPU.Message), firstLine(run.Message), i)
		for _, arg := range []string{"input", "target"} {
			got, ok := run.Tensors[arg]
			require.True(t, ok, "case %d: no tensor %s", i, arg)
			assertRebuilt(t, got, reg.Batch.Tensor(arg), arg)
		}
	}
}

// TestUpstreamOpCalls: the snippet calls every built-in op as
// reduce_batch.run_op does: run under real torch on a batch that passes,
// it gives the outputs the kernels give. A new op fails here until it has
// a case.
func TestUpstreamOpCalls(t *testing.T) {
	i64 := func(shape []int64, vs ...float64) *kernels.Tensor {
		return contiguous(kernels.Int64, shape, func(e int64) float64 { return vs[e] })
	}
	f32 := func(shape ...int64) *kernels.Tensor {
		return contiguous(kernels.Float32, shape, func(e int64) float64 { return float64(e%5)/8 + 0.1 })
	}
	type tensor struct {
		name string
		t    *kernels.Tensor
	}
	cases := map[string]struct {
		tensors []tensor
		attrs   map[string]any
	}{
		"cross_entropy": {[]tensor{{"input", f32(2, 3)}, {"target", i64([]int64{2}, 0, 2)}, {"weight", f32(3)}},
			map[string]any{"reduction": "sum", "label_smoothing": json.Number("0.1")}},
		"nll_loss":             {[]tensor{{"input", f32(2, 3)}, {"target", i64([]int64{2}, 1, 2)}}, map[string]any{"ignore_index": json.Number("2")}},
		"binary_cross_entropy": {[]tensor{{"input", f32(3)}, {"target", f32(3)}}, map[string]any{"reduction": "none"}},
		"embedding":            {[]tensor{{"input", i64([]int64{2}, 1, 3)}, {"weight", f32(4, 2)}}, map[string]any{"padding_idx": json.Number("0")}},
		"index_select":         {[]tensor{{"input", f32(3, 2)}, {"index", i64([]int64{2}, 2, 0)}}, map[string]any{"dim": json.Number("0")}},
		"gather":               {[]tensor{{"input", f32(2, 3)}, {"index", i64([]int64{2, 2}, 0, 2, 1, 1)}}, map[string]any{"dim": json.Number("1")}},
		"scatter_add": {[]tensor{{"input", f32(2, 3)}, {"index", i64([]int64{2, 2}, 0, 2, 1, 1)}, {"src", f32(2, 2)}},
			map[string]any{"dim": json.Number("1")}},
		"one_hot": {[]tensor{{"input", i64([]int64{3}, 0, 2, 1)}}, map[string]any{"num_classes": json.Number("4")}},
		"index":   {[]tensor{{"input", f32(3, 2)}, {"index", i64([]int64{3}, 1, 0, 1)}}, map[string]any{"dim": json.Number("1")}},
	}
	for _, op := range kernels.OpNames() {
		assert.Contains(t, cases, op, "TestUpstreamOpCalls has no case of op %s", op)
	}
	var ops, snippets []string
	var wants [][]OutputValue
	for _, op := range slices.Sorted(maps.Keys(cases)) {
		c := cases[op]
		b := &fixtures.Batch{Op: op, Attrs: c.attrs}
		for _, x := range c.tensors {
			b.Tensors = append(b.Tensors, &fixtures.Entry{Name: x.name, Tensor: x.t})
		}
		cpu, outs, err := Replayed(b, 0)
		require.NoError(t, err, op)
		require.Nil(t, cpu, "%s: the case fails: %+v", op, cpu)
		reg := &Regression{Batch: b, Record: Record{Op: op, Signature: signature.Signature{Family: signature.FamilyHostCheck, Backend: signature.BackendCPU}}}
		snippet := reproduce(&reg.Record, reg, newRedactor(&reg.Record, reg))
		require.NotContains(t, snippet, "tensors = {}", "%s: the snippet does not call the op", op)
		ops, snippets, wants = append(ops, op), append(snippets, snippet), append(wants, outs)
	}
	for i, run := range runSnippets(t, snippets) {
		require.Nil(t, run.Raised, "%s raised %v: %s\n%s", ops[i], run.Raised, run.Message, snippets[i])
		require.NotNil(t, run.Out, "%s: no out\n%s", ops[i], snippets[i])
		got := OutputValue{Name: "output", DType: run.Out.DType, Shape: run.Out.Shape, Values: run.Out.Values}
		assert.NoError(t, CheckOutputs([]OutputValue{got}, wants[i]), "%s\n%s", ops[i], snippets[i])
	}
}

// TestUpstreamIssueStep: for a step of the user's own that fails on a
// device, the snippet builds the tensors on that device in a dict by name
// and says the step is the user's; names are quoted, and a fence in a
// name or in the error text does not close the issue.
func TestUpstreamIssueStep(t *testing.T) {
	reg := shapeRegression(t, contiguous(kernels.Float32, []int64{2, 3, 4}, ramp), contiguous(kernels.Int64, []int64{2, 5}, labels), []string{"a-1", "b-2"})
	reg.Batch.Op, reg.Record.Op, reg.Record.Attrs, reg.Batch.Attrs = "", "", nil, nil
	reg.Record.Step = "textclf:train_step"
	reg.Record.CPU = nil
	reg.Record.Signature = signature.Signature{Family: signature.FamilyDeviceAssert, Backend: signature.BackendCUDA,
		Kernel: "k", Expression: "t < n_classes", Exception: "RuntimeError"}
	reg.Batch.Tensors[0].Name = "in```put\"\n"
	reg.Batch.Error = &fixtures.Failure{Text: "Traceback (most recent call last):\n  File \"x.py\", line 1\n```\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported\n"}
	section := upstreamIssue(&reg.Record, reg)
	issue := issueOf(t, section)
	assert.Contains(t, issue, "Title: The step `textclf:train_step` raises `RuntimeError` on CUDA for a 2-sample batch")
	assert.Contains(t, issue, "RuntimeError: CUDA error: device-side assert triggered\n")
	snippet := snippetOf(t, issue)
	assert.Contains(t, snippet, "device = \"cuda\"\n")
	assert.Contains(t, snippet, `tensors["in`+"```"+`put\"\n"] = torch.tensor(`)
	assert.Contains(t, snippet, "device=device)")
	assert.Contains(t, snippet, "# The failing step is the user's own code")
	assert.Contains(t, issue, "CUDA_LAUNCH_BLOCKING=1")

	run := runSnippets(t, []string{snippet})[0]
	require.Nil(t, run.Raised, "%s", run.Message)
	assertRebuilt(t, run.Tensors["tensors[in```put\"\n]"], reg.Batch.Tensors[0], "input")
	assertRebuilt(t, run.Tensors["tensors[target]"], reg.Batch.Tensors[1], "target")
}

// TestJudge: what judge says of a finding's inputs, and so whether
// report.md offers an upstream issue (verdictValid only): the data when a
// rule, a relation or a size blames it; a misuse for a check of an
// argument (any host check of a built-in op that checks no value); a rule
// for a documented rule; the step's own exception when its raise raised
// it; valid for a device assert that no rule explains and for a fault;
// else unknown, and nothing for a partial record or no failure.
func TestJudge(t *testing.T) {
	host := func(expr string) signature.Signature {
		exc, _, _ := strings.Cut(expr, ": ")
		return signature.Signature{Family: signature.FamilyHostCheck, Backend: signature.BackendCPU, Expression: expr, Exception: exc}
	}
	int64s := func(vs ...float64) *kernels.Tensor {
		return contiguous(kernels.Int64, []int64{int64(len(vs))}, func(e int64) float64 { return vs[e] })
	}
	base := func() (*Record, *Regression) {
		b := &fixtures.Batch{Samples: 1, Tensors: []*fixtures.Entry{
			{Name: "x", BatchDim: fixtures.Dim(0), Tensor: contiguous(kernels.Float32, []int64{1, 3}, ramp)},
			{Name: "label", BatchDim: fixtures.Dim(0), Tensor: int64s(2)}}}
		rec := &Record{Step: "/home/alice/proj/train.py:train_step",
			Signature: signature.Signature{Family: signature.FamilyDeviceAssert, Backend: signature.BackendCUDA},
			Culprits:  []Culprit{{Indices: []int{0}}, {Indices: []int{1}, Elements: []Element{{Tensor: "target", Rule: "valid range [0, 4)"}}}}}
		return rec, &Regression{Batch: b}
	}
	op := func(rec *Record, reg *Regression) {
		rec.Step, rec.Op, reg.Batch.Op = "", "cross_entropy", "cross_entropy"
		reg.Batch.Tensors = []*fixtures.Entry{
			{Name: "input", BatchDim: fixtures.Dim(0), Tensor: contiguous(kernels.Float32, []int64{1, 3}, ramp)},
			{Name: "target", BatchDim: fixtures.Dim(0), Tensor: contiguous(kernels.Int64, []int64{1, 1}, labels)}}
	}
	raisedBy := func(by signature.Raiser, file, fn string) *signature.Raise {
		return &signature.Raise{By: by, File: file, Function: fn}
	}
	for name, tc := range map[string]struct {
		edit  func(*Record, *Regression)
		want  verdict
		words []string // in the Cause section
	}{
		"device assert, no element": {func(*Record, *Regression) {}, verdictValid, nil},
		"device assert of an op, no element": {func(r *Record, g *Regression) {
			op(r, g)
			r.Signature.Expression = "t >= 0 && t < n_classes"
		}, verdictValid, nil},
		"element without a rule": {func(r *Record, _ *Regression) {
			r.Culprits[0].Elements = []Element{{Tensor: "target", Value: 0}}
		}, verdictValid, nil},
		"range rule": {func(r *Record, _ *Regression) {
			r.Culprits[0].Elements = []Element{{Tensor: "x"}, {Tensor: "target", Rule: "values up to 3 pass"}}
		}, verdictData, nil},
		"non-finite": {func(r *Record, _ *Regression) {
			r.Culprits[0].Elements = []Element{{Tensor: "input", ValueText: "NaN", Rule: "the value is NaN"}}
		}, verdictData, nil},
		"another culprit's rule": {func(*Record, *Regression) {}, verdictValid, nil},
		"this culprit's rule":    {func(r *Record, _ *Regression) { r.Finding = 1 }, verdictData, nil},
		"partial":                {func(r *Record, _ *Regression) { r.Partial = true }, verdictNone, nil},
		"infra":                  {func(r *Record, _ *Regression) { r.Signature.Family = signature.FamilyInfra }, verdictNone, nil},
		"timeout":                {func(r *Record, _ *Regression) { r.Signature.Family = signature.FamilyTimeout }, verdictNone, nil},
		"pass":                   {func(r *Record, _ *Regression) { r.Signature.Family = signature.FamilyPass }, verdictNone, nil},
		"no family":              {func(r *Record, _ *Regression) { r.Signature.Family = "" }, verdictNone, nil},
		"a relation": {func(r *Record, _ *Regression) {
			r.Culprits[r.Finding].Elements = nil
			r.Culprits[r.Finding].Relation = &Relation{Kind: "equal", Text: "k[0] == k[1]"}
		}, verdictData, nil},
		"size": {func(r *Record, _ *Regression) {
			r.Mode, r.Size = "size", &SizeResult{LargestPassing: 3, SmallestFailing: 4}
		}, verdictData, nil},
		"shape": {func(r *Record, _ *Regression) { r.Shape = &ShapeResult{Text: "fails for x dim 1 of size 65 or more"} }, verdictData, nil},
		"oom":   {func(r *Record, _ *Regression) { r.Signature = signature.Signature{Family: signature.FamilyOOM} }, verdictData, nil},
		"an op's target of rank 2": {func(r *Record, g *Regression) {
			op(r, g)
			r.Signature = host("RuntimeError: ND or ND target tensor expected, multi-target not supported")
		}, verdictMisuse, []string{"A misuse of `torch.nn.functional.cross_entropy`", "shape [N], for `input` [N, C]",
			"here `input` is float32 [1, 3] and `target` is int64 [1, 1]", "`target.squeeze(1)`", "No upstream issue"}},
		"an op's host check that no class names": {func(r *Record, g *Regression) {
			op(r, g)
			r.Signature = host("RuntimeError: size mismatch (got input: [N, N], target: [N])")
		}, verdictMisuse, []string{"A misuse of `torch.nn.functional.cross_entropy`", "the message names the argument"}},
		"an op's check of values, no rule": {func(r *Record, g *Regression) {
			op(r, g)
			r.Signature = host("IndexError: Target N is out of bounds.")
		}, verdictData, nil},
		"a step's target of rank 2": {func(r *Record, _ *Regression) {
			r.Signature = host("RuntimeError: ND or ND target tensor expected, multi-target not supported")
			r.Raised = raisedBy(signature.RaisedByTorch, "torch/nn/functional.py", "cross_entropy")
		}, verdictMisuse, []string{"A misuse of `cross_entropy`", "`target.squeeze(1)`"}},
		"a step's target of rank 2, no traceback": {func(r *Record, _ *Regression) {
			r.Signature = host("RuntimeError: ND or ND target tensor expected, multi-target not supported")
		}, verdictMisuse, []string{"A misuse of `torch.nn.functional.cross_entropy` or `torch.nn.functional.nll_loss`"}},
		"a step's device mismatch": {func(r *Record, _ *Regression) {
			r.Signature = signature.Signature{Family: signature.FamilyDeviceMismatch, Kernel: "addmm"}
		}, verdictMisuse, []string{"on one device", "`.to(device)`"}},
		"BatchNorm on one sample": {func(r *Record, _ *Regression) {
			r.Signature = host("ValueError: Expected more than N value per channel when training, got input size torch.Size([N, N])")
		}, verdictRule, []string{"`torch.nn.functional.batch_norm`", "more than one value per channel", "drop_last=True", "No upstream issue"}},
		"every target ignored": {func(r *Record, g *Regression) {
			r.Signature = signature.Signature{Family: signature.FamilyNaNAnomaly, Expression: "FloatingPointError: loss is nan"}
			r.Raised = raisedBy(signature.RaisedByCode, "train.py", "train_step")
			g.Batch.Tensors[1].Tensor = int64s(-100, -100)
		}, verdictRule, []string{"`label` (int64 [2]) holds -100 (`ignore_index`) in every element", "0/0", "reduction='sum'"}},
		"a NaN with a target left": {func(r *Record, g *Regression) {
			r.Signature = signature.Signature{Family: signature.FamilyNaNAnomaly, Expression: "FloatingPointError: loss is nan"}
			g.Batch.Tensors[1].Tensor = int64s(-100, 3)
		}, verdictUnknown, []string{"cannot tell"}},
		"the step's own raise": {func(r *Record, _ *Regression) {
			r.Signature = host("ValueError: expected RGB images with N channels, got N")
			r.Raised = raisedBy(signature.RaisedByCode, "train.py", "train_step")
		}, verdictOwn, []string{"The step raised this exception itself", "`train_step` in `train.py`", "No upstream issue"}},
		"torch's check that reduce does not know": {func(r *Record, _ *Regression) {
			r.Signature = host("RuntimeError: mat1 and mat2 shapes cannot be multiplied (NxN and NxN)")
			r.Raised = raisedBy(signature.RaisedByCall, "train.py", "train_step")
		}, verdictUnknown, []string{"A call in `train_step` (`train.py`)", "cannot tell"}},
		"an unknown exception, no traceback": {func(r *Record, _ *Regression) {
			r.Signature = host("KeyError: 'labels'")
		}, verdictUnknown, []string{"cannot tell"}},
		"an internal assert": {func(r *Record, _ *Regression) {
			r.Signature = host("RuntimeError: t.is_contiguous() INTERNAL ASSERT FAILED at \"aten/src/ATen/native/X.cpp\":N, please report a bug to PyTorch.")
			r.Raised = raisedBy(signature.RaisedByCall, "train.py", "train_step")
		}, verdictValid, nil},
		"a crash": {func(r *Record, _ *Regression) {
			r.Signature = signature.Signature{Family: signature.FamilyCrashSignal, Expression: "killed by SIGSEGV"}
		}, verdictValid, nil},
	} {
		rec, reg := base()
		tc.edit(rec, reg)
		j := judge(rec, reg)
		assert.Equal(t, tc.want, j.verdict, name)
		section := causeSection(j)
		for _, w := range tc.words {
			assert.Contains(t, section, w, name)
		}
		switch tc.want {
		case verdictMisuse, verdictRule, verdictOwn, verdictUnknown:
			assert.True(t, strings.HasPrefix(section, "## Cause\n\n"), "%s: %q", name, section)
		default:
			assert.Empty(t, section, name)
		}
		issue := upstreamIssue(rec, reg)
		assert.Equal(t, tc.want == verdictValid, issue != "", "%s: an upstream issue for valid inputs only", name)
		assert.NotContains(t, issue, "/home/alice", name)
	}
	assert.Equal(t, verdictNone, judge(nil, nil).verdict)

	// The committed example blames a value (target 4 of 4 classes): no
	// section, and report.md ends as before.
	reg := exampleRegression(t, nil)
	assert.Empty(t, upstreamIssue(&reg.Record, reg))
	report := string(regressReport("DIR", &reg.Record, reg))
	assert.NotContains(t, report, "Upstream issue")
	assert.NotContains(t, report, "## Cause")
	assert.True(t, strings.HasSuffix(report, "before and after the fix.\n") || strings.Contains(report, "## Fixes in the data"), report)
}

// TestUpstreamIssueRedaction: no sample id, home directory, user or host
// name of the record, the batch's meta or its error text reaches the
// issue, in any form.
func TestUpstreamIssueRedaction(t *testing.T) {
	ids := []string{hostileID, "patient-0042"}
	reg := deviceRegression(t, contiguous(kernels.Float32, []int64{2, 3, 4}, ramp), contiguous(kernels.Int64, []int64{2, 4}, labels), ids)
	const host = "gpu-node-7.cluster.example.org"
	reg.Batch.Meta["host"] = host
	reg.Batch.Meta["executable"] = "/home/alice/venvs/torch/bin/python"
	reg.Batch.Meta["device"] = "NVIDIA A100 on gpu-node-7"
	reg.Batch.Meta["python"] = "3.11.2 (/Users/bob.smith/py)"
	reg.Record.Environment.Meta = map[string]string{"slurm.nodes": "gpu-node-7,gpu-node-8"}
	reg.Record.Environment.Torch = "1.13.1 from /root/wheels"
	reg.Record.Source.File = "/home/alice/runs/crash.bin"
	reg.Record.Diagnosis += " on gpu-node-8 for alice_runs at C:\\Users\\carol\\data"
	reg.Record.CPU = &CPUFailure{Exception: "RuntimeError", Message: "Expected target size [2, 4], got [2, 5] for patient-0042 in /home/alice/data on " + host}
	reg.Batch.Error = &fixtures.Failure{Text: "Traceback (most recent call last):\n  File \"/home/alice/proj/train.py\", line 3, in <module>\n" +
		"RuntimeError: sample " + hostileID + " on gpu-node-7 (alice)\n"}
	dir, err := Write(t.TempDir(), reg)
	require.NoError(t, err)
	report, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	section := sectionOf(t, string(report))
	issue := issueOf(t, section)
	for _, secret := range []string{"alice", "bob.smith", "carol", "/home/", "/Users/", "/root", `C:\`, "gpu-node-7", "gpu-node-8",
		"cluster.example.org", "patient-0042", "{{.X}}", "🙂", "img\"", "img\\\"", `\u2028`, "0123abc"} {
		assert.NotContains(t, section, secret)
	}
	for _, want := range []string{"Expected target size [2, 4], got [2, 5] for <id> in ~/data on <host>", "torch `1.13.1 from ~/wheels`",
		"python `3.11.2 (~/py)`", "device `NVIDIA A100 on <host>`", `\<host\> for \<user\>\_runs at ~\\data`} {
		assert.Contains(t, issue, want)
	}

	// Without a CPU failure, the line comes from the recorded traceback,
	// redacted too.
	reg.Record.CPU = nil
	reg.Record.Signature.Backend = signature.BackendCUDA
	issue = issueOf(t, upstreamIssue(&reg.Record, reg))
	assert.Contains(t, issue, "RuntimeError: sample <id> on <host> (<user>)\n")
	assert.NotContains(t, issue, "alice")

	// Short names are left alone: they would hit every message.
	red := newRedactor(&Record{}, &Regression{Batch: &fixtures.Batch{SampleIDs: []string{"7", "ab"}, Meta: map[string]string{"user": "ml"}}})
	assert.Equal(t, "size 7 of ab, ml", red.text("size 7 of ab, ml"))
	red = newRedactor(&Record{}, &Regression{Batch: &fixtures.Batch{SampleIDs: []string{"s-12", "host"}, Meta: map[string]string{"host": "host"}}})
	assert.Equal(t, "s-123 <id> <id>: <id>", red.text("s-123 s-12 host: host"), "whole words only, replaced once")
}

// TestUpstreamAttrValues: attribute values become Python literals of their
// kind; a string is quoted.
func TestUpstreamAttrValues(t *testing.T) {
	for v, want := range map[any]string{nil: "None", true: "True", "mean": `"mean"`, json.Number("-100"): "-100",
		json.Number("0.5"): "0.5", json.Number("1e400"): `float("inf")`, json.Number("x"): `"x"`, 3.0: "3", 0.25: "0.25", int64(7): "7",
		"a\"\n": `"a\"\n"`} {
		assert.Equal(t, want, pyValue(v), "%#v", v)
	}
	assert.Equal(t, "[1, None]", pyValue([]any{json.Number("1"), nil}))
	assert.Equal(t, "()", pyTuple(nil))
	assert.Equal(t, "(3,)", pyTuple([]int64{3}))
	assert.Equal(t, "(2, "+strconv.Itoa(3)+")", pyTuple([]int64{2, 3}))
}

// FuzzUpstreamIssue feeds arbitrary sample ids, messages and tensor names
// to the upstream section: it renders without failing, and nothing in it
// closes the issue's fence or the snippet's.
func FuzzUpstreamIssue(f *testing.F) {
	for _, s := range []string{hostileID, "", "`", "````", "\\", "/home/x/y", "\xff\xfe", "\u2028", "a\n```python\nb"} {
		f.Add(s, s, s)
	}
	base := deviceRegression(f, contiguous(kernels.Float32, []int64{2, 3, 4}, ramp), contiguous(kernels.Int64, []int64{2, 4}, labels), nil)
	f.Fuzz(func(t *testing.T, id, msg, name string) {
		reg := *base
		b := *base.Batch
		b.SampleIDs = []string{id, id + "2"}
		b.Tensors = []*fixtures.Entry{{Name: name, BatchDim: fixtures.Dim(0), Tensor: base.Batch.Tensors[0].Tensor}, base.Batch.Tensors[1]}
		b.Error = &fixtures.Failure{Text: msg}
		reg.Batch = &b
		rec := base.Record
		rec.Culprits = []Culprit{{Indices: []int{3, 7}, IDs: b.SampleIDs}}
		rec.CPU = &CPUFailure{Exception: "RuntimeError", Message: msg}
		rec.Diagnosis = msg
		section := upstreamIssue(&rec, &reg)
		require.True(t, strings.HasPrefix(section, "\n## Upstream issue\n\n"))
		snippetOf(t, issueOf(t, section))
		assert.NotContains(t, section, "\x00")
	})
}
