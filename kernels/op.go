package kernels

// Built-in operators with PyTorch 1.13's contracts.
//
// An Op names its tensors by PyTorch's argument names and its attributes by
// PyTorch's keyword names, with PyTorch's defaults. Run executes it in one of
// two failure modes:
//
//   - ModeCPU: a failure is the exception torch 1.13 raises on CPU, with the
//     exact class and message (Failure.Exception, Failure.Message).
//   - ModeCUDA: checks that CUDA does on the host raise as on CPU (with the
//     CUDA build's text where it differs); range checks that CUDA does in the
//     kernel become device-side asserts (Failure.Asserts), one per failing
//     thread, with the file, line, kernel, block, thread and expression that
//     CUDA_KERNEL_ASSERT prints.
//
// Values: outputs are computed in float64 and rounded to the output dtype,
// with intermediate roundings where torch stores intermediates in the input
// dtype (log_softmax, elementwise products, per-step scatter_add). Reductions
// accumulate in a different order than torch's vectorised kernels, so float
// results agree within a few ulps of the accumulated magnitude, not bit for
// bit (TestOpsAgainstTorch states the tolerances per dtype). Copies
// (embedding, index_select, gather, index, one_hot) are exact.
//
// Ops are pure: no I/O, no globals mutated, safe for concurrent use.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Mode selects how a failure is reported.
type Mode int

const (
	// ModeCPU raises what torch 1.13 raises on CPU.
	ModeCPU Mode = iota
	// ModeCUDA emulates torch 1.13 on a CUDA device: host checks raise, range
	// checks are device-side asserts.
	ModeCUDA
)

func (m Mode) String() string {
	switch m {
	case ModeCPU:
		return "cpu"
	case ModeCUDA:
		return "cuda"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode accepts "cpu" and "cuda" (any case).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "cpu":
		return ModeCPU, nil
	case "cuda", "gpu":
		return ModeCUDA, nil
	}
	return 0, fmt.Errorf("unknown mode %q (want cpu or cuda)", s)
}

// Errors for bad input (a malformed request, not a replayed failure). They are
// wrapped with the detail.
var (
	ErrUnknownOp   = errors.New("unknown op")
	ErrTensorArg   = errors.New("bad tensor argument")
	ErrAttr        = errors.New("bad attribute")
	ErrUnsupported = errors.New("unsupported by the built-in kernel")
)

// TensorArg is one tensor argument of an op.
type TensorArg struct {
	Name     string
	Optional bool
	// Aliases are other names accepted for this argument.
	Aliases []string
}

// AttrKind is the type of an attribute's value.
type AttrKind int

const (
	AttrInt         AttrKind = iota // integer (json.Number, int, int64, integral float64)
	AttrOptionalInt                 // integer or nil (None)
	AttrFloat                       // number
	AttrString                      // string
	AttrBool                        // bool
)

func (k AttrKind) String() string {
	return [...]string{"int", "int or None", "float", "str", "bool"}[k]
}

// Attr is one keyword argument of an op.
type Attr struct {
	Name string
	Kind AttrKind
	// Required attributes have no default (Default is ignored).
	Required bool
	// Default is PyTorch's default: int64, float64, string, bool or nil.
	Default any
	// Choices are the values a string attribute takes; any when empty.
	// A run with another value fails as torch's would; CheckArgs refuses it.
	Choices []string
}

// TorchCall is how PyTorch runs an op (Op.Torch), in the terms of
// reduce_batch/ops.py's run_op.
type TorchCall struct {
	// Function is a dotted path under the torch module
	// ("nn.functional.cross_entropy", "index_select"), or "" for Python
	// indexing: the first of Positional indexed along the second (an
	// attribute) by the third, input[(slice(None),)*dim + (index,)].
	Function string
	// Positional are the tensors and attributes passed by position, in
	// order. Every other tensor given and every attribute (its default when
	// the batch gives none) is passed by keyword under its name, so those
	// names must be torch's keyword names; a name torch's parser does not
	// take as a keyword (one_hot's tensor, which torch calls input) must be
	// positional.
	Positional []string
}

// Op is a built-in operator. Everything the rest of reduce needs to know
// about one op lives in its Op value, set in the op's one register call, so
// that adding an op touches no switch on its name anywhere else.
type Op struct {
	Name    string
	Tensors []TensorArg
	Attrs   []Attr
	// Signature is PyTorch's call, for documentation and tracebacks.
	Signature string
	// Torch is how PyTorch runs the op, which the torch backend follows:
	// reduce_batch/ops.py's op table is rendered from it (go generate
	// ./replay), so that an op is written here only.
	Torch TorchCall
	// Advice is what to check first when this op's range check fires on
	// the device: one sentence for a person, in Markdown (the regression
	// report prints it under the failure).
	Advice string

	run func(c *call) (*Result, error)
	// memory adds, through add, the buffers the op allocates for c's
	// arguments in torch's order (the device memory note in op_memory.go),
	// and reports false when torch fails on them before allocating. Nil
	// means the op has no plan: it runs without the memory limit.
	memory func(c *call, add allocate) bool
	// frames are the Python frames inside torch through which the op's
	// allocations fail (its torch.nn.functional wrapper), outermost first;
	// nil for builtins such as torch.gather.
	frames []Frame
	// neutral maps an integer tensor to the attribute whose recorded value
	// its dropped elements take (Neutral).
	neutral map[string]string
	// Misuses are the op's argument checks with the contract each
	// enforces and its fix (a failure of one is a misuse of the op, not a
	// bug of PyTorch's); Rules its documented rules that a batch of valid
	// values can break as a whole. The regression report names them.
	Misuses []*Misuse
	Rules   []*Rule
}

// Options tune a run.
type Options struct {
	Mode Mode
	// SMs is the multiprocessor count of the emulated GPU; it caps some grid
	// sizes (index_select's kernels launch at most 8·SMs blocks). 0 means 108
	// (an A100).
	SMs int
	// DeviceMemory emulates a device of that many bytes: a run whose
	// allocations (Memory) do not fit fails with torch's out-of-memory
	// error of the mode, before the op's own checks of values. 0 means no
	// limit.
	DeviceMemory int64
}

// Result is what a run produced: outputs, or a failure.
type Result struct {
	// Outputs by name; the op's result is "output".
	Outputs map[string]*Tensor
	// Failure is the PyTorch error, or nil.
	Failure *Failure
	// Notes describe deviations a caller may want to know about, such as
	// values that a CUDA build leaves undefined (no device check).
	Notes []string
}

var registry = map[string]*Op{}

func register(op *Op) {
	if _, dup := registry[op.Name]; dup {
		panic("kernels: op registered twice: " + op.Name)
	}
	registry[op.Name] = op
}

// Lookup returns the op with PyTorch's name (cross_entropy, nll_loss,
// embedding, index_select, gather, scatter_add, one_hot,
// binary_cross_entropy, index).
func Lookup(name string) (*Op, error) {
	if op, ok := registry[name]; ok {
		return op, nil
	}
	return nil, fmt.Errorf("%w %q (built-in ops: %s)", ErrUnknownOp, name, strings.Join(OpNames(), ", "))
}

// OpNames lists the built-in ops, sorted.
func OpNames() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run executes the op in mode with the default device.
func (op *Op) Run(mode Mode, tensors map[string]*Tensor, attrs map[string]any) (*Result, error) {
	return op.RunOptions(Options{Mode: mode}, tensors, attrs)
}

// RunOptions executes the op. A non-nil error means bad input (unknown
// tensor or attribute, a missing required one, a malformed tensor, an
// attribute of the wrong type); PyTorch's own errors come back as
// Result.Failure.
func (op *Op) RunOptions(o Options, tensors map[string]*Tensor, attrs map[string]any) (*Result, error) {
	c, err := op.bind(o, tensors, attrs)
	if err != nil {
		return nil, err
	}
	if o.DeviceMemory > 0 {
		if plan := memoryPlan(c); plan != nil {
			if f := outOfMemory(op, o.Mode, plan, o.DeviceMemory); f != nil {
				return fail(f)
			}
		}
	}
	res, err := op.run(c)
	if err != nil {
		return nil, err
	}
	if res.Failure != nil && res.Failure.Op == "" {
		res.Failure.Op = op.Name
	}
	return res, nil
}

// bind checks and normalises a run's arguments (RunOptions' bad-input
// errors) into a call.
func (op *Op) bind(o Options, tensors map[string]*Tensor, attrs map[string]any) (*call, error) {
	if o.Mode != ModeCPU && o.Mode != ModeCUDA {
		return nil, fmt.Errorf("%w: mode %d", ErrAttr, int(o.Mode))
	}
	if o.SMs <= 0 {
		o.SMs = 108
	}
	c := &call{op: op, opts: o, cuda: o.Mode == ModeCUDA, t: map[string]*Tensor{}}
	canon, err := op.tensorNames(slices.Collect(maps.Keys(tensors)))
	if err != nil {
		return nil, err
	}
	for name, t := range tensors {
		if t == nil {
			continue // an explicit None for an optional tensor
		}
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %s: tensor %q: %v", ErrTensorArg, op.Name, name, err)
		}
		c.t[canon[name]] = t
	}
	for _, ta := range op.Tensors {
		if !ta.Optional && c.t[ta.Name] == nil {
			return nil, fmt.Errorf("%w: %s: missing tensor %q", ErrTensorArg, op.Name, ta.Name)
		}
	}
	if c.a, err = op.attrs(attrs); err != nil {
		return nil, err
	}
	return c, nil
}

// CheckArgs is the check of a call's tensor names and attributes that
// every run makes, without the tensors: a recorded batch the op cannot be
// called with is bad input, found before any replay (ErrTensorArg, ErrAttr).
func (op *Op) CheckArgs(tensors []string, attrs map[string]any) error {
	canon, err := op.tensorNames(tensors)
	if err != nil {
		return err
	}
	for _, ta := range op.Tensors {
		if !ta.Optional && !slices.Contains(slices.Collect(maps.Values(canon)), ta.Name) {
			return fmt.Errorf("%w: %s: missing tensor %q (the batch holds %s)", ErrTensorArg, op.Name, ta.Name, strings.Join(tensors, ", "))
		}
	}
	norm, err := op.attrs(attrs)
	if err != nil {
		return err
	}
	for _, at := range op.Attrs {
		if v, ok := norm[at.Name].(string); ok && len(at.Choices) > 0 && !slices.Contains(at.Choices, v) {
			return fmt.Errorf("%w: %s: %s %q: want one of %s", ErrAttr, op.Name, at.Name, v, strings.Join(at.Choices, ", "))
		}
	}
	return nil
}

// tensorNames maps each name given to the tensor argument it names (an
// alias to its argument).
func (op *Op) tensorNames(names []string) (map[string]string, error) {
	known := map[string]string{}
	for _, ta := range op.Tensors {
		known[ta.Name] = ta.Name
		for _, al := range ta.Aliases {
			known[al] = ta.Name
		}
	}
	canon, seen := map[string]string{}, map[string]bool{}
	for _, name := range names {
		c, ok := known[name]
		if !ok {
			return nil, fmt.Errorf("%w: %s takes no tensor %q (takes %s)", ErrTensorArg, op.Name, name, op.tensorList())
		}
		if seen[c] {
			return nil, fmt.Errorf("%w: %s: tensor %q given twice (under an alias)", ErrTensorArg, op.Name, c)
		}
		canon[name], seen[c] = c, true
	}
	return canon, nil
}

// attrs checks and normalises the attributes given, with the defaults of
// those not given.
func (op *Op) attrs(attrs map[string]any) (map[string]any, error) {
	spec, out := map[string]Attr{}, map[string]any{}
	for _, at := range op.Attrs {
		spec[at.Name] = at
	}
	for name, v := range attrs {
		at, ok := spec[name]
		if !ok {
			return nil, fmt.Errorf("%w: %s takes no attribute %q (takes %s)", ErrAttr, op.Name, name, op.attrList())
		}
		nv, err := normalizeAttr(at, v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %v", ErrAttr, op.Name, name, err)
		}
		out[name] = nv
	}
	for _, at := range op.Attrs {
		if _, ok := out[at.Name]; ok {
			continue
		}
		if at.Required {
			return nil, fmt.Errorf("%w: %s: missing attribute %q", ErrAttr, op.Name, at.Name)
		}
		out[at.Name] = at.Default
	}
	return out, nil
}

// Neutral returns the value that a dropped element of the op's integer
// tensor named tensor takes when the reducer searches for the elements that
// trigger a failure: the value of the attribute the op names for that tensor
// (cross_entropy's and nll_loss's target take ignore_index, which makes the
// element drop out of the loss) when attrs record it, else 0. ok reports
// that the value came from a recorded attribute; v is the value to use
// either way.
//
// Only an attribute that attrs hold counts, never the op's default (-100
// for ignore_index): a batch recorded without ignore_index has always had
// its dropped targets set to 0, and answering -100 instead would build
// different candidates, so a reduction would replay other batches than it
// did before and could end elsewhere. A recorded value that is not an
// integer gives (0, false), as it always has (RunOptions rejects it).
func (op *Op) Neutral(tensor string, attrs map[string]any) (v int64, ok bool) {
	name := op.canonicalTensor(tensor)
	attr, declared := op.neutral[name]
	if !declared {
		return 0, false
	}
	raw, recorded := attrs[attr]
	if !recorded {
		return 0, false
	}
	for _, at := range op.Attrs {
		if at.Name != attr {
			continue
		}
		nv, err := normalizeAttr(at, raw)
		if i, isInt := nv.(int64); err == nil && isInt {
			return i, true
		}
		break
	}
	return 0, false
}

// canonicalTensor is the argument name under which the op knows tensor
// (one of its aliases resolves to its name), or tensor itself.
func (op *Op) canonicalTensor(tensor string) string {
	for _, ta := range op.Tensors {
		if ta.Name == tensor {
			return tensor
		}
		for _, al := range ta.Aliases {
			if al == tensor {
				return ta.Name
			}
		}
	}
	return tensor
}

func (op *Op) tensorList() string {
	var s []string
	for _, t := range op.Tensors {
		n := t.Name
		if t.Optional {
			n += " (optional)"
		}
		s = append(s, n)
	}
	return strings.Join(s, ", ")
}

func (op *Op) attrList() string {
	var s []string
	for _, a := range op.Attrs {
		s = append(s, a.Name)
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// normalizeAttr converts v to the attribute's Go type: int64, float64,
// string, bool or nil.
func normalizeAttr(at Attr, v any) (any, error) {
	if v == nil {
		if at.Kind == AttrOptionalInt {
			return nil, nil
		}
		return nil, fmt.Errorf("None is not a valid %s", at.Kind)
	}
	switch at.Kind {
	case AttrInt, AttrOptionalInt:
		return toInt64(v)
	case AttrFloat:
		return toFloat64(v)
	case AttrString:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a string, got %T", v)
		}
		return s, nil
	case AttrBool:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("want a bool, got %T", v)
		}
		return b, nil
	}
	return nil, fmt.Errorf("attribute kind %d", at.Kind)
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", string(x))
		}
		return toInt64(f)
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("%d overflows int64", x)
		}
		return int64(x), nil
	case float32:
		return toInt64(float64(x))
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) || math.IsNaN(x) || math.Abs(x) >= 1<<63 {
			return 0, fmt.Errorf("%v is not an integer", x)
		}
		return int64(x), nil
	case bool:
		return 0, fmt.Errorf("want an integer, got a bool")
	case string:
		i, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("want an integer, got the string %q", x)
		}
		return i, nil
	}
	return 0, fmt.Errorf("want an integer, got %T", v)
}

func toFloat64(v any) (float64, error) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", string(x))
		}
		return f, nil
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case bool:
		return 0, fmt.Errorf("want a number, got a bool")
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, fmt.Errorf("want a number, got the string %q", x)
		}
		return f, nil
	}
	i, err := toInt64(v)
	if err != nil {
		return 0, fmt.Errorf("want a number, got %T", v)
	}
	return float64(i), nil
}

// call is one execution's arguments, normalised.
type call struct {
	op   *Op
	opts Options
	cuda bool
	t    map[string]*Tensor
	a    map[string]any
}

func (c *call) tensor(name string) *Tensor { return c.t[name] }

func (c *call) int(name string) int64 { return c.a[name].(int64) }

func (c *call) optInt(name string) (int64, bool) {
	v, ok := c.a[name].(int64)
	return v, ok
}

func (c *call) float(name string) float64 { return c.a[name].(float64) }

func (c *call) str(name string) string { return c.a[name].(string) }

func (c *call) flag(name string) bool { return c.a[name].(bool) }

// ok wraps the output tensor.
func ok(out *Tensor, notes ...string) (*Result, error) {
	return &Result{Outputs: map[string]*Tensor{"output": out}, Notes: notes}, nil
}

// errorf wraps a bad-input error.
func errorf(base error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{base}, args...)...)
}

// fail wraps a failure.
func fail(f *Failure) (*Result, error) { return &Result{Failure: f}, nil }
