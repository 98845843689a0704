package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every file of the bad corpus (fixtures/testdata/bad) is bad input to the
// main job and to inspect: exit 2, one line on stderr naming the file,
// nothing on stdout, nothing written under --out, the file untouched.
func TestBadFilesExitTwo(t *testing.T) {
	files, err := filepath.Glob("../../fixtures/testdata/bad/*.bin")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := filepath.Base(f)
		before, err := os.ReadFile(f)
		require.NoError(t, err)
		limit := []string{}
		if strings.Contains(name, "over-max-size") { // bad under a smaller --max-size than the default
			limit = []string{"--max-size", "4000"}
		}
		for _, args := range [][]string{{"--batch", f, "--out", filepath.Join(t.TempDir(), "out"), "-q"}, {"inspect", f}} {
			var stdout, stderr bytes.Buffer
			code := run(append(append([]string{"reduce"}, args...), limit...), &stdout, &stderr)
			assert.Equal(t, ExitUsage, code, "%s %v: %s", name, args[0], stderr.String())
			assert.Empty(t, stdout.String(), name)
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if assert.Len(t, lines, 1, "%s: %s", name, stderr.String()) {
				assert.True(t, strings.HasPrefix(lines[0], "reduce: "), lines[0])
				assert.Contains(t, lines[0], name)
			}
			if args[0] == "--batch" {
				assert.NoDirExists(t, args[3], "%s: nothing written", name)
			}
		}
		after, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.Equal(t, before, after, "%s is left as it was", name)
	}
	t.Logf("%d bad files: exit 2 from --batch and inspect, one line naming the file, nothing written", len(files))
}
