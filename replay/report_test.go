package replay

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/kernels"
)

// targetBounds is the failure four_class_targets records, as torch raises
// it on the CPU (sample 2's target 4 of 4 classes).
var targetBounds = &CPUFailure{Exception: "IndexError", Message: "Target 4 is out of bounds."}

// The go worker reports a passing op's outputs and, on failure, the
// failure on the CPU: its own in CPU mode; in CUDA mode, where the replay
// fails with a device-side assert, that of the batch run again in CPU mode.
func TestGoWorkerReport(t *testing.T) {
	for _, device := range []string{"cpu", "cuda"} {
		t.Run(device, func(t *testing.T) {
			be := exampleBackend(t, goOptions(t, device), "four_class_targets")
			v := replayOK(t, be, whole)
			require.NotNil(t, v.Report, "stdout: %s", v.Result.Stdout)
			assert.Equal(t, targetBounds, v.Report.CPU)
			assert.Empty(t, v.Report.Outputs)

			v = replayOK(t, be, keep([]int64{0, 1}))
			require.Equal(t, 0, v.Result.ExitCode, "%s", v.Result.Stderr)
			require.NotNil(t, v.Report, "stdout: %s", v.Result.Stdout)
			assert.Nil(t, v.Report.CPU)
			require.Len(t, v.Report.Outputs, 1)
			o := v.Report.Outputs[0]
			assert.Equal(t, "output", o.Name)
			assert.Equal(t, "float32", o.DType)
			assert.Equal(t, []int64{}, o.Shape)
			require.Len(t, o.Values, 1)
			assert.Equal(t, o.Values[0], o.Sum)
			assert.Equal(t, math.Abs(o.Sum), o.SumAbs)
		})
	}
}

// The torch worker reports what the go worker does, from real torch: the
// same CPU failure, and the same outputs within float32's tolerance.
func TestTorchWorkerReport(t *testing.T) {
	be := exampleBackend(t, torchOptions(t, t.TempDir()), "four_class_targets")
	ref := exampleBackend(t, goOptions(t, "cpu"), "four_class_targets")
	v := replayOK(t, be, whole)
	require.NotNil(t, v.Report, "stdout: %s\nstderr: %s", v.Result.Stdout, v.Result.Stderr)
	assert.Equal(t, targetBounds, v.Report.CPU)

	v = replayOK(t, be, keep([]int64{0, 1}))
	want := replayOK(t, ref, keep([]int64{0, 1}))
	require.NotNil(t, v.Report, "stdout: %s\nstderr: %s", v.Result.Stdout, v.Result.Stderr)
	require.NotNil(t, want.Report)
	require.Len(t, v.Report.Outputs, 1)
	got, exp := v.Report.Outputs[0], want.Report.Outputs[0]
	assert.Equal(t, exp.Name, got.Name)
	assert.Equal(t, exp.DType, got.DType)
	assert.Equal(t, exp.Shape, got.Shape)
	require.Len(t, got.Values, 1)
	assert.InDelta(t, exp.Values[0], got.Values[0], 1e-5*math.Abs(exp.Values[0])+1e-6)
}

func TestParseReport(t *testing.T) {
	ok := `reduce-report: {"outputs":[{"name":"output","dtype":"int64","shape":[2],"values":[1,2],"sum":3,"sum_abs":3}]}`
	r := ParseReport([]byte("ok cross_entropy (cpu)\n" + ok + "\n"))
	require.NotNil(t, r)
	assert.Equal(t, []float64{1, 2}, r.Outputs[0].Values)
	assert.NotNil(t, ParseReport([]byte(ok)), "a report on the first line")
	for name, stdout := range map[string]string{
		"none":             "ok cross_entropy (cpu): output float32[]\n",
		"not at a line":    "text " + ok + "\n",
		"not JSON":         "reduce-report: {\n",
		"empty":            "reduce-report: {}\n",
		"values and shape": `reduce-report: {"outputs":[{"name":"output","dtype":"int64","shape":[3],"values":[1,2],"sum":3,"sum_abs":3}]}` + "\n",
		"no name":          `reduce-report: {"outputs":[{"dtype":"int64","shape":[],"values":[1],"sum":1,"sum_abs":1}]}` + "\n",
	} {
		assert.Nil(t, ParseReport([]byte(stdout)), name)
	}
}

// A batch that passes in CUDA mode but that torch 1.13 cannot run on the
// CPU (cross_entropy of float16 logits) reports that CPU failure instead of
// outputs: a fixture's test runs a passing batch on the CPU, so the
// reduction leaves such a batch out.
func TestGoWorkerReportPassesOnlyOnTheDevice(t *testing.T) {
	input := kernels.MustNew(kernels.Float16, 2, 3)
	target := kernels.MustNew(kernels.Int64, 2)
	target.StoreInt(1, 2)
	zero := 0
	b := &fixtures.Batch{Samples: 2, Op: "cross_entropy", Tensors: []*fixtures.Entry{
		{Name: "input", BatchDim: &zero, Tensor: input}, {Name: "target", BatchDim: &zero, Tensor: target}}}
	path := filepath.Join(t.TempDir(), "half.bin")
	require.NoError(t, fixtures.Write(path, b))
	o := goOptions(t, "cuda")
	o.File = path
	v := replayOK(t, newBackend(t, o, b), whole)
	require.Equal(t, 0, v.Result.ExitCode, "%s", v.Result.Stderr)
	require.NotNil(t, v.Report, "stdout: %s", v.Result.Stdout)
	assert.Empty(t, v.Report.Outputs)
	require.NotNil(t, v.Report.CPU)
	assert.Equal(t, "RuntimeError", v.Report.CPU.Exception)
	assert.Contains(t, v.Report.CPU.Message, "not implemented for 'Half'")

	o = goOptions(t, "cpu")
	o.File = path
	v = replayOK(t, newBackend(t, o, b), whole)
	assert.Equal(t, 1, v.Result.ExitCode, "on the CPU it fails")
}
