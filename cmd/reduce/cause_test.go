package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/internal/testenv"
)

// TestStepRaisedRecorded: a reduction of a step of the user's own records
// where the replays raised its exception (fixture.json's "raised", read
// from the confirming replay's traceback under real torch): the step's own
// raise statement (unique_keys_step's ValueError), or torch's functional
// code (positions_step's embedding, "index out of range in self"). The
// report's title names the step without a directory.
func TestStepRaisedRecorded(t *testing.T) {
	bin := reduceBinary(t)
	for name, want := range map[string]signature.Raise{
		"duplicate_keys":    {By: signature.RaisedByCode, File: "example_steps.py", Function: "unique_keys_step"},
		"learned_positions": {By: signature.RaisedByTorch, File: "torch/nn/functional.py", Function: "embedding"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin, "--batch", "fixtures/examples/"+name+".bin", "--backend", "torch",
				"--python", testenv.Python(t, "torch"), "--out", t.TempDir(), "--json", "-q")
			cmd.Env = examplesEnv(t)
			cmd.Dir = "../.." // the repository's root, which holds the step: a step is replayed from the tree reduce runs in
			sum := runSummary(t, cmd)
			js, err := os.ReadFile(filepath.Join(sum.Fixture, regress.RecordFile))
			require.NoError(t, err)
			var rec regress.Record
			require.NoError(t, json.Unmarshal(js, &rec))
			require.NotNil(t, rec.Raised, "%s", js)
			assert.Equal(t, want, *rec.Raised)
			report, err := os.ReadFile(filepath.Join(sum.Fixture, regress.ReportFile))
			require.NoError(t, err)
			title, _, _ := strings.Cut(string(report), "\n")
			assert.NotContains(t, title, "/", "the title names the step without a directory")
		})
	}
}
