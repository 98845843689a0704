package kernels

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ioImports are the packages through which a leaf would reach files,
// processes, the network or a log.
var ioImports = []string{"os", "os/exec", "io/ioutil", "io/fs", "net", "log", "syscall"}

// importForbidden says why kernels may not import path, or "".
func importForbidden(path string) string {
	if path == "reduce" || strings.HasPrefix(path, "reduce/") {
		// Even internal/signature, whose class ids the failures carry:
		// internal/signature's TestOpClasses checks them from outside.
		return "kernels is a leaf: it imports nothing of this project"
	}
	for _, p := range ioImports {
		if path == p || strings.HasPrefix(path, p+"/") {
			return "kernels does no I/O"
		}
	}
	return ""
}

// TestImports enforces the package's contract (doc.go) on every non-test
// file: no project imports, no I/O packages. (io itself is allowed: the
// Write*Failure functions take a caller's io.Writer.)
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		checked++
		for _, imp := range parsed.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			if why := importForbidden(path); why != "" {
				t.Errorf("%s imports %q: %s", f, path, why)
			}
		}
	}
	require.Positive(t, checked, "no non-test files found")
}

// TestImportCheckRejects makes sure the check above can fail.
func TestImportCheckRejects(t *testing.T) {
	for _, path := range []string{"reduce/internal/signature", "reduce/replay", "os", "os/exec", "net/http", "log/slog"} {
		assert.NotEmpty(t, importForbidden(path), path)
	}
	for _, path := range []string{"io", "bufio", "encoding/json", "github.com/x448/float16", "reducer/x"} {
		assert.Empty(t, importForbidden(path), path)
	}
}
