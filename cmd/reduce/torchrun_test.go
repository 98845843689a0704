package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/reduction"
	"reduce/internal/testenv"
)

// TestTorchrunCrash is the README's torchrun recipe on a real run:
// testdata/torchrun/train.py under `torchrun --standalone
// --nproc_per_node=2` (gloo on the CPU), DistributedDataParallel, the bad
// sample on rank 1 only. Each rank records its own file; rank 0 fails later
// (gloo's peer closed), so `reduce --batch crash.bin` must pick rank 1's
// file, say so, replay its step alone in a process group of size 1 and
// list rank 0's file in the report. The interpreter is testenv.Python's
// (make test runs it under both torches).
func TestTorchrunCrash(t *testing.T) {
	py := testenv.Python(t)
	bin := reduceBinary(t)
	proj := userProject(t, bin, "torchrun/train.py")

	out := runRanks(t, py, proj)
	require.Contains(t, out, "reduce_batch: saved the failing batch to crash.rank1.bin", "%s", out)
	assert.NoFileExists(t, filepath.Join(proj, "crash.bin"), "a rank never writes the shared name")

	outDir := t.TempDir()
	cmd := exec.Command(bin, "--batch", "crash.bin", "--json", "--out", outDir)
	cmd.Dir = proj
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	assert.Contains(t, stderr.String(), "replaying crash.rank1.bin, rank 1 of 2, the earliest failure")
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	var sum reduction.Summary
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &sum))
	assert.Contains(t, sum.Signature.Expression, "Target N is out of bounds")
	require.Len(t, sum.Culprits, 1, "%+v", sum.Culprits)
	assert.Equal(t, []string{"point-37"}, sum.Culprits[0].IDs)
	require.NotNil(t, sum.Ranks)
	assert.Equal(t, 1, sum.Ranks.Rank)
	assert.Equal(t, 2, sum.Ranks.WorldSize)

	report, err := os.ReadFile(filepath.Join(sum.Fixture, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "recorded by rank 1 of 2 under torch.distributed (`crash.rank1.bin`)")
	// The fixture's tests replay the step alone too, under pytest in the
	// project: the minimal batch fails (xfail while open), the others pass.
	tests := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", outDir)
	tests.Dir, tests.Env = proj, append(os.Environ(), testenv.BinaryEnv+"="+bin)
	got, err := tests.CombinedOutput()
	require.NoError(t, err, "%s", got)
	assert.Regexp(t, `\d+ passed.*1 xfailed`, string(got))
	// A torch without torch.distributed cannot replay a rank's step alone:
	// exit 2 before any replay, naming it (here its absence is faked by a
	// sitecustomize the interpreter runs first).
	nodist := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(nodist, "sitecustomize.py"),
		[]byte("import torch.distributed\ntorch.distributed.is_available = lambda: False\n"), 0o644))
	refused := exec.Command(bin, "replay", "crash.rank1.bin")
	refused.Dir, refused.Env = proj, append(os.Environ(), "PYTHONPATH="+nodist)
	got, err = refused.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", got)
	assert.Equal(t, ExitUsage, exit.ExitCode(), "%s", got)
	assert.Contains(t, string(got), "rank 1 of 2's of a torch.distributed run, and this torch has no torch.distributed")
	if _, err := os.Stat(filepath.Join(proj, "crash.rank0.bin")); err == nil {
		// torchrun may stop rank 0 before it records: listed when it did.
		assert.Contains(t, string(report), "`crash.rank0.bin`, rank 0")
	}
}

// runRanks runs train.py in proj on two ranks, as torchrun does, and
// returns what they printed; the run must fail. Under torch 2 it is
// torchrun itself; Debian's torch 1.13 has a torchrun that fails under
// Python 3.11 before it starts a worker (its Std.from_str gives None for
// the default --redirects), so there the two workers are started here with
// torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
func runRanks(t *testing.T, py, proj string) string {
	t.Helper()
	v, err := exec.Command(py, "-c", "import torch; print(torch.__version__)").Output()
	require.NoError(t, err)
	if !strings.HasPrefix(string(v), "1.") {
		train := exec.Command(py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py")
		train.Dir = proj
		train.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
		out, err := train.CombinedOutput()
		require.Error(t, err, "the run must fail:\n%s", out)
		return string(out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	var outs [2]bytes.Buffer
	var cmds [2]*exec.Cmd
	for r := range cmds {
		c := exec.Command(py, "train.py")
		c.Dir = proj
		c.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r),
			"WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
		c.Stdout, c.Stderr = &outs[r], &outs[r]
		require.NoError(t, c.Start())
		cmds[r] = c
	}
	failed := false
	for _, c := range cmds {
		failed = c.Wait() != nil || failed
	}
	out := outs[0].String() + outs[1].String()
	require.True(t, failed, "the run must fail:\n%s", out)
	return out
}
