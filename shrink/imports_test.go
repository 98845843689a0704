package shrink

import (
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// allowedImports is everything the engine may import: standard library
// packages that do no I/O. Adding one is a design decision; see doc.go.
var allowedImports = map[string]bool{
	"context":     true,
	"errors":      true,
	"fmt":         true,
	"iter":        true,
	"maps":        true,
	"math":        true,
	"math/bits":   true,
	"slices":      true,
	"sort":        true,
	"strconv":     true,
	"strings":     true,
	"sync":        true,
	"sync/atomic": true,
	"time":        true,
}

// allowedPrefixes admits pure families of the standard library.
var allowedPrefixes = []string{"hash/", "container/"}

// forbiddenImports are named explicitly, so the failure message says why.
var forbiddenImports = map[string]string{
	"os":        "file and process access",
	"os/exec":   "running processes",
	"io/ioutil": "file access",
	"io/fs":     "file access",
	"net":       "network access",
	"log":       "printing",
	"unsafe":    "not needed and not safe",
}

func importAllowed(path string) bool {
	if allowedImports[path] {
		return true
	}
	for _, p := range allowedPrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// TestImports enforces the package's contract: standard library only, and
// no I/O. It parses every non-test file of the package.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		require.NoError(t, err)
		checked++
		for _, imp := range parsed.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			if why, bad := forbiddenImports[path]; bad {
				t.Errorf("%s imports %q (%s): shrink must do no I/O", f, path, why)
				continue
			}
			if !isStandard(path) {
				t.Errorf("%s imports %q: shrink must use the standard library only", f, path)
				continue
			}
			if !importAllowed(path) {
				t.Errorf("%s imports %q, which is not in the allowlist of imports_test.go", f, path)
			}
		}
	}
	require.Positive(t, checked, "no non-test files found")
}

// isStandard reports whether path is a standard library package: it has
// no dot in its first element and is found in GOROOT.
func isStandard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	if strings.Contains(first, ".") {
		return false
	}
	p, err := build.Import(path, "", build.FindOnly)
	return err == nil && p.Goroot
}

// TestImportCheckRejects makes sure the checks above can fail.
func TestImportCheckRejects(t *testing.T) {
	for _, path := range []string{"os", "os/exec", "net", "io/ioutil"} {
		_, forbidden := forbiddenImports[path]
		require.True(t, forbidden, path)
	}
	require.False(t, isStandard("github.com/stretchr/testify/require"))
	require.False(t, isStandard("reduce/replay"))
	require.True(t, isStandard("context"))
	require.False(t, importAllowed("net/http"))
	require.True(t, importAllowed("hash/fnv"))
}
