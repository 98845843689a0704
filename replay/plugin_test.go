package replay

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
)

// TestPluginInstalled: the interpreter asked is --python, else the one that
// recorded a batch of the user's, never one a file from elsewhere names
// (asking runs it); its answer counts only at this reduce's version.
func TestPluginInstalled(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, version string) string {
		path := filepath.Join(dir, name)
		script := "#!/bin/sh\necho ran >> " + filepath.Join(dir, name+".ran") + "\necho " + version + "\n"
		require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
		return path
	}
	ran := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name+".ran"))
		return err == nil
	}
	this, older := fake("this", Version), fake("older", "0.1.0")
	b := &fixtures.Batch{Meta: map[string]string{fixtures.MetaExecutable: this}}
	assert.True(t, PluginInstalled(this, &fixtures.Batch{}, false), "--python with this version")
	assert.False(t, PluginInstalled(older, b, true), "--python first, another version")
	assert.True(t, PluginInstalled("", b, true), "the recording interpreter of the user's batch")

	foreign := fake("foreign", Version)
	b = &fixtures.Batch{Meta: map[string]string{fixtures.MetaExecutable: foreign}}
	t.Setenv("PATH", dir) // python3: none there
	assert.False(t, PluginInstalled("", b, false))
	assert.False(t, ran("foreign"), "the interpreter a file from elsewhere names was run")
}
