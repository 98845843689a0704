package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOneJudge: outside internal/signature, no code but tests compares two
// signatures (Signature.Matches): whether a replay reproduces a failure is
// signature.Judge's to say.
func TestOneJudge(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	assert.Empty(t, comparisons(t, root), "compare signatures with signature.Judge")
	assert.NotEmpty(t, comparisons(t, filepath.Join(root, "internal", "signature")), "the check finds Matches")
}

// comparisons lists the calls of a method named Matches in the non-test Go
// files under dir, but for those of internal/signature when dir is the
// module's root.
func comparisons(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != dir && (strings.HasPrefix(name, ".") || name == "testdata" ||
				p == filepath.Join(dir, "internal", "signature")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Matches" {
					out = append(out, fset.Position(c.Pos()).String())
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}
