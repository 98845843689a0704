package python

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every row names a module of the package, a vendored file reduce prints,
// and a state path only for a step that rebuilds a class.
func TestHooksTable(t *testing.T) {
	rows := Hooks()
	require.NotEmpty(t, rows)
	names := map[string]bool{}
	for _, h := range rows {
		assert.False(t, names[h.Name], "%s: twice", h.Name)
		names[h.Name] = true
		_, err := fs.Stat(FS, "reduce_batch/"+h.Module+".py")
		assert.NoError(t, err, "%s: its module", h.Name)
		assert.Contains(t, []string{"hooks", "recorder"}, h.Vendored, h.Name)
		if h.StateClass != nil {
			assert.NotEmpty(t, h.Step, "%s: a class to rebuild, and no step that rebuilds it", h.Name)
			assert.Len(t, h.StateClass, 2, h.Name)
		}
	}
	assert.Equal(t, []string{"lightning_step", "trainer_step"}, HookSteps())
}
