package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/testenv"
)

// TestLightningCrashes is the README's PyTorch Lightning path on a real
// Trainer (testdata/lightning/train.py: the LightningModule defined in the
// script that is run, over testdata/project's Dataset with ids, padding
// collate and model; reduce_hooks.lightning_callback, printed by `reduce
// recorder --hooks` beside reduce_batch.py):
// each crash is recorded by the callback, then reduced with `reduce --batch
// crash.bin` and no other flag, from the project's folder. From another
// folder, the LightningModule's script lies outside the directory reduce
// runs in: exit 2 before any replay, unless --trust-step. The interpreter is
// testenv.PythonLightning's (REDUCE_PYTHON_LIGHTNING, or REDUCE_PYTHON with
// lightning or pytorch_lightning installed); Debian's has no Lightning.
func TestLightningCrashes(t *testing.T) {
	py := testenv.PythonLightning(t)
	bin := reduceBinary(t)
	files := vendored(t, bin, "lightning/train.py", "project/textclf.py")
	cases := []struct {
		crash string
		want  string // in the signature's expression
	}{
		{"label", "Target N is out of bounds."},
		// Padded to 70 by the collate: only re-padding each candidate to
		// its own longest sample leaves the others passing.
		{"length", "index out of range in self"},
		// The weights went bad before the step: only the recorded
		// state_dict reproduces it.
		{"nan", "loss is nan"},
	}
	for _, c := range cases {
		t.Run(c.crash, func(t *testing.T) {
			t.Parallel()
			proj := t.TempDir()
			for name, data := range files {
				require.NoError(t, os.WriteFile(filepath.Join(proj, name), data, 0o644))
			}

			train := exec.Command(py, "train.py", "--crash", c.crash, "--out", "crash.bin")
			train.Dir = proj
			out, err := train.CombinedOutput()
			require.Error(t, err, "the training run must crash:\n%s", out)
			require.Contains(t, string(out), "reduce_batch: saved the failing batch to crash.bin", "%s", out)
			assert.NotContains(t, string(out), "cannot be rebuilt", "%s", out)

			if c.crash == "label" {
				elsewhere := t.TempDir()
				refused := exec.Command(bin, "replay", filepath.Join(proj, "crash.bin"))
				refused.Dir = elsewhere
				out, err := refused.CombinedOutput()
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "%s", out)
				assert.Equal(t, ExitUsage, exit.ExitCode(), "%s", out)
				assert.Contains(t, string(out), "reduce: replay: the recorded LightningModule class "+filepath.Join(proj, "train.py")+":")
				assert.Contains(t, string(out), "its script ("+filepath.Join(proj, "train.py")+") lies outside "+elsewhere)
				assert.Contains(t, string(out), "--trust-step")
				trusted := exec.Command(bin, "replay", "--trust-step", filepath.Join(proj, "crash.bin"))
				trusted.Dir = elsewhere
				out, err = trusted.CombinedOutput()
				require.NoError(t, err, "%s", out)
				assert.Contains(t, string(out), "verdict:   reproduces")
			}

			cmd := exec.Command(bin, "--batch", "crash.bin", "--json", "-q", "--out", t.TempDir())
			cmd.Dir = proj // the user's repository: the module's script lies in it
			sum := runSummary(t, cmd)
			assert.Contains(t, sum.Signature.Expression, c.want)
			assert.Equal(t, "samples", string(sum.Mode), sum.ModeReason)
			require.Len(t, sum.Culprits, 1, "%+v", sum.Culprits)
			assert.Equal(t, []string{"txt-037"}, sum.Culprits[0].IDs)
			assert.False(t, sum.Partial)
		})
	}
}
