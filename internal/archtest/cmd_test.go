package archtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxCommandLines is docs/ARCHITECTURE.md's bound on cmd/reduce without its
// tests: the command line only, its logic below it. About 90 lines a
// command: 1,000 for the main job and six commands (trust, the sixth, is
// wiring of internal/trust and regress.Allow).
const maxCommandLines = 1000

// TestCommandLineOnly counts the lines of cmd/reduce's non-test Go files.
func TestCommandLineOnly(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "cmd", "reduce", "*.go"))
	require.NoError(t, err)
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		lines += bytes.Count(b, []byte("\n"))
	}
	require.Positive(t, lines, "no Go files in cmd/reduce")
	assert.LessOrEqual(t, lines, maxCommandLines, "cmd/reduce has %d lines without tests: move what is not the command line below it", lines)
}
