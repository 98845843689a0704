package regress_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/regress"
	"reduce/internal/testenv"
	"reduce/replay"
)

// TestRuffClean: every file reduce writes into a user's repository passes
// ruff's default rules (--isolated: no configuration of ours, nor of the
// user's): the recorder (`reduce recorder`), the hooks (`reduce recorder
// --hooks`) and the collector as regress writes it (the conftest.py at the
// root of --out). A file with an unused import fails the same check.
func TestRuffClean(t *testing.T) {
	ruff := testenv.Ruff(t)
	check := func(dir string) (string, error) {
		cmd := exec.Command(ruff[0], append(ruff[1:], "check", "--isolated", "--no-cache", "--output-format", "concise", ".")...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, replay.PythonModuleName), replay.PythonModule, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, replay.HooksModuleName), replay.HooksModule, 0o644))
	require.NoError(t, regress.WriteCollector(dir, replay.CollectorModule))
	out, err := check(dir)
	assert.NoError(t, err, "%s", out)

	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "bad.py"), []byte("import os\n"), 0o644))
	out, err = check(bad)
	assert.Error(t, err, "ruff passes a file with an unused import:\n%s", out)
	assert.Contains(t, out, "F401")
}
