package archtest

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "reduce"

// rule is what a package must never import (docs/ARCHITECTURE.md,
// "Packages"): a package of the module directly or through another, a
// standard package directly (replay may run processes for the reduction).
type rule struct {
	// leaf: nothing of this module but the packages in data.
	leaf bool
	// data are the module's packages a leaf may import: data alone, which
	// import nothing of it.
	data []string
	// stdOnly: the standard library only, from the allowlist below.
	stdOnly bool
	// never are packages (or prefixes ending in "/") it must not reach,
	// with why.
	never map[string]string
}

// The standard library packages a pure package may use: no files,
// processes, network or logs.
var pure = []string{"context", "errors", "fmt", "iter", "maps", "math", "math/bits", "slices", "sort", "strconv",
	"strings", "sync", "sync/atomic", "time", "hash/", "container/"}

var noProcesses = map[string]string{"os/exec": "it runs no process: replay does"}

var rules = map[string]rule{
	"reduce/shrink": {stdOnly: true},
	"reduce/kernels": {leaf: true, never: map[string]string{"os": "it does no I/O", "os/exec": "it does no I/O",
		"io/fs": "it does no I/O", "io/ioutil": "it does no I/O", "net": "it does no I/O", "log": "it does no I/O", "syscall": "it does no I/O"}},
	"reduce/internal/signature": {leaf: true, never: map[string]string{"os": "it reads no file", "os/exec": "it runs no process",
		"net": "it does no I/O", "log": "it prints nothing"}},
	"reduce/fixtures": {never: map[string]string{"reduce/replay": "it runs nothing", "reduce/internal/": "it is the container only",
		"os/exec": "it runs nothing"}},
	"reduce/internal/regress": {never: map[string]string{"reduce/replay": "it never replays by itself",
		"reduce/internal/reduction": "the reduction calls it, not the other way", "os/exec": "it never replays by itself"}},
	"reduce/internal/reduction": {never: map[string]string{"github.com/urfave/cli/": "flags are cmd/reduce's",
		"os/exec": "the backend starts processes"}},
	"reduce/internal/trust": {leaf: true, data: []string{"reduce/replay/python"}},
	"reduce/replay/python":  {leaf: true},
	"reduce/internal/progress": {never: map[string]string{"github.com/urfave/cli/": "flags are cmd/reduce's",
		"os/exec": "it runs nothing"}},
	"reduce/replay": {never: map[string]string{"reduce/internal/reduction": "it does not decide what to try next",
		"reduce/internal/regress": "it writes no fixture", "reduce/shrink": "it does not decide what to try next"}},
}

// deps returns the non-test imports of the package at path, and of every
// package of the module it imports, each with the chain that reaches it.
func deps(t *testing.T, root, path string) map[string]string {
	t.Helper()
	seen := map[string]string{}
	var walk func(p, via string)
	walk = func(p, via string) {
		pkg, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(strings.TrimPrefix(p, module), "/")), 0)
		require.NoError(t, err, p)
		for _, imp := range pkg.Imports {
			if _, ok := seen[imp]; ok {
				continue
			}
			seen[imp] = via + " → " + imp
			if imp == module || strings.HasPrefix(imp, module+"/") {
				walk(imp, seen[imp])
			}
		}
	}
	walk(path, path)
	return seen
}

func matches(imp, pattern string) bool {
	if strings.HasSuffix(pattern, "/") {
		return strings.HasPrefix(imp, pattern) || imp == strings.TrimSuffix(pattern, "/")
	}
	return imp == pattern
}

func isStd(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".") && first != module
}

// violations lists how the package at path breaks r.
func violations(t *testing.T, root, path string, r rule) []string {
	var out []string
	for imp, chain := range deps(t, root, path) {
		own := imp == module || strings.HasPrefix(imp, module+"/")
		switch {
		case r.leaf && own && !slices.Contains(r.data, imp):
			out = append(out, chain+": a leaf imports nothing of the module")
		case r.stdOnly && !isStd(imp):
			out = append(out, chain+": the standard library only")
		case r.stdOnly && !slices.ContainsFunc(pure, func(p string) bool { return matches(imp, p) }):
			out = append(out, chain+": not in the allowlist of pure standard packages")
		}
		if strings.HasPrefix(imp, module+"/cmd/") {
			out = append(out, chain+": nothing imports cmd/...")
		}
		if imp == module+"/internal/testenv" || imp == module+"/internal/archtest" {
			out = append(out, chain+": tests only")
		}
		direct := strings.Count(chain, " → ") == 1
		for p, why := range r.never {
			if matches(imp, p) && (direct || !isStd(imp)) {
				out = append(out, chain+": "+why)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestPackageMap checks every package of the module against its rule, and
// that none imports cmd/... or, outside its tests, internal/testenv.
func TestPackageMap(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	checked := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		if _, err := build.ImportDir(p, 0); err != nil {
			return nil // no Go files
		}
		rel, _ := filepath.Rel(root, p)
		path := module
		if rel != "." {
			path += "/" + filepath.ToSlash(rel)
		}
		checked[path] = true
		assert.Empty(t, violations(t, root, path, rules[path]), path)
		return nil
	})
	require.NoError(t, err)
	for path := range rules {
		assert.True(t, checked[path], "%s: no such package (update the rules)", path)
	}
}

// TestRulesReject makes sure the checks can fail.
func TestRulesReject(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	// replay imports fixtures and kernels and the standard library, which
	// each of these rules forbids.
	assert.NotEmpty(t, violations(t, root, "reduce/replay", rule{leaf: true}))
	assert.NotEmpty(t, violations(t, root, "reduce/replay", rule{stdOnly: true}))
	assert.NotEmpty(t, violations(t, root, "reduce/internal/reduction", rule{never: map[string]string{"reduce/kernels": "x"}}), "through fixtures")
	assert.NotEmpty(t, violations(t, root, "reduce/cmd/reduce", rule{never: map[string]string{"github.com/urfave/cli/": "x"}}))
}
