package reduction_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
)

// TestCheckReplay: `reduce replay`'s verdict on a replay of a batch that
// records a failure, of a fixture's passing batch, and of a batch that
// records none; its text, its JSON, and its error.
func TestCheckReplay(t *testing.T) {
	const bounds = "IndexError: Target 4 is out of bounds."
	const assertText = "/pytorch/aten/src/ATen/native/cuda/Loss.cu:242: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion `t >= 0 && t < n_classes` failed.\n" +
		"RuntimeError: CUDA error: device-side assert triggered\n"
	recorded := &fixtures.Batch{Error: &fixtures.Failure{Text: bounds}}
	bare := &fixtures.Batch{Error: &fixtures.Failure{Text: "RuntimeError: CUDA error: device-side assert triggered"}}
	passing := &fixtures.Batch{Error: &fixtures.Failure{Text: bounds}, Meta: map[string]string{regress.MetaExpect: regress.ExpectPass}}
	none := &fixtures.Batch{}
	fails := replay.Verdict{Signature: signature.Recorded(bounds), Backend: replay.KindGo, Device: "cpu", Launcher: replay.LauncherLocal,
		Duration: 1500 * time.Millisecond, Exit: signature.ExitInfo{Code: 1}, Result: replay.Result{Stderr: []byte(bounds + "\n")}}
	asserts := fails
	asserts.Signature = signature.Parse([]byte(assertText), signature.ExitInfo{Code: 1})
	passes := fails
	passes.Signature, passes.Exit, passes.Result.Stderr = signature.Signature{Family: signature.FamilyPass}, signature.ExitInfo{}, nil
	slurm := fails
	slurm.Launcher, slurm.JobID, slurm.Node = replay.LauncherSlurm, "77", "n1"

	for _, tc := range []struct {
		name    string
		b       *fixtures.Batch
		v       replay.Verdict
		level   signature.MatchLevel
		verdict string // the text's last line
		err     string
	}{
		{"reproduces", recorded, fails, signature.MatchStrict, "verdict:   reproduces (match strict)", ""},
		{"passes", recorded, passes, signature.MatchFamily, "verdict:   does not reproduce (match family)",
			"crash.bin does not reproduce its recorded failure: got pass (try --match family, another --backend or --device; or the bug was fixed since it was recorded)"},
		{"an assert for a bare recording", bare, asserts, signature.MatchStrict, "verdict:   reproduces (", ""},
		{"a passing batch passes", passing, passes, signature.MatchStrict, "verdict:   passes, as expected (a fixture's passing batch) (match strict)", ""},
		{"a passing batch fails", passing, fails, signature.MatchStrict, "verdict:   fails, and it should pass (a fixture's passing batch) (match strict)",
			"crash.bin should pass (a fixture's boundary or neighbour batch) but got host_check(cpu) IndexError: Target N is out of bounds. [IndexError]"},
		{"no recording, fails", none, fails, signature.MatchStrict, "verdict:   reproduces (match strict)", ""},
		{"no recording, passes", none, passes, signature.MatchStrict, "verdict:   does not reproduce (match strict)",
			"crash.bin records no failure, and its replay did not fail: got pass (try another --backend or --device)"},
		{"on slurm", recorded, slurm, signature.MatchStrict, "verdict:   reproduces (match strict)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := reduction.CheckReplay("crash.bin", tc.b, tc.v, tc.level)
			var out bytes.Buffer
			c.WriteText(&out)
			lines := bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n"))
			assert.Contains(t, string(lines[len(lines)-1]), tc.verdict)
			assert.Equal(t, tc.b.Meta[regress.MetaExpect] == "" && tc.b.Error != nil, c.Recorded != nil)
			if tc.err == "" {
				assert.NoError(t, c.Err())
			} else {
				assert.EqualError(t, c.Err(), tc.err)
				assert.ErrorIs(t, c.Err(), reduction.ErrNoRepro)
			}
			data, err := json.Marshal(c)
			require.NoError(t, err)
			var back reduction.Check
			require.NoError(t, json.Unmarshal(data, &back))
			assert.Equal(t, c, back)
		})
	}

	c := reduction.CheckReplay("crash.bin", recorded, slurm, signature.MatchStrict)
	var out bytes.Buffer
	c.WriteText(&out)
	assert.Equal(t, "crash.bin: replayed with go on cpu in 1.500s (slurm job 77 on n1)\n"+
		"signature: host_check(cpu) IndexError: Target N is out of bounds. [IndexError]\n"+
		"recorded:  host_check(cpu) IndexError: Target N is out of bounds. [IndexError]\n"+
		"verdict:   reproduces (match strict)\n", out.String())
	assert.Equal(t, reduction.Check{File: "crash.bin", Backend: "go", Device: "cpu", Signature: slurm.Signature, Recorded: c.Recorded,
		Match: "strict", Reproduces: true, Exit: signature.ExitInfo{Code: 1}, Seconds: 1.5, Stderr: bounds + "\n",
		Launcher: "slurm", JobID: "77", Node: "n1"}, c)
	assert.Empty(t, reduction.CheckReplay("crash.bin", recorded, fails, signature.MatchStrict).Launcher, "a local replay names no launcher")
	assert.NotEmpty(t, reduction.CheckReplay("crash.bin", bare, asserts, signature.MatchStrict).Note, "an assert for a bare recording")
}
