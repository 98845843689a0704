package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/testenv"
)

// TestProjectCrashes is the README's path on a small real training project
// (testdata/project: a Dataset with ids, a DataLoader with a padding
// collate, a model with learned positions, an optimizer, a loop): each crash
// is recorded by the real loop with record_on_failure(batch, step=...) and
// no op, then reduced with `reduce --batch crash.bin` and no other flag,
// from the project's folder: the user's recording (a file from someone else
// needs reduce trust: trust.txtar). The
// interpreter is REDUCE_PYTHON's (make test runs this with Debian's torch
// and with PyPI's).
func TestProjectCrashes(t *testing.T) {
	py := testenv.Python(t, "torch")
	bin := reduceBinary(t)
	src, err := filepath.Abs("testdata/project")
	require.NoError(t, err)
	cases := []struct {
		crash string
		ids   []string // the samples reduce must name
		mode  string
		want  string // in the signature's expression
		why   string // in the mode's reason
	}{
		{"label", []string{"txt-037"}, "samples", "Target N is out of bounds.", ""},
		{"token", []string{"txt-037"}, "samples", "index out of range in self", ""},
		// Padded to 70 by the collate: without re-padding every candidate
		// would keep 70 columns and fail.
		{"length", []string{"txt-037"}, "samples", "index out of range in self", "the cause is a length: 70 along dim 1 of tokens"},
		// The weights went bad before the step: only the recorded state
		// reproduces it.
		{"nan", []string{"txt-037"}, "samples", "loss is nan", ""},
		// A relation between two samples' per-sample keys.
		{"dupkey", []string{"txt-037", "txt-041"}, "samples", "duplicate key N in the batch", "a relation between their per-sample values: key[5] == key[9]"},
	}
	for _, c := range cases {
		t.Run(c.crash, func(t *testing.T) {
			t.Parallel()
			proj := t.TempDir()
			for _, f := range []string{"train.py", "textclf.py"} {
				data, err := os.ReadFile(filepath.Join(src, f))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(proj, f), data, 0o644))
			}
			// `reduce recorder > reduce_batch.py`, as the README says.
			rec, err := exec.Command(bin, "recorder").Output()
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(proj, "reduce_batch.py"), rec, 0o644))

			train := exec.Command(py, "train.py", "--crash", c.crash, "--out", "crash.bin")
			train.Dir = proj
			out, err := train.CombinedOutput()
			require.Error(t, err, "the training run must crash:\n%s", out)
			require.Contains(t, string(out), "reduce_batch: saved the failing batch to crash.bin")

			ins, err := exec.Command(bin, "inspect", filepath.Join(proj, "crash.bin")).CombinedOutput()
			require.NoError(t, err, "%s", ins)
			assert.Contains(t, string(ins), "step: textclf:train_step")
			assert.Contains(t, string(ins), "padded along 1")
			if c.crash == "nan" {
				assert.Contains(t, string(ins), "state: ")
			}

			cmd := exec.Command(bin, "--batch", "crash.bin", "--json", "-q", "--out", t.TempDir())
			cmd.Dir = proj // the user's repository: its own step replays with no flag
			sum := runSummary(t, cmd)
			assert.Contains(t, sum.Signature.Expression, c.want)
			assert.Equal(t, c.mode, string(sum.Mode), sum.ModeReason)
			assert.Contains(t, sum.ModeReason, c.why)
			require.Len(t, sum.Culprits, 1, "%+v", sum.Culprits)
			assert.Equal(t, c.ids, sum.Culprits[0].IDs)
			assert.False(t, sum.Partial)
		})
	}
}

// A recorded step that cannot be imported (the module was renamed since):
// exit 2 before any replay, naming the module and the sys.path tried.
func TestProjectStepMissing(t *testing.T) {
	py := testenv.Python(t, "torch")
	bin := reduceBinary(t)
	dir := t.TempDir()
	pyDir, err := filepath.Abs("../../replay/python")
	require.NoError(t, err)
	rec := exec.Command(py, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import reduce_batch, torch; "+
		"reduce_batch.save('crash.bin', {'x': torch.ones(3)}, step='renamed_module:train_step', error='IndexError: x')", pyDir)
	rec.Dir = dir
	out, err := rec.CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(bin, "--batch", "crash.bin", "--json")
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, ExitUsage, exit.ExitCode())
	msg := stderr.String()
	assert.Contains(t, msg, "the recorded step renamed_module:train_step: cannot import renamed_module")
	assert.Contains(t, msg, "(sys.path tried: "+dir)
	assert.NotContains(t, stdout.String(), `"event":"replay"`, "no candidate was replayed")
}
