package replay

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/testenv"
	"reduce/kernels"
)

// opTableDump prints the op table of the reduce_collect.py in argv[1] as
// JSON, in the shape of pyOp.
const opTableDump = `import json, sys
sys.path.insert(0, sys.argv[1])
import reduce_collect as rb
out = {}
for op, (required, optional, aliases, defaults) in rb._OPS.items():
    attrs = []
    for name, d in defaults.items():
        if d is rb._REQUIRED:
            attrs.append({"name": name, "required": True, "type": "", "default": None})
        else:
            attrs.append({"name": name, "required": False, "type": type(d).__name__, "default": d})
    out[op] = {"tensors": [{"name": n, "optional": n in optional} for n in required + optional],
               "aliases": aliases, "attrs": attrs}
json.dump(out, sys.stdout)
`

// pyOp is one op of reduce_collect.py's table, as opTableDump prints it.
type pyOp struct {
	Tensors []pyTensor        `json:"tensors"`
	Aliases map[string]string `json:"aliases"` // alias -> tensor
	Attrs   []pyAttr          `json:"attrs"`
}

type pyTensor struct {
	Name     string `json:"name"`
	Optional bool   `json:"optional"`
}

// pyAttr is an attribute: Type is the Python type of its default ("" when
// it is required), Default the default as JSON decodes it.
type pyAttr struct {
	Name     string `json:"name"`
	Required bool   `json:"required"`
	Type     string `json:"type"`
	Default  any    `json:"default"`
}

// goOp is op as reduce_collect.py's table must say it.
func goOp(t *testing.T, op *kernels.Op) pyOp {
	p := pyOp{Aliases: map[string]string{}}
	for _, ta := range op.Tensors {
		p.Tensors = append(p.Tensors, pyTensor{Name: ta.Name, Optional: ta.Optional})
		for _, a := range ta.Aliases {
			p.Aliases[a] = ta.Name
		}
	}
	for _, a := range op.Attrs {
		if a.Required {
			p.Attrs = append(p.Attrs, pyAttr{Name: a.Name, Required: true})
			continue
		}
		pa := pyAttr{Name: a.Name, Default: a.Default}
		if v, ok := a.Default.(int64); ok {
			pa.Default = float64(v) // JSON numbers decode as float64
		}
		switch a.Kind {
		case kernels.AttrInt:
			pa.Type = "int"
		case kernels.AttrOptionalInt:
			pa.Type = "int"
			if a.Default == nil {
				pa.Type = "NoneType"
			}
		case kernels.AttrFloat:
			pa.Type = "float"
		case kernels.AttrString:
			pa.Type = "str"
		case kernels.AttrBool:
			pa.Type = "bool"
		default:
			t.Fatalf("%s.%s: attribute kind %v has no Python type here: add it", op.Name, a.Name, a.Kind)
		}
		p.Attrs = append(p.Attrs, pa)
	}
	return p
}

// The op table of the embedded reduce_collect.py (what run_op checks a batch
// against, and the defaults it passes to torch) is the Go registry's: the
// same ops, tensors in order with which are optional, aliases, attributes
// in order with which are required, and each default with its type (so
// that 0 is not taken for 0.0). An op, tensor, attribute or default
// changed on one side only fails here.
func TestPythonOpTable(t *testing.T) {
	py := testenv.Python(t, "torch")
	dir := t.TempDir()
	for name, data := range pythonFiles() {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	out, err := exec.Command(py, "-c", opTableDump, dir).Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "%s", stderr)
	var table map[string]pyOp
	require.NoError(t, json.Unmarshal(out, &table), "%s", out)

	require.Equal(t, kernels.OpNames(), slices.Sorted(maps.Keys(table)), "the ops of the Go registry (want) and of reduce_collect.py's _OPS (got)")
	for _, name := range kernels.OpNames() {
		op, err := kernels.Lookup(name)
		require.NoError(t, err)
		assert.Equal(t, goOp(t, op), table[name], "op %s: the Go registry (want) and reduce_collect.py's _OPS (got)", name)
	}
}

// TestPythonVersions: the Python files reduce writes for users (the
// recorder, the hooks, the collector) carry reduce's Version, and the
// collector's first line, which marks a conftest.py as reduce's, names it.
func TestPythonVersions(t *testing.T) {
	re := regexp.MustCompile(`(?m)^__version__ = "([^"]*)"`)
	for name, data := range map[string][]byte{PythonModuleName: PythonModule, HooksModuleName: HooksModule, CollectorModuleName: CollectorModule} {
		m := re.FindAllSubmatch(data, -1)
		require.Len(t, m, 1, "%s: one __version__ line", name)
		assert.Equal(t, Version, string(m[0][1]), "%s's __version__", name)
	}
	first, _, _ := strings.Cut(string(CollectorModule), "\n")
	assert.True(t, strings.HasPrefix(first, "# reduce collector "+Version+":"), "the collector's first line: %q", first)
}
