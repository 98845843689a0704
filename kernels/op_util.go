package kernels

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// hostErr is a host-side torch exception raised by a check of class class
// (Failure.Class; "" for a failure whose text signature gives no class).
// The checks that have a class construct their failure through it (or
// through a helper that names the class) so that the class sits with the
// check that raises it.
func hostErr(class, exc, msg string, frames ...Frame) *Failure {
	return &Failure{Exception: exc, Message: msg, Frames: frames, Class: class}
}

// runtimeErr, indexErr and valueErr are unclassed host exceptions: argument
// errors (shapes, dtypes, attributes) that no class groups.
func runtimeErr(msg string, frames ...Frame) *Failure {
	return hostErr("", "RuntimeError", msg, frames...)
}

func indexErr(msg string, frames ...Frame) *Failure {
	return hostErr("", "IndexError", msg, frames...)
}

func valueErr(msg string, frames ...Frame) *Failure {
	return hostErr("", "ValueError", msg, frames...)
}

// withFrames sets f's frames when it has none (errors raised inside C++ are
// reported at the Python line that called into torch).
func withFrames(f *Failure, frames ...Frame) *Failure {
	if f != nil && f.Frames == nil {
		f.Frames = frames
	}
	return f
}

// fmtSizes prints sizes as c10 prints an IntArrayRef: "[2, 3, 4]".
func fmtSizes(s []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(v, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// torchSize prints sizes as Python prints a torch.Size.
func torchSize(s []int64) string { return "torch.Size(" + fmtSizes(s) + ")" }

// scalarTypeName is c10's name for a dtype ("Long", "Float").
func scalarTypeName(d DType) string {
	switch d {
	case Bool:
		return "Bool"
	case Uint8:
		return "Byte"
	case Int8:
		return "Char"
	case Int16:
		return "Short"
	case Int32:
		return "Int"
	case Int64:
		return "Long"
	case Float16:
		return "Half"
	case BFloat16:
		return "BFloat16"
	case Float32:
		return "Float"
	case Float64:
		return "Double"
	}
	return d.String()
}

// legacyTypeName is the name checkScalarTypes prints for a tensor's type:
// the legacy Python class where one exists ("torch.FloatTensor",
// "torch.cuda.LongTensor"), else Backend + ScalarType + "Type"
// ("CPUBoolType", "CPUBFloat16Type"), as torch 1.13 prints them.
func legacyTypeName(d DType, cuda bool) string {
	switch d {
	case Bool, BFloat16:
		if cuda {
			return "CUDA" + scalarTypeName(d) + "Type"
		}
		return "CPU" + scalarTypeName(d) + "Type"
	}
	if cuda {
		return "torch.cuda." + scalarTypeName(d) + "Tensor"
	}
	return "torch." + scalarTypeName(d) + "Tensor"
}

// notImplemented is AT_DISPATCH's error.
func notImplemented(name string, d DType) *Failure {
	return runtimeErr(`"` + name + `" not implemented for '` + scalarTypeName(d) + `'`)
}

// expectedScalarType is the error of data_ptr<T>() and accessors on a tensor
// of another dtype.
func expectedScalarType(want, got DType) *Failure {
	return hostErr(classScalarType, "RuntimeError", "expected scalar type "+scalarTypeName(want)+" but found "+scalarTypeName(got))
}

// wrapDim is c10::maybe_wrap_dim with wrap_scalar=true.
func wrapDim(dim int64, ndim int) (int64, *Failure) {
	n := int64(ndim)
	if n <= 0 {
		n = 1
	}
	lo, hi := -n, n-1
	if dim < lo || dim > hi {
		return 0, indexErr("Dimension out of range (expected to be in range of [" +
			strconv.FormatInt(lo, 10) + ", " + strconv.FormatInt(hi, 10) + "], but got " +
			strconv.FormatInt(dim, 10) + ")")
	}
	if dim < 0 {
		dim += n
	}
	return dim, nil
}

// sizeAt is Tensor::size(d), whose wrap does not accept 0-d tensors.
func sizeAt(t *Tensor, d int64) (int64, *Failure) {
	if t.Dims() == 0 {
		return 0, indexErr("Dimension specified as " + strconv.FormatInt(d, 10) + " but tensor has no dimensions")
	}
	w, f := wrapDim(d, t.Dims())
	if f != nil {
		return 0, f
	}
	return t.Shape[w], nil
}

// nonemptySize is ensure_nonempty_size: 1 for a 0-d tensor.
func nonemptySize(t *Tensor, d int64) (int64, *Failure) {
	if t.Dims() == 0 {
		return 1, nil
	}
	return sizeAt(t, d)
}

func nonemptyDims(t *Tensor) int {
	if t.Dims() == 0 {
		return 1
	}
	return t.Dims()
}

// fmtDouble prints a double as C++'s ostream does by default (%g, 6
// significant digits).
func fmtDouble(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// Round is v as a tensor of dtype d holds it (roundTo).
func (d DType) Round(v float64) float64 { return roundTo(d, v) }

// roundTo rounds v to dtype d's precision (float dtypes); integer dtypes are
// returned unchanged.
func roundTo(d DType, v float64) float64 {
	switch d {
	case Float32:
		return float64(float32(v))
	case Float16:
		return float64(halfToFloat32(float32ToHalf(float32(v))))
	case BFloat16:
		return float64(bfloat16ToFloat32(float32ToBFloat16(float32(v))))
	}
	return v
}

// promoteFloat is torch's result type of a binary op between two tensors
// when at least one is floating point.
func promoteFloat(a, b DType) DType {
	if !a.IsFloat() {
		return b
	}
	if !b.IsFloat() {
		return a
	}
	if a == b {
		return a
	}
	if a == Float64 || b == Float64 {
		return Float64
	}
	return Float32 // float16 with bfloat16, or either with float32
}

// copyElem copies storage element se of src to storage element de of dst
// (same dtype).
func copyElem(dst *Tensor, de int64, src *Tensor, se int64) {
	sz := int64(src.DType.Size())
	copy(dst.Data[de*sz:(de+1)*sz], src.Data[se*sz:(se+1)*sz])
}

// storageIndex maps idx to t's storage element (no bounds checks).
func storageIndex(t *Tensor, idx []int64) int64 {
	e := t.Offset
	for d, i := range idx {
		e += i * t.Strides[d]
	}
	return e
}

// rowMajor lists t's storage elements in row-major order of its indices.
func rowMajor(t *Tensor) []int64 {
	out := make([]int64, 0, t.Numel())
	if generalOnly {
		t.Each(func(_ []int64, e int64) { out = append(out, e) })
		return out
	}
	t.eachRun(func(e, n, stride int64) {
		for k := int64(0); k < n; k++ {
			out = append(out, e+k*stride)
		}
	})
	return out
}

// unravel is the row-major multi-index of linear index i in shape.
func unravel(i int64, shape []int64) []int64 {
	idx := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return idx
}

func numel(shape []int64) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	return n
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// denseLike returns the strides at::empty_like(t) gives its result
// (MemoryFormat::Preserve): t's own dim order when t is non-overlapping and
// dense, else contiguous.
func denseLike(t *Tensor) []int64 {
	n := t.Dims()
	if n == 0 {
		return nil
	}
	perm := dimsByStride(t) // outermost first
	// Non-overlapping and dense: walking dims innermost first, each stride
	// equals the product of the sizes inside it (size-1 dims are free).
	want := int64(1)
	for k := n - 1; k >= 0; k-- {
		d := perm[k]
		if t.Shape[d] == 1 {
			continue
		}
		if t.Strides[d] != want {
			return ContiguousStrides(t.Shape)
		}
		want *= t.Shape[d]
	}
	st := make([]int64, n)
	acc := int64(1)
	for k := n - 1; k >= 0; k-- {
		d := perm[k]
		st[d] = acc
		if t.Shape[d] > 1 {
			acc *= t.Shape[d]
		}
	}
	return st
}

// dimsByStride orders t's dims outermost first: by stride, larger first;
// size-1 and stride-0 dims (which have no memory order) go outermost; ties
// keep dim order.
func dimsByStride(t *Tensor) []int {
	n := t.Dims()
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	key := func(d int) int64 {
		if t.Shape[d] <= 1 || t.Strides[d] == 0 {
			return math.MaxInt64
		}
		return t.Strides[d]
	}
	sort.SliceStable(perm, func(a, b int) bool { return key(perm[a]) > key(perm[b]) })
	return perm
}

// newStrided allocates a zero tensor of dtype dt with the given shape and
// strides.
func newStrided(dt DType, shape, strides []int64) *Tensor {
	n := numel(shape)
	out := &Tensor{DType: dt, Shape: append([]int64(nil), shape...), Strides: append([]int64(nil), strides...)}
	ext := int64(0)
	if n > 0 {
		ext = 1
		for d := range shape {
			ext += (shape[d] - 1) * strides[d]
		}
	}
	out.Data = make([]byte, ext*int64(dt.Size()))
	return out
}

// newFloatOut builds a contiguous tensor of dtype dt holding vals (row-major),
// rounded to dt.
func newFloatOut(dt DType, shape []int64, vals []float64) *Tensor {
	out := MustNew(dt, shape...)
	for i, v := range vals {
		out.StoreFloat(int64(i), v)
	}
	return out
}

// isIndexDType reports int32 or int64.
func isIndexDType(d DType) bool { return d == Int32 || d == Int64 }

// memOrder returns t's elements' row-major linear indices (over t's shape)
// in the order a TensorIterator whose only operand is t visits them.
func memOrder(t *Tensor) []int64 {
	return tiVisit(t.Shape, [][]int64{t.Strides})
}

// tiPerm is TensorIterator::reorder_dimensions (aten/src/ATen/TensorIterator.cpp):
// the dims of shape, innermost (fastest) first, from the operands' strides
// (in elements; nil entries are skipped, like undefined outputs). Dims start
// in reverse order and are insertion-sorted by a comparison that the first
// operand with non-zero strides in both dims decides; broadcast (stride 0)
// dims leave the decision to the next operand, and an undecided pair keeps
// its order.
func tiPerm(shape []int64, operands [][]int64) []int {
	n := len(shape)
	perm := make([]int, n)
	for i := range perm {
		perm[i] = n - 1 - i
	}
	shouldSwap := func(d0, d1 int) int {
		for _, st := range operands {
			if st == nil {
				continue
			}
			s0, s1 := st[d0], st[d1]
			if s0 == 0 || s1 == 0 {
				continue
			}
			if s0 < s1 {
				return -1
			}
			if s0 > s1 {
				return 1
			}
			if shape[d0] > shape[d1] {
				return 1
			}
		}
		return 0
	}
	for i := 1; i < n; i++ {
		d1 := i
		for d0 := i - 1; d0 >= 0; d0-- {
			c := shouldSwap(perm[d0], perm[d1])
			if c > 0 {
				perm[d0], perm[d1] = perm[d1], perm[d0]
				d1 = d0
			} else if c < 0 {
				break
			}
		}
	}
	return perm
}

// tiVisit lists the row-major linear indices of shape's elements in the
// order a TensorIterator over the operands visits them (tiPerm's first dim
// fastest).
func tiVisit(shape []int64, operands [][]int64) []int64 {
	total := numel(shape)
	out := make([]int64, 0, total)
	if total == 0 {
		return out
	}
	n := len(shape)
	// A size-1 dim has a meaningless stride: give it 0 so it never decides.
	ops := make([][]int64, len(operands))
	for k, st := range operands {
		if st == nil {
			continue
		}
		c := append([]int64(nil), st...)
		for d := range c {
			if shape[d] == 1 {
				c[d] = 0
			}
		}
		ops[k] = c
	}
	perm := tiPerm(shape, ops)
	rm := ContiguousStrides(shape)
	idx := make([]int64, n)
	for {
		lin := int64(0)
		for d := 0; d < n; d++ {
			lin += idx[d] * rm[d]
		}
		out = append(out, lin)
		k := 0
		for ; k < n; k++ {
			d := perm[k]
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
		if k == n {
			return out
		}
	}
}

// tiGroups is the loop structure of a TensorIterator over shape: the dims
// of its innermost loop (after TensorIterator::coalesce_dimensions merged
// adjacent dims that every operand walks contiguously), innermost first,
// and the remaining dims, innermost first.
func tiGroups(shape []int64, operands [][]int64) (inner, outer []int) {
	n := len(shape)
	if n == 0 {
		return nil, nil
	}
	ops := make([][]int64, 0, len(operands))
	for _, st := range operands {
		if st == nil {
			continue
		}
		c := append([]int64(nil), st...)
		for d := range c {
			if shape[d] == 1 {
				c[d] = 0
			}
		}
		ops = append(ops, c)
	}
	perm := tiPerm(shape, ops)
	// Coalesce along perm: a group's running size and strides.
	type group struct {
		dims    []int
		size    int64
		strides []int64
	}
	var groups []group
	for _, d := range perm {
		st := make([]int64, len(ops))
		for k := range ops {
			st[k] = ops[k][d]
		}
		if len(groups) > 0 {
			g := &groups[len(groups)-1]
			can := g.size == 1 || shape[d] == 1
			if !can {
				can = true
				for k := range ops {
					if g.size*g.strides[k] != st[k] {
						can = false
						break
					}
				}
			}
			if can {
				if g.size == 1 {
					g.strides = st
				}
				g.dims = append(g.dims, d)
				g.size *= shape[d]
				continue
			}
		}
		groups = append(groups, group{dims: []int{d}, size: shape[d], strides: st})
	}
	inner = groups[0].dims
	for _, g := range groups[1:] {
		outer = append(outer, g.dims...)
	}
	return inner, outer
}

// odometer calls fn for every index over dims of shape, the first listed
// dim fastest, with the other entries of idx left as they are.
func odometer(shape []int64, dims []int, idx []int64, fn func()) {
	for _, d := range dims {
		if shape[d] == 0 {
			return
		}
		idx[d] = 0
	}
	for {
		fn()
		k := 0
		for ; k < len(dims); k++ {
			d := dims[k]
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
		if k == len(dims) {
			return
		}
	}
}
