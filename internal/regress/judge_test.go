package regress_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/regress"
	"reduce/internal/signature"
)

// committed is a fixture of fixtures/regress, as the plugin's tests read it.
func committed(t *testing.T, name string) *regress.Fixture {
	t.Helper()
	f, err := regress.ReadFixture(filepath.Join("..", "..", "fixtures", "regress", name))
	require.NoError(t, err)
	return f
}

// traceback is a run in the test session that raised: Python's traceback.
func traceback(line string) string {
	return "Traceback (most recent call last):\n  File \"/repo/tests/run.py\", line 3, in <module>\n    step(batch)\n" + line + "\n"
}

// TestJudgeRun: what a run of a fixture's batch means is the reduction's
// judge's to say, from what the plugin reports.
func TestJudgeRun(t *testing.T) {
	ce := committed(t, "cross_entropy-4ecd1e1d6241") // IndexError: Target 5 is out of bounds. (host_check)
	failed := signature.ExitInfo{Code: 1}
	for _, c := range []struct {
		name    string
		run     regress.Run
		outcome string
		why     string
	}{
		{"the recorded failure", regress.Run{Batch: "batch.bin", Exit: failed,
			Stderr: traceback("IndexError: Target 5 is out of bounds.")}, regress.OutcomeRecorded, "IndexError"},
		{"another target, the same check", regress.Run{Batch: "batch.bin", Exit: failed,
			Stderr: traceback("IndexError: Target 7 is out of bounds.")}, regress.OutcomeRecorded, ""},
		{"another failure", regress.Run{Batch: "batch.bin", Exit: failed,
			Stderr: traceback("RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")}, regress.OutcomeOther, "RuntimeError: mat1 and mat2 shapes cannot be multiplied (Nx3 and Nx5) [RuntimeError], where the record has host_check(cpu) IndexError"},
		{"a crash", regress.Run{Batch: "batch.bin", Exit: signature.ExitInfo{Code: -1, Signal: 11}}, regress.OutcomeOther, "SIGSEGV"},
		{"a timeout", regress.Run{Batch: "batch.bin", Exit: signature.ExitInfo{TimedOut: true}}, regress.OutcomeOther, "timeout"},
		{"fixed", regress.Run{Batch: "batch.bin", Outputs: []regress.OutputSummary{{DType: "float32", Shape: []int64{}, Finite: true}}},
			regress.OutcomePass, ""},
		{"fixed, to NaN", regress.Run{Batch: "batch.bin", Outputs: []regress.OutputSummary{{DType: "float32", Shape: []int64{}}}},
			regress.OutcomeOther, "the output (float32[]) is not finite"},
		{"fixed, another shape", regress.Run{Batch: "batch.bin",
			Outputs: []regress.OutputSummary{{DType: "float32", Shape: []int64{3}, Finite: true}},
			Like:    []regress.OutputSummary{{DType: "float32", Shape: []int64{}, Finite: true}}},
			regress.OutcomeOther, "the output: float32[3], want float32[]"},
		{"the boundary, as recorded", regress.Run{Batch: "boundary.bin",
			Values: []regress.OutputValue{{Name: "output", DType: "float32", Shape: []int64{}, Values: []float64{1.6094380}}}},
			regress.OutcomePass, ""},
		{"the boundary, off", regress.Run{Batch: "boundary.bin",
			Values: []regress.OutputValue{{Name: "output", DType: "float32", Shape: []int64{}, Values: []float64{1.7}}}},
			regress.OutcomeOther, "output: value 0 is 1.7, want 1.6094379425048828"},
		{"the boundary, its values not reported", regress.Run{Batch: "boundary.bin",
			Outputs: []regress.OutputSummary{{Path: "", DType: "float32", Shape: []int64{}, Finite: true}}},
			regress.OutcomePass, ""},
		{"the boundary, no output reported", regress.Run{Batch: "boundary.bin", Values: []regress.OutputValue{}},
			regress.OutcomeOther, `no output "output"`},
		{"the boundary fails", regress.Run{Batch: "boundary_other_end.bin", Exit: failed,
			Stderr: traceback("IndexError: Target 5 is out of bounds.")}, regress.OutcomeOther, "it fails: "},
	} {
		v, err := regress.JudgeRun(ce, c.run)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.outcome, v.Outcome, "%s: %+v", c.name, v)
		assert.Contains(t, v.Why, c.why, c.name)
	}

	// A NaN check of a step of the user's own: the family's rule.
	nan := committed(t, "regression_step-b2d61c6ef2f0") // FloatingPointError: loss is inf
	v, err := regress.JudgeRun(nan, regress.Run{Batch: "batch.bin", Exit: failed, Stderr: traceback("FloatingPointError: loss is inf")})
	require.NoError(t, err)
	assert.Equal(t, regress.OutcomeRecorded, v.Outcome, "%+v", v)
	v, err = regress.JudgeRun(nan, regress.Run{Batch: "batch.bin", Exit: failed, Stderr: traceback("IndexError: Target 5 is out of bounds.")})
	require.NoError(t, err)
	assert.Equal(t, regress.OutcomeOther, v.Outcome, "%+v", v)

	// The record's placeholders stand for what the run names: the host, the
	// user it ran as.
	redacted := committed(t, "unique_keys_step-7532391bc7ce")
	redacted.Record.Signature.Expression = "ValueError: cannot open the cache of <user> on <host>"
	for text, want := range map[string]string{
		"ValueError: cannot open the cache of jdoe42 on gpu-node-7": regress.OutcomeRecorded,
		"ValueError: cannot open the cache of jdoe42 at gpu-node-7": regress.OutcomeOther,
	} {
		v, err := regress.JudgeRun(redacted, regress.Run{Batch: "batch.bin", Exit: failed, Stderr: traceback(text)})
		require.NoError(t, err)
		assert.Equal(t, want, v.Outcome, "%s: %+v", text, v)
	}

	// Reduced on a device, run on the CPU: the failure the record says the
	// minimal batch raises there.
	onGPU := committed(t, "cross_entropy-4ecd1e1d6241")
	onGPU.Record.Environment.Device = "cuda"
	onGPU.Record.Signature = signature.Signature{Family: signature.FamilyDeviceAssert, Backend: signature.BackendCUDA,
		Expression: "Assertion `x` failed.", File: "SomeKernel.cu"}
	for device, want := range map[string]string{"cpu": regress.OutcomeRecorded, "cuda": regress.OutcomeOther} {
		v, err := regress.JudgeRun(onGPU, regress.Run{Batch: "batch.bin", Device: device, Exit: failed,
			Stderr: traceback("IndexError: Target 5 is out of bounds.")})
		require.NoError(t, err)
		assert.Equal(t, want, v.Outcome, "%s: %+v", device, v)
	}

	// A fixture names its own files only.
	for _, name := range []string{"../cross_entropy-517bac2d987f/batch.bin", "fixture.json", "report.md", "nothing.bin"} {
		_, err := regress.JudgeRun(ce, regress.Run{Batch: name})
		assert.ErrorContains(t, err, "no batch of the fixture", name)
	}
}
