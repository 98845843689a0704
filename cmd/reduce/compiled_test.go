package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/testenv"
)

// TestCompiledCrash is a step compiled with torch.compile (Inductor, on the
// CPU) from a real training script (testdata/compiled/train.py: an
// nn.Embedding, whose lookup Inductor generates C++ for, with its own bound
// check), recorded by record_on_failure as the README says and reduced
// with `reduce --batch crash.bin` and no other flag:
//
//   - the training run records on one OpenMP thread, where the check
//     raises; the replays run on the machine's threads, where the same
//     check aborts the process out of the kernel's parallel region
//     ("terminate called after throwing ..."), judged the same failure;
//   - the zygote's children compile with Inductor's caches shared (the
//     training run's, TORCHINDUCTOR_CACHE_DIR here) and their torch thread
//     pool set up afresh: no replay is lost to a pool broken by the fork
//     ("Invalid thread pool!"), so no other failure at all;
//   - the reduction ends with the minimal batch replayed eager, which fails
//     otherwise (IndexError): the compile changes how it fails, not
//     whether, and the summary and report.md say so;
//   - --no-compile replays eager: the recording does not reproduce.
func TestCompiledCrash(t *testing.T) {
	py := testenv.PythonCompile(t)
	bin := reduceBinary(t)
	proj, cache := userProject(t, bin, "compiled/train.py"), t.TempDir()
	env := append(os.Environ(), "TORCHINDUCTOR_CACHE_DIR="+cache)

	train := exec.Command(py, "train.py", "--model", "embedding", "--out", "crash.bin")
	train.Dir, train.Env = proj, append(env, "OMP_NUM_THREADS=1")
	out, err := train.CombinedOutput()
	require.Error(t, err, "the training run must crash:\n%s", out)
	require.Contains(t, string(out), "reduce_batch: saved the failing batch to crash.bin", "%s", out)
	require.Contains(t, string(out), "index out of bounds", "%s", out)

	sum := reduceCompiled(t, bin, proj, env)
	assert.Empty(t, sum.OtherFailures, "a replay failed otherwise")
	assert.False(t, sum.Partial)
	require.NotNil(t, sum.Compiled, "the summary says nothing of torch.compile")
	assert.Equal(t, regress.Compiled{Backend: "inductor", Eager: regress.EagerOther,
		EagerFailure: "host_check(cpu) embedding: IndexError: index out of range in self [IndexError]"}, *sum.Compiled)
	assert.Equal(t, 1, sum.Phases[reduction.PhaseCompile].Replays)
	report, err := os.ReadFile(filepath.Join(sum.Fixture, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "torch.compile: the minimal batch fails eager too, with another error")
	assert.Contains(t, string(report), "torch.compile (inductor) changes how it fails, not whether")

	// The fixture's tests replay the compiled step in a child process:
	// Inductor's check, aborting on several threads, takes no test session
	// down with it.
	tests := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "regress")
	tests.Dir, tests.Env = proj, append(env, testenv.BinaryEnv+"="+bin)
	got, err := tests.CombinedOutput()
	require.NoError(t, err, "%s", got)
	assert.Regexp(t, `\d+ passed.*1 xfailed`, string(got))

	eager := exec.Command(bin, "replay", "--no-compile", "crash.bin")
	eager.Dir, eager.Env = proj, env
	out, err = eager.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, ExitNoRepro, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "IndexError: index out of range in self")
}

// TestCompiledAbortKeptOnDisk is the same step on two OpenMP threads, where
// Inductor's check aborts the training run itself (C++ terminate): nothing
// can record the failure then, so the script passes keep="disk", which
// writes the batch before each step and removes it after a step that
// passes. The abort leaves crash.bin without an error; reduce takes the
// first replay's failure and reduces it to the same sample.
func TestCompiledAbortKeptOnDisk(t *testing.T) {
	py := testenv.PythonCompile(t)
	bin := reduceBinary(t)
	proj, cache := userProject(t, bin, "compiled/train.py"), t.TempDir()
	env := append(os.Environ(), "TORCHINDUCTOR_CACHE_DIR="+cache, "OMP_NUM_THREADS=2")

	train := exec.Command(py, "train.py", "--model", "embedding", "--out", "crash.bin", "--keep-disk")
	train.Dir, train.Env = proj, env
	out, err := train.CombinedOutput()
	require.Error(t, err, "the training run must crash:\n%s", out)
	if !strings.Contains(string(out), "terminate called") {
		t.Skipf("the check raised rather than aborting the run here (one OpenMP thread ran it):\n%s", out)
	}
	require.FileExists(t, filepath.Join(proj, "crash.bin"), "the batch kept on disk is gone:\n%s", out)

	reduceCompiled(t, bin, proj, env)
}

// reduceCompiled runs `reduce --batch crash.bin` in proj, which must find
// Inductor's bound check and the one sample, tok-043.
func reduceCompiled(t *testing.T, bin, proj string, env []string) reduction.Summary {
	t.Helper()
	cmd := exec.Command(bin, "--batch", "crash.bin", "--json", "-q", "--out", filepath.Join(proj, "regress"))
	cmd.Dir, cmd.Env = proj, env
	sum := runSummary(t, cmd)
	assert.Contains(t, sum.Signature.Expression, "index out of bounds")
	require.Len(t, sum.Culprits, 1, "%+v", sum.Culprits)
	assert.Equal(t, []string{"tok-043"}, sum.Culprits[0].IDs)
	return sum
}

// userProject is a user's repository in a new temporary directory: the
// scripts of testdata named (each under its base name) and the recorder
// with its hooks (vendored).
func userProject(t *testing.T, bin string, scripts ...string) string {
	t.Helper()
	proj := t.TempDir()
	for name, data := range vendored(t, bin, scripts...) {
		require.NoError(t, os.WriteFile(filepath.Join(proj, name), data, 0o644))
	}
	return proj
}
