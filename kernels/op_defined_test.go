package kernels

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An op is defined once: its register call carries what the rest of reduce
// asks about it. These tests hold each op's declarations to the facts they
// describe. (The classes of its failures are checked against package
// signature by TestOpClasses in internal/signature, which may import both.)

func TestOpDeclarations(t *testing.T) {
	for _, name := range OpNames() {
		op, err := Lookup(name)
		require.NoError(t, err)
		assert.NotEmpty(t, op.Advice, "%s: no advice for its range check", name)
		assert.NotNil(t, op.memory, "%s: no memory plan", name)
		// Frames are those of the Python wrapper in torch.nn.functional
		// that the op's Signature calls; builtins (torch.gather, and
		// F.one_hot, which is torch._C._nn.one_hot) have none.
		if len(op.frames) > 0 {
			fn, ok := strings.CutPrefix(op.Signature, "torch.nn.functional.")
			fn, _, _ = strings.Cut(fn, "(")
			assert.True(t, ok, "%s: frames, but no torch.nn.functional wrapper", name)
			assert.Equal(t, fn, op.frames[0].Func, "%s: frame", name)
		}
		// A neutral rule names one of the op's tensors and one of its
		// integer attributes.
		for tensor, attr := range op.neutral {
			assert.Contains(t, op.tensorList(), tensor, "%s: neutral rule for a tensor it does not take", name)
			found := false
			for _, at := range op.Attrs {
				if at.Name == attr {
					found = true
					assert.Contains(t, []AttrKind{AttrInt, AttrOptionalInt}, at.Kind, "%s: neutral attribute %s", name, attr)
				}
			}
			assert.True(t, found, "%s: neutral rule names attribute %q it does not take", name, attr)
		}
	}
}

// Every op says how torch runs it (Op.Torch), in names the op has, since
// the torch backend's run_op follows it (reduce_collect.py's op table is
// rendered from it, and TestPythonOpTable in replay holds the two equal):
// an op without a call, or whose call names a tensor or attribute it does
// not take, would fail only when a batch of that op reached torch.
func TestOpTorchCalls(t *testing.T) {
	dotted := regexp.MustCompile(`^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$`)
	for _, name := range OpNames() {
		op, err := Lookup(name)
		require.NoError(t, err)
		call := op.Torch
		if !assert.NotEmpty(t, call.Positional, "%s: no Torch call (Positional is empty)", name) {
			continue
		}
		// What each positional name is: a tensor by its name (run_op
		// looks tensors up under their names, never their aliases) or an
		// attribute.
		kinds := map[string]string{}
		for _, ta := range op.Tensors {
			kinds[ta.Name] = "tensor"
		}
		for _, at := range op.Attrs {
			kinds[at.Name] = "attribute"
			if at.Kind == AttrInt {
				kinds[at.Name] = "int"
			}
		}
		var shape []string
		seen := map[string]bool{}
		for _, p := range call.Positional {
			assert.Contains(t, kinds, p, "%s: Torch.Positional names %q, which is none of its tensors and attributes", name, p)
			assert.False(t, seen[p], "%s: Torch.Positional names %q twice", name, p)
			seen[p] = true
			shape = append(shape, kinds[p])
		}
		if call.Function == "" {
			// Python indexing, input[(slice(None),)*dim + (index,)]:
			// run_op unpacks exactly these three.
			assert.Equal(t, []string{"tensor", "int", "tensor"}, shape,
				"%s: Python indexing (Torch.Function \"\") takes the indexed tensor, an integer dim and the index, by position", name)
			continue
		}
		assert.Regexp(t, dotted, call.Function, "%s: Torch.Function is a dotted path under the torch module", name)
		assert.True(t, strings.HasPrefix(op.Signature, "torch."+call.Function+"("),
			"%s: Signature %q does not call torch.%s", name, op.Signature, call.Function)
	}
}

// The plans of the ops TestOpMemoryPlans leaves out, each in its op's own
// memory function now.
func TestOpMemoryPlansIndexing(t *testing.T) {
	input := MustNew(Float32, 6, 5)
	mask := opTensor(Bool, []int64{6}, 1, 0, 1, 1, 0, 0)
	cases := []struct {
		op      string
		tensors map[string]*Tensor
		attrs   map[string]any
		want    []Allocation
	}{
		{"scatter_add", map[string]*Tensor{"input": input, "index": MustNew(Int64, 2, 5), "src": MustNew(Float32, 2, 5)},
			map[string]any{"dim": 0}, []Allocation{{"output", 6 * 5 * 4}}},
		// scatter's dtype checks come before its output.
		{"scatter_add", map[string]*Tensor{"input": input, "index": MustNew(Int32, 2, 5), "src": MustNew(Float32, 2, 5)},
			map[string]any{"dim": 0}, nil},
		{"index", map[string]*Tensor{"input": input, "index": MustNew(Int64, 7)}, map[string]any{"dim": 1},
			[]Allocation{{"output", 6 * 7 * 4}}},
		// A mask's size is its count of set elements.
		{"index", map[string]*Tensor{"input": input, "index": mask}, nil, []Allocation{{"output", 3 * 5 * 4}}},
		{"index", map[string]*Tensor{"input": input, "index": MustNew(Float32, 2)}, nil, nil},
		// A 0-d input: the output has one element per index.
		{"index_select", map[string]*Tensor{"input": MustNew(Float64), "index": MustNew(Int64, 3)}, map[string]any{"dim": 0},
			[]Allocation{{"output", 3 * 8}}},
		{"index_select", map[string]*Tensor{"input": input, "index": MustNew(Int64, 3)}, map[string]any{"dim": 2}, nil},
	}
	for _, c := range cases {
		op, err := Lookup(c.op)
		require.NoError(t, err)
		got, err := op.Memory(c.tensors, c.attrs)
		require.NoError(t, err, c.op)
		assert.Equal(t, c.want, got, "%s %v", c.op, c.attrs)
	}
}

// An out-of-memory failure goes through the op's own Python frame (none
// for a builtin), in both modes.
func TestOpOutOfMemoryFrames(t *testing.T) {
	cases := []struct {
		op    string
		in    map[string]*Tensor
		attrs map[string]any
		frame string // the frame's function, "" for none
	}{
		{"cross_entropy", map[string]*Tensor{"input": MustNew(Float32, 4, 3), "target": MustNew(Int64, 4)}, nil, "cross_entropy"},
		{"nll_loss", map[string]*Tensor{"input": MustNew(Float32, 4, 3), "target": MustNew(Int64, 4)}, nil, "nll_loss"},
		{"binary_cross_entropy", map[string]*Tensor{"input": MustNew(Float32, 4), "target": MustNew(Float32, 4)}, nil, "binary_cross_entropy"},
		{"embedding", map[string]*Tensor{"input": MustNew(Int64, 4), "weight": MustNew(Float32, 5, 3)}, nil, "embedding"},
		{"gather", map[string]*Tensor{"input": MustNew(Float32, 4, 3), "index": MustNew(Int64, 4, 3)}, map[string]any{"dim": 1}, ""},
		{"one_hot", map[string]*Tensor{"tensor": MustNew(Int64, 4)}, nil, ""},
	}
	for _, c := range cases {
		op, err := Lookup(c.op)
		require.NoError(t, err)
		for _, mode := range []Mode{ModeCPU, ModeCUDA} {
			res, err := op.RunOptions(Options{Mode: mode, DeviceMemory: 1}, c.in, c.attrs)
			require.NoError(t, err)
			require.NotNil(t, res.Failure, "%s %s", c.op, mode)
			assert.Contains(t, res.Failure.Message, "allocate", "%s %s", c.op, mode)
			var funcs []string
			for _, fr := range res.Failure.Frames {
				funcs = append(funcs, fr.Func)
			}
			assert.Equal(t, c.frame, strings.Join(funcs, " "), "%s %s", c.op, mode)
		}
	}
}

func TestOpNeutral(t *testing.T) {
	cases := []struct {
		op, tensor string
		attrs      map[string]any
		want       int64
		ok         bool
	}{
		{"cross_entropy", "target", map[string]any{"ignore_index": json.Number("255")}, 255, true},
		{"cross_entropy", "target", map[string]any{"ignore_index": 255}, 255, true},
		{"cross_entropy", "target", map[string]any{"ignore_index": int64(-1)}, -1, true},
		{"cross_entropy", "target", map[string]any{"ignore_index": 255.0}, 255, true},
		{"cross_entropy", "target", map[string]any{"ignore_index": json.Number("255.0")}, 255, true},
		{"nll_loss", "target", map[string]any{"ignore_index": int32(7), "reduction": "sum"}, 7, true},
		// The default (-100) is never used: without a recorded
		// ignore_index a dropped target is 0, as it always was.
		{"cross_entropy", "target", nil, 0, false},
		{"nll_loss", "target", map[string]any{"reduction": "none"}, 0, false},
		// A recorded value that is not an integer is no rule.
		{"cross_entropy", "target", map[string]any{"ignore_index": 2.5}, 0, false},
		{"cross_entropy", "target", map[string]any{"ignore_index": nil}, 0, false},
		{"cross_entropy", "target", map[string]any{"ignore_index": "void"}, 0, false},
		// Other tensors, and ops without a rule, take 0.
		{"cross_entropy", "input", map[string]any{"ignore_index": 255}, 0, false},
		{"cross_entropy", "weight", map[string]any{"ignore_index": 255}, 0, false},
		{"binary_cross_entropy", "target", map[string]any{"ignore_index": 255}, 0, false},
		{"embedding", "input", map[string]any{"padding_idx": 0}, 0, false},
		{"one_hot", "input", map[string]any{"num_classes": 3}, 0, false},
	}
	for _, c := range cases {
		op, err := Lookup(c.op)
		require.NoError(t, err)
		v, ok := op.Neutral(c.tensor, c.attrs)
		assert.Equal(t, c.want, v, "%s %s %v", c.op, c.tensor, c.attrs)
		assert.Equal(t, c.ok, ok, "%s %s %v", c.op, c.tensor, c.attrs)
	}
}

// Neutral resolves a tensor's alias to its name.
func TestOpNeutralAlias(t *testing.T) {
	op := &Op{Name: "aliased", Tensors: []TensorArg{{Name: "target", Aliases: []string{"labels"}}},
		Attrs: []Attr{{Name: "ignore_index", Kind: AttrInt, Default: int64(-100)}}, neutral: map[string]string{"target": "ignore_index"}}
	v, ok := op.Neutral("labels", map[string]any{"ignore_index": 3})
	assert.Equal(t, int64(3), v)
	assert.True(t, ok)
}
