package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/testenv"
	"reduce/internal/trust"
)

// TestLightningCrashes is the README's PyTorch Lightning path on a real
// Trainer (testdata/lightning/train.py: the LightningModule defined in the
// script that is run, over testdata/project's Dataset with ids, padding
// collate and model; reduce_hooks.lightning_callback, printed by `reduce
// recorder --hooks` beside reduce_batch.py):
// each crash is recorded by the callback, then reduced with `reduce --batch
// crash.bin` and no other flag, from the project's folder. The user's own
// recording replays from another folder too; under another user's trust
// store it runs nothing (exit 2, naming the class it would rebuild) until
// `reduce trust` allows it. The interpreter is
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
				// The user's own recording replays from anywhere (a
				// recording, not a place); on another user's machine (their
				// store), it runs nothing until they allow it.
				elsewhere := t.TempDir()
				mine := exec.Command(bin, "replay", filepath.Join(proj, "crash.bin"))
				mine.Dir = elsewhere
				out, err := mine.CombinedOutput()
				require.NoError(t, err, "%s", out)
				assert.Contains(t, string(out), "verdict:   reproduces")
				theirs := append(os.Environ(), trust.StoreEnv+"="+filepath.Join(t.TempDir(), "their store"))
				refused := exec.Command(bin, "replay", filepath.Join(proj, "crash.bin"))
				refused.Dir, refused.Env = elsewhere, theirs
				out, err = refused.CombinedOutput()
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "%s", out)
				assert.Equal(t, ExitUsage, exit.ExitCode(), "%s", out)
				assert.Contains(t, string(out), "crash.bin: not run: the file names code, and it is not yours")
				assert.Contains(t, string(out), "the class __main__:Classifier it rebuilds (file "+filepath.Join(proj, "train.py")+")", "what it would run: the module's class")
				allow := exec.Command(bin, "trust", filepath.Join(proj, "crash.bin"))
				allow.Env = theirs
				out, err = allow.CombinedOutput()
				require.NoError(t, err, "%s", out)
				trusted := exec.Command(bin, "replay", filepath.Join(proj, "crash.bin"))
				trusted.Dir, trusted.Env = elsewhere, theirs
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
