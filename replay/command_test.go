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
// text the collector writes for a recorded command's fixture
// (reduce_batch.command.SITECUSTOMIZE), and the directory HookDir makes
// runs it first, chained to the sitecustomize it shadows.
func TestSitecustomizeAgrees(t *testing.T) {
	py := testenv.Python(t)
	dir, path, err := HookDir(t.TempDir(), "/prior")
	require.NoError(t, err)
	assert.Equal(t, dir+":"+filepath.Join(dir, ZipName)+":/prior", path)
	got, err := os.ReadFile(filepath.Join(dir, "sitecustomize.py"))
	require.NoError(t, err)
	cmd := exec.Command(py, "-c", "import sys, sitecustomize; from reduce_batch import command; "+
		"sys.stdout.write(command.SITECUSTOMIZE); assert sitecustomize.__file__.startswith(sys.argv[1]), sitecustomize.__file__", dir)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, string(got), string(out))
	assert.True(t, strings.HasSuffix(string(got), "_reduce_command.startup(__file__)\n"))
}
