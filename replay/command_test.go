package replay

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/testenv"
)

// TestSitecustomizeAgrees: the startup hook reduce writes (HookDir) is the
// package's sitecustomize.py, which the collector writes for a recorded
// command's fixture, and Python runs it first from the directory HookDir
// makes, before what PYTHONPATH had.
func TestSitecustomizeAgrees(t *testing.T) {
	py := testenv.Python(t)
	dir, path, err := HookDir(t.TempDir(), "/prior")
	require.NoError(t, err)
	assert.Equal(t, dir+":"+filepath.Join(dir, ZipName)+":/prior", path)
	got, err := os.ReadFile(filepath.Join(dir, "sitecustomize.py"))
	require.NoError(t, err)
	cmd := exec.Command(py, "-c", "import sys, pkgutil, sitecustomize; "+
		"sys.stdout.buffer.write(pkgutil.get_data('reduce_batch', 'sitecustomize.py')); assert sitecustomize.__file__.startswith(sys.argv[1]), sitecustomize.__file__", dir)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, string(got), string(out))
	assert.True(t, strings.HasSuffix(string(got), "_reduce_command.startup(__file__)\n"))
}
