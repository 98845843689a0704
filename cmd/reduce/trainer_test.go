package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/testenv"
)

// TestTrainerCrashes is the README's Hugging Face Trainer path on a real
// Trainer (testdata/trainer/train.py: a one-layer BERT for sequence
// classification built from a config, nothing downloaded, sample s-037's
// label out of range; reduce_hooks.record_trainer, printed by `reduce
// recorder --hooks` beside reduce_batch.py): the crash is recorded, with the
// model's config alone or with its weights too (--state), then reduced with
// `reduce --batch crash.bin` and no other flag to that one sample, and the
// fixture's tests replay it under pytest (the minimal batch xfails while
// open, the others pass). A file that names another class than a
// PreTrainedModel for trainer_step to rebuild (an installed class that is
// not one, transformers' or another package's) is refused before any
// replay: exit 2. The interpreter is testenv.PythonTransformers's
// (REDUCE_PYTHON with transformers installed); Debian's has none.
func TestTrainerCrashes(t *testing.T) {
	py := testenv.PythonTransformers(t)
	bin := reduceBinary(t)
	files := vendored(t, bin, "trainer/train.py")
	project := func(t *testing.T) string {
		proj := t.TempDir()
		for name, data := range files {
			require.NoError(t, os.WriteFile(filepath.Join(proj, name), data, 0o644))
		}
		return proj
	}
	env := append(os.Environ(), "HF_HUB_OFFLINE=1", "OMP_NUM_THREADS=1")

	for _, c := range []struct {
		name  string
		flags []string
		state bool // the weights are in the file
	}{{"config", nil, false}, {"weights", []string{"--state"}, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			proj := project(t)
			train := exec.Command(py, append([]string{"train.py", "--out", "crash.bin"}, c.flags...)...)
			train.Dir, train.Env = proj, env
			out, err := train.CombinedOutput()
			require.Error(t, err, "the training run must crash:\n%s", out)
			require.Contains(t, string(out), "IndexError: Target 7 is out of bounds.", "%s", out)
			require.Contains(t, string(out), "reduce_batch: saved the failing batch to crash.bin", "%s", out)
			assert.NotContains(t, string(out), "cannot rebuild", "%s", out)
			assert.Equal(t, c.state, regexp.MustCompile(`recorded the state \([^)]*model`).MatchString(string(out)), "%s", out)

			outDir := t.TempDir()
			cmd := exec.Command(bin, "--batch", "crash.bin", "--json", "-q", "--out", outDir)
			cmd.Dir, cmd.Env = proj, env
			sum := runSummary(t, cmd)
			assert.Contains(t, sum.Signature.Expression, "Target N is out of bounds.")
			assert.Equal(t, "samples", string(sum.Mode), sum.ModeReason)
			require.Len(t, sum.Culprits, 1, "%+v", sum.Culprits)
			assert.Equal(t, []string{"s-037"}, sum.Culprits[0].IDs)
			assert.False(t, sum.Partial)
			if c.state {
				return
			}
			tests := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", outDir)
			tests.Dir, tests.Env = proj, append(env, testenv.BinaryEnv+"="+bin)
			got, err := tests.CombinedOutput()
			require.NoError(t, err, "%s", got)
			assert.Regexp(t, `\d+ passed.*1 xfailed`, string(got))
		})
	}

	// Files that name a class trainer_step must not build, written as
	// record_trainer writes its own (the project's reduce_hooks:trainer_step):
	// the user's own files, so the class is checked, and refused, before
	// anything builds it.
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		proj := project(t)
		forge := `import sys, torch, reduce_batch, reduce_hooks
for path, module, qualname in [("popen.bin", "subprocess", "Popen"), ("args.bin", "transformers", "TrainingArguments")]:
    reduce_batch.save(path, {"input_ids": torch.ones(2, 3, dtype=torch.long), "labels": torch.tensor([0, 7])},
                      step=reduce_hooks.trainer_step, error="IndexError: Target 7 is out of bounds.",
                      state={"trainer": {"model_class": {"module": module, "qualname": qualname}, "config": "{}"}})
`
		run := exec.Command(py, "-c", forge)
		run.Dir, run.Env = proj, env
		out, err := run.CombinedOutput()
		require.NoError(t, err, "%s", out)
		for file, want := range map[string]string{
			"popen.bin": "the recorded Trainer model class subprocess:Popen is not run: it is not a PreTrainedModel subclass",
			"args.bin":  "the recorded Trainer model class transformers:TrainingArguments is not run: it is not a PreTrainedModel subclass",
		} {
			cmd := exec.Command(bin, "--batch", file, "--json", "-q", "--out", t.TempDir())
			cmd.Dir, cmd.Env = proj, env
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			assert.Equal(t, ExitUsage, exit.ExitCode(), "%s", out)
			assert.Contains(t, string(out), want, "%s", file)
			assert.NotContains(t, string(out), `"event":"replay"`, "%s: refused before any replay", file)
			assert.False(t, strings.Contains(string(out), "reproduces"), "%s", out)
		}
	})
}

// vendored returns the files of a user's project for an end-to-end test of
// a framework's hooks: testdata's files by their base names, and
// reduce_batch.py and reduce_hooks.py as `reduce recorder` and `reduce
// recorder --hooks` print them.
func vendored(t *testing.T, bin string, testdata ...string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, f := range testdata {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		require.NoError(t, err)
		files[filepath.Base(f)] = data
	}
	for name, args := range map[string][]string{"reduce_batch.py": {"recorder"}, "reduce_hooks.py": {"recorder", "--hooks"}} {
		out, err := exec.Command(bin, args...).Output()
		require.NoError(t, err)
		files[name] = out
	}
	return files
}
