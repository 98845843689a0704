package replay

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"reduce/internal/signature"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The slurm launcher's retries against a fake srun (testdata/fakeslurm),
// which loses the first attempt of a replay with the text Slurm prints:
// the faults a one-node test cluster cannot produce on demand (a node
// failure, a preemption, an allocation error).
func TestSlurmFakeLost(t *testing.T) {
	fake, err := filepath.Abs("testdata/fakeslurm")
	require.NoError(t, err)
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, tc := range []struct {
		name, text, exit string
		started          bool
		reason           string
	}{
		{"node failure", "srun: error: Node failure on fake", "0", true, SlurmNodeFail},
		{"preempted", "slurmstepd-fake: error: *** JOB 7 ON fake CANCELLED AT 2026-12-02T19:16:25 DUE TO PREEMPTION ***", "143", true, SlurmPreempted},
		{"no allocation", "srun: error: Unable to allocate resources: Invalid account or account/partition combination specified", "1", false, SlurmNotStarted},
		{"lost before the wrapper ran", "srun: error: Application launch failed: Connection refused", "1", false, SlurmLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			once := filepath.Join(t.TempDir(), "once")
			t.Setenv("FAKE_SRUN_TEXT", tc.text)
			t.Setenv("FAKE_SRUN_EXIT", tc.exit)
			started := ""
			if tc.started {
				started = "1"
			}
			t.Setenv("FAKE_SRUN_STARTED", started)
			for _, retries := range []int{0, -1} {
				os.Remove(once)
				t.Setenv("FAKE_SRUN_ONCE", once)
				o := goOptions(t, "cpu")
				o.Launcher, o.Retries = LauncherSlurm, retries
				be := exampleBackend(t, o, "four_class_targets")
				v := replayOK(t, be, whole)
				info := Provenance(be)
				assert.Equal(t, map[string]int{tc.reason: 1}, info.Unresolved)
				if retries == 0 {
					// The default: retried, and the retry's verdict is the
					// candidate's.
					assert.Equal(t, signature.FamilyHostCheck, v.Signature.Family, "%s", v.Result.Launch.Log)
					assert.Equal(t, 1, v.Requeued)
					assert.Equal(t, "fake", v.Node)
					assert.Equal(t, 1, info.Retried)
					assert.Equal(t, 2, info.Jobs)
				} else {
					assert.Equal(t, signature.Signature{Family: signature.FamilyInfra, Expression: "slurm: " + tc.reason}, v.Signature)
					assert.Contains(t, v.Result.Launch.Detail, tc.text)
					assert.Zero(t, v.Requeued)
				}
			}
		})
	}
}

// Under the slurm launcher without a shared directory the node sees none
// of this machine's files: the torch worker and the Python files it
// imports travel with each candidate into the per-run directory, and run
// from there (the fake srun runs the job here, in a directory of its own).
func TestSlurmFakeTorchFilesTravel(t *testing.T) {
	python := torchPython(t)
	fake, err := filepath.Abs("testdata/fakeslurm")
	require.NoError(t, err)
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_SRUN_ONCE", "")
	be := exampleBackend(t, Options{Kind: KindTorch, Python: python, NoZygote: true, Launcher: LauncherSlurm, Timeout: 2 * time.Minute}, "four_class_targets")
	v := replayOK(t, be, whole)
	assert.Equal(t, signature.FamilyHostCheck, v.Signature.Family, "%s\n%s", v.Result.Stderr, v.Result.Launch.Log)
	assert.Equal(t, "IndexError: Target N is out of bounds.", v.Signature.Expression)
	assert.Regexp(t, `/reduce-run-\w+/reduce_batch-[\d.]+\.zip/reduce_batch/ops\.py", line \d+, in run_op`, string(v.Result.Stderr))
}
