package kernels

import (
	"math"
	"strconv"
)

// Indexing ops: embedding, index_select, gather, scatter_add, one_hot and
// advanced indexing along one dim. CPU control flow and messages follow
// torch 1.13's aten/src/ATen/native/TensorAdvancedIndexing.cpp,
// ScatterGatherChecks.h, Embedding.cpp and IndexingUtils; CUDA launches
// follow cuda/Indexing.cu, cuda/ScatterGatherKernel.cu and
// cuda/IndexKernel.cu.

func init() {
	register(&Op{
		Name:    "embedding",
		Tensors: []TensorArg{{Name: "input"}, {Name: "weight"}},
		Attrs: []Attr{
			{Name: "padding_idx", Kind: AttrOptionalInt, Default: nil},
			{Name: "scale_grad_by_freq", Kind: AttrBool, Default: false},
			{Name: "sparse", Kind: AttrBool, Default: false},
		},
		Signature: "torch.nn.functional.embedding(input, weight, padding_idx=None, scale_grad_by_freq=False, sparse=False)",
		Torch:     TorchCall{Function: "nn.functional.embedding", Positional: []string{"input", "weight"}},
		Advice:    "Token ids must be in [0, num_embeddings) (the weight's first dimension): an id equal to the vocabulary size means a tokenizer with added tokens and an embedding that was not resized; check padding_idx too.",
		run:       runEmbedding,
		memory:    memoryEmbedding,
		frames:    []Frame{frameEmbedding},
	})
	register(&Op{
		Name:      "index_select",
		Tensors:   []TensorArg{{Name: "input"}, {Name: "index"}},
		Attrs:     []Attr{{Name: "dim", Kind: AttrInt, Required: true}},
		Signature: "torch.index_select(input, dim, index)",
		Torch:     TorchCall{Function: "index_select", Positional: []string{"input", "dim", "index"}},
		Advice:    adviceIndexAlongDim,
		run:       runIndexSelect,
		memory:    memoryIndexSelect,
	})
	register(&Op{
		Name:    "gather",
		Tensors: []TensorArg{{Name: "input"}, {Name: "index"}},
		Attrs: []Attr{
			{Name: "dim", Kind: AttrInt, Required: true},
			{Name: "sparse_grad", Kind: AttrBool, Default: false},
		},
		Signature: "torch.gather(input, dim, index, sparse_grad=False)",
		Torch:     TorchCall{Function: "gather", Positional: []string{"input", "dim", "index"}},
		Advice:    adviceIndexAlongDim,
		run:       runGather,
		memory:    memoryGather,
	})
	register(&Op{
		Name:      "scatter_add",
		Tensors:   []TensorArg{{Name: "input"}, {Name: "index"}, {Name: "src"}},
		Attrs:     []Attr{{Name: "dim", Kind: AttrInt, Required: true}},
		Signature: "torch.scatter_add(input, dim, index, src)",
		Torch:     TorchCall{Function: "scatter_add", Positional: []string{"input", "dim", "index", "src"}},
		Advice:    adviceIndexAlongDim,
		run:       runScatterAdd,
		memory:    memoryScatterAdd,
	})
	register(&Op{
		Name:      "one_hot",
		Tensors:   []TensorArg{{Name: "tensor", Aliases: []string{"input"}}},
		Attrs:     []Attr{{Name: "num_classes", Kind: AttrInt, Default: int64(-1)}},
		Signature: "torch.nn.functional.one_hot(tensor, num_classes=-1)",
		Torch:     TorchCall{Function: "nn.functional.one_hot", Positional: []string{"tensor"}},
		Advice:    "Every label must be in [0, num_classes): num_classes must exceed the largest label (and labels must not be negative).",
		run:       runOneHot,
		memory:    memoryOneHot,
	})
	register(&Op{
		Name:      "index",
		Tensors:   []TensorArg{{Name: "input"}, {Name: "index"}},
		Attrs:     []Attr{{Name: "dim", Kind: AttrInt, Default: int64(0)}},
		Signature: "input[(slice(None),) * dim + (index,)]",
		Torch:     TorchCall{Function: "", Positional: []string{"input", "dim", "index"}}, // Python indexing
		Advice:    adviceIndexAlongDim,
		run:       runIndex,
		memory:    memoryIndex,
	})
}

// adviceIndexAlongDim is the advice of the ops that index along dim.
const adviceIndexAlongDim = "Every index must be in [0, size) along `dim` of the indexed tensor (negative indices are not wrapped by these kernels on CUDA)."

// memoryEmbedding: a flattened copy of a non-contiguous index, then the
// output.
func memoryEmbedding(c *call, add allocate) bool {
	input, weight := c.tensor("input"), c.tensor("weight")
	if weight.Dims() != 2 || !isIndexDType(input.DType) {
		return false
	}
	if input.Dims() > 1 && !input.IsContiguous() {
		add("indices.reshape(-1)", input.Numel(), input.DType)
	}
	add("output", input.Numel()*weight.Shape[1], weight.DType)
	return true
}

func memoryIndexSelect(c *call, add allocate) bool {
	input, index := c.tensor("input"), c.tensor("index")
	if input.Dims() == 0 {
		add("output", index.Numel(), input.DType)
		return true
	}
	dim, f := wrapDim(c.int("dim"), input.Dims())
	if f != nil {
		return false
	}
	add("output", sliceNumel(input, dim)*index.Numel(), input.DType)
	return true
}

func memoryGather(c *call, add allocate) bool {
	// gather's shape checks come before its output.
	if _, f := gatherChecks(c.tensor("input"), c.int("dim"), c.tensor("index")); f != nil {
		return false
	}
	add("output", c.tensor("index").Numel(), c.tensor("input").DType)
	return true
}

func memoryScatterAdd(c *call, add allocate) bool {
	input, index, src := c.tensor("input"), c.tensor("index"), c.tensor("src")
	if index.DType != Int64 || input.DType != src.DType {
		return false
	}
	add("output", input.Numel(), input.DType)
	return true
}

// memoryOneHot reads the values when num_classes is -1 (the output's size
// depends on them).
func memoryOneHot(c *call, add allocate) bool {
	t := c.tensor("tensor")
	if t.DType != Int64 {
		return false
	}
	nc := c.int("num_classes")
	if t.Numel() == 0 && nc <= 0 {
		return false
	}
	mn, mx := int64(0), int64(-1)
	t.Each(func(_ []int64, e int64) {
		v := t.LoadInt(e)
		mn, mx = min(mn, v), max(mx, v)
	})
	if nc == -1 {
		nc = mx + 1
	}
	// On CPU the value checks come before the output; CUDA leaves them
	// to scatter's device asserts, after it.
	if nc <= 0 || !c.cuda && (mn < 0 || mx >= nc) {
		return false
	}
	add("output", t.Numel()*nc, Int64)
	return true
}

// memoryIndex counts a mask's set elements (the output's size depends on
// them).
func memoryIndex(c *call, add allocate) bool {
	input, index := c.tensor("input"), c.tensor("index")
	dim := c.int("dim")
	if dim < 0 || dim >= int64(input.Dims()) {
		return false
	}
	switch index.DType {
	case Int64:
		add("output", sliceNumel(input, dim)*index.Numel(), input.DType)
	case Bool, Uint8:
		var n int64
		index.Each(func(_ []int64, e int64) {
			if index.LoadInt(e) != 0 {
				n++
			}
		})
		add("output", sliceNumel(input, dim)*n, input.DType)
	default:
		return false
	}
	return true
}

func runEmbedding(c *call) (*Result, error) {
	input, weight := c.tensor("input"), c.tensor("weight")
	if pi, set := c.optInt("padding_idx"); set {
		if pi > 0 || pi < 0 {
			n, f := sizeAt(weight, 0)
			if f != nil {
				return fail(withFrames(f, frameEmbeddingPadPos))
			}
			if pi > 0 && pi >= n {
				return fail(hostErr("", "AssertionError", "Padding_idx must be within num_embeddings", frameEmbeddingPadPos))
			}
			if pi < 0 && pi < -n {
				return fail(hostErr("", "AssertionError", "Padding_idx must be within num_embeddings", frameEmbeddingPadNeg))
			}
		}
	}
	// at::embedding (aten/src/ATen/native/Embedding.cpp).
	if weight.Dims() != 2 {
		return fail(runtimeErr("'weight' must be 2-D", frameEmbedding))
	}
	if !isIndexDType(input.DType) {
		return fail(runtimeErr("Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got "+
			legacyTypeName(input.DType, c.cuda)+" instead (while checking arguments for embedding)", frameEmbedding))
	}
	flat := reshaped(input, []int64{input.Numel()})
	out, f := indexSelect(c, weight, 0, flat, "input", input)
	if f != nil {
		return fail(withFrames(f, frameEmbedding))
	}
	shape := append(append([]int64(nil), input.Shape...), weight.Shape[1])
	out.Shape, out.Strides = shape, ContiguousStrides(shape)
	return ok(out)
}

func runIndexSelect(c *call) (*Result, error) {
	input, index := c.tensor("input"), c.tensor("index")
	out, f := indexSelect(c, input, c.int("dim"), index, "index", index)
	if f != nil {
		return fail(f)
	}
	return ok(out)
}

// indexSelect is index_select_out_cpu_ / index_select_out_cuda. name and
// orig name the tensor the indices come from, for device asserts
// (embedding passes its input before the reshape).
func indexSelect(c *call, self *Tensor, dim int64, index *Tensor, name string, orig *Tensor) (*Tensor, *Failure) {
	dim, f := wrapDim(dim, self.Dims())
	if f != nil {
		return nil, f
	}
	if c.cuda {
		// index_select_out_cuda_impl (texts not checked against a GPU build).
		if index.Dims() > 1 {
			return nil, runtimeErr("Index is supposed to be an empty tensor or a vector")
		}
	} else {
		if index.Dims() > 1 {
			return nil, indexErr("index_select(): Index is supposed to be a vector")
		}
		if !isIndexDType(index.DType) {
			return nil, runtimeErr("index_select(): Expected dtype int32 or int64 for index")
		}
	}
	n := index.Numel()
	shape := append([]int64(nil), self.Shape...)
	if self.Dims() > 0 {
		shape[dim] = n
	}
	// On the CPU the index is read a block at a time, for the checks (each
	// reports the first bad index, in order) and for the copy.
	var idx []int64
	if c.cuda || generalOnly {
		idx = intValues(index)
	}
	parts := func(fn func(lo int64, part []int64) *Failure) *Failure {
		if idx != nil {
			return fn(0, idx)
		}
		buf := make([]int64, min(n, 1<<16))
		stride := int64(0)
		if index.Dims() == 1 {
			stride = index.Strides[0]
		}
		for lo := int64(0); lo < n; lo += int64(len(buf)) {
			part := buf[:min(int64(len(buf)), n-lo)]
			index.loadInts(part, index.Offset+lo*stride, stride)
			if f := fn(lo, part); f != nil {
				return f
			}
		}
		return nil
	}
	inRange := func(hi int64, bad func(v int64) *Failure) *Failure {
		return parts(func(_ int64, part []int64) *Failure {
			for _, v := range part {
				if v < 0 || v >= hi {
					return bad(v)
				}
			}
			return nil
		})
	}
	arrayRange := func(axis int64) *Failure {
		return inRange(axis, func(v int64) *Failure { return indexArrayRangeErr(v, axis) })
	}
	outOfRange := func(int64) *Failure { return indexOutOfRange() }
	axis := int64(1)
	if self.Dims() > 0 {
		axis = self.Shape[dim]
	}
	if c.cuda {
		if numel(shape) == 0 {
			return MustNew(self.DType, shape...), nil
		}
		if !isIndexDType(index.DType) {
			return nil, notImplemented("index_select_out_cuda_impl", index.DType)
		}
		if f := indexSelectCUDAAsserts(c, shape, dim, idx, axis, name, orig); f != nil {
			return nil, f
		}
	} else if self.Dims() > 1 {
		if n == 0 {
			return MustNew(self.DType, shape...), nil
		}
		if self.Numel() == 0 {
			if axis <= 0 {
				return nil, runtimeErr("index_select(): self indexing axis dim should be positive")
			}
			if f := arrayRange(axis); f != nil {
				return nil, f
			}
			return MustNew(self.DType, shape...), nil
		}
		if dim == 1 {
			if f := arrayRange(axis); f != nil {
				return nil, f
			}
		} else if f := inRange(axis, outOfRange); f != nil {
			return nil, f
		}
	} else if f := inRange(self.Numel(), outOfRange); f != nil {
		return nil, f
	}
	out := MustNew(self.DType, shape...)
	if self.Dims() == 0 {
		if n > 0 {
			copyElem(out, 0, self, self.Offset)
		}
		return out, nil
	}
	if !generalOnly {
		if out.Numel() > 0 {
			part := append([]int64(nil), shape...)
			var offsets []int64 // reused by every block's plan
			parts(func(lo int64, idx []int64) *Failure {
				part[dim] = int64(len(idx))
				if offsets == nil {
					offsets = make([]int64, len(idx))
				}
				newCopyPlanIn(part, out.Strides, self.Strides, int(dim), idx, self.DType.Size(), offsets).
					exec(out.Data, self.Data, lo*out.Strides[dim], self.Offset)
				return nil
			})
		}
		return out, nil
	}
	i := int64(0)
	src := make([]int64, self.Dims())
	out.Each(func(oi []int64, _ int64) {
		copy(src, oi)
		src[dim] = idx[oi[dim]]
		copyElem(out, i, self, storageIndex(self, src))
		i++
	})
	return out, nil
}

// indexOutOfRange is index_select's (and embedding's) range check on CPU.
func indexOutOfRange() *Failure {
	return hostErr(classIndexSelect, "IndexError", "index out of range in self")
}

// indexArrayRangeErr is the failure of index_select's
// check_indexarray_range. It is unclassed: it is index_select's range
// check, but signature has no rule for this text, and Failure.Class says
// what signature says (a gap TestOpClasses documents).
func indexArrayRangeErr(v, axis int64) *Failure {
	return runtimeErr("INDICES element is out of DATA bounds, id=" + strconv.FormatInt(v, 10) +
		" axis_dim=" + strconv.FormatInt(axis, 10))
}

// indexSelectCUDAAsserts emulates indexSelectSmallIndex/LargeIndex
// (cuda/Indexing.cu, 32-bit index math). With at most 16 indices the small
// kernel runs min(ceil(slice/128), 8·SMs) blocks of min(slice, 128)
// threads, and every thread walks all indices in order, asserting
// srcIndex < srcSelectDimSize (unsigned: negatives fail) before touching
// the slice, so every thread of the grid fails on the first bad index.
// Otherwise the large kernel runs min(ceil(total/128), 8·SMs) blocks of
// min(total, 128) threads over the output's linear index with a grid
// stride; the index of linear element L is L/slice when the index dim is
// "major" (some output dim after it has size > 1) and L%numIndices
// otherwise.
func indexSelectCUDAAsserts(c *call, outShape []int64, dim int64, idx []int64, axis int64, name string, orig *Tensor) *Failure {
	nIdx := int64(len(idx))
	total := numel(outShape)
	slice := total / nIdx
	bad := func(i int64) bool { return idx[i] < 0 || idx[i] >= axis }
	as := newAsserts(name, orig)
	sms := int64(c.opts.SMs)
	if nIdx <= 16 {
		first := int64(-1)
		for i := int64(0); i < nIdx; i++ {
			if bad(i) {
				first = i
				break
			}
		}
		if first < 0 {
			return nil
		}
		grid := minInt64(ceilDiv(slice, 128), sms*8)
		block := minInt64(slice, 128)
		for b := int64(0); b < grid; b++ {
			for t := int64(0); t < block; t++ {
				as.add(SiteIndexSelectSmall, b, t, first)
			}
		}
		return as.failure()
	}
	grid := minInt64(ceilDiv(total, 128), sms*8)
	block := minInt64(total, 128)
	g := grid * block
	major := numel(outShape[dim+1:]) > 1
	for L := int64(0); L < total && as.n < g; L++ {
		var d int64
		if major {
			d = L / slice
		} else {
			d = L % nIdx
		}
		if bad(d) {
			th := L % g
			as.add(SiteIndexSelectLarge, th/block, th%block, d)
		}
	}
	return as.failure()
}

func minInt64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

// gatherChecks is TORCH_META_FUNC(gather).
func gatherChecks(self *Tensor, dim int64, index *Tensor) (int64, *Failure) {
	dim, f := wrapDim(dim, self.Dims())
	if f != nil {
		return 0, f
	}
	if index.Numel() == 0 {
		return dim, nil
	}
	if index.DType != Int64 {
		return 0, runtimeErr("gather(): Expected dtype int64 for index")
	}
	nd := nonemptyDims(self)
	if nd != nonemptyDims(index) {
		return 0, runtimeErr("Index tensor must have the same number of dimensions as input tensor")
	}
	for i := int64(0); i < int64(nd); i++ {
		if i == dim {
			continue
		}
		is, _ := nonemptySize(index, i)
		ss, _ := nonemptySize(self, i)
		if is > ss {
			return 0, runtimeErr("Size does not match at dimension " + strconv.FormatInt(i, 10) + " expected index " +
				fmtSizes(index.Shape) + " to be smaller than self " + fmtSizes(self.Shape) + " apart from dimension " + strconv.FormatInt(dim, 10))
		}
	}
	return dim, nil
}

func runGather(c *call) (*Result, error) {
	self, index := c.tensor("input"), c.tensor("index")
	dim, f := gatherChecks(self, c.int("dim"), index)
	if f != nil {
		return fail(f)
	}
	out := MustNew(self.DType, index.Shape...)
	if index.Numel() == 0 {
		return ok(out)
	}
	bound, _ := nonemptySize(self, dim)
	fast := !generalOnly && self.Dims() > 0 && out.Dims() == self.Dims()
	if fast && !c.cuda && indexInBounds(index, bound) {
		// The index is read in place, a row at a time.
		gatherRows(out, self, int(dim), index)
		return ok(out)
	}
	vals := intValues(index)
	if c.cuda {
		// _scatter_gather_elementwise_kernel<128, 4> over the index's
		// elements (the output is contiguous, so in row-major order).
		as := newAsserts("index", index)
		for p, v := range vals {
			if v < 0 || v >= bound {
				b, t := elementwiseThread(int64(p), int64(len(vals)), 1)
				as.add(SiteScatterGather, b, t, int64(p))
			}
		}
		if f := as.failure(); f != nil {
			return fail(f)
		}
	} else if generalOnly || !inBounds(vals, 0, bound) {
		// The first bad index in the kernel's order is the one reported.
		for _, lin := range cpuScatterGatherOrder(index, dim, out.Strides, self.Strides, out.Dims()) {
			if v := vals[lin]; v < 0 || v >= bound {
				return fail(scatterGatherOOB(v, dim, bound))
			}
		}
	}
	if fast {
		gatherRows(out, self, int(dim), index)
		return ok(out)
	}
	src := make([]int64, self.Dims())
	i := int64(0)
	out.Each(func(oi []int64, _ int64) {
		if self.Dims() > 0 {
			copy(src, oi)
			src[dim] = vals[i]
		}
		copyElem(out, i, self, storageIndex(self, src))
		i++
	})
	return ok(out)
}

// indexInBounds reports whether every element of index lies in [0, hi),
// reading it a run at a time.
func indexInBounds(index *Tensor, hi int64) bool {
	buf := make([]int64, min(index.Numel(), 4096))
	in := true
	index.eachRun(func(e, n, stride int64) {
		for k := int64(0); k < n && in; k += int64(len(buf)) {
			b := buf[:min(int64(len(buf)), n-k)]
			index.loadInts(b, e+k*stride, stride)
			in = inBounds(b, 0, hi)
		}
	})
	return in
}

// inBounds reports whether every v of vals lies in [lo, hi).
func inBounds(vals []int64, lo, hi int64) bool {
	for _, v := range vals {
		if v < lo || v >= hi {
			return false
		}
	}
	return true
}

// gatherRows is gather's copy into the contiguous out (index's shape),
// row by row of the last dim: out[..., j] = self[...] with index's value at
// [..., j] along dim.
func gatherRows(out, self *Tensor, dim int, index *Tensor) {
	nd := out.Dims()
	n := out.Shape[nd-1]
	es := int64(self.DType.Size())
	sd, sl := self.Strides[dim], self.Strides[nd-1]
	if dim == nd-1 {
		sl = 0 // the last dim's position comes from the index
	}
	idx := make([]int64, nd)
	rows := out.Numel() / max64(n, 1)
	row := make([]int64, n)
	for r := int64(0); r < rows; r++ {
		p := r * n
		unravelInto(idx, p, out.Shape)
		base, ibase := self.Offset, index.Offset
		for d := 0; d < nd-1; d++ {
			if d != dim {
				base += idx[d] * self.Strides[d]
			}
			ibase += idx[d] * index.Strides[d]
		}
		dst := out.Data[p*es : (p+n)*es]
		index.loadInts(row, ibase, index.Strides[nd-1])
		switch es {
		case 4:
			for j, v := range row {
				e := (base + v*sd + int64(j)*sl) * 4
				copy(dst[j*4:j*4+4], self.Data[e:e+4])
			}
		case 8:
			for j, v := range row {
				e := (base + v*sd + int64(j)*sl) * 8
				copy(dst[j*8:j*8+8], self.Data[e:e+8])
			}
		default:
			for j, v := range row {
				e := (base + v*sd + int64(j)*sl) * es
				copy(dst[int64(j)*es:int64(j+1)*es], self.Data[e:e+es])
			}
		}
	}
}

// cpuScatterGatherOrder lists the index's elements (row-major linear
// indices) in the order cpu_scatter_gather_base_kernel (cpu/ScatterGatherKernel.cpp)
// visits them: a TensorIterator over the index's shape with dim squashed to
// 1 and operands out, src and index; its innermost loop of n elements runs,
// when dim is out's last dim, each element's whole dim in turn, and
// otherwise each position along dim over all n elements.
func cpuScatterGatherOrder(index *Tensor, dim int64, outStrides, srcStrides []int64, outDims int) []int64 {
	shape := append([]int64(nil), index.Shape...)
	if len(shape) == 0 {
		return []int64{0}
	}
	dimSize := shape[dim]
	shape[dim] = 1
	inner, outer := tiGroups(shape, [][]int64{fit(outStrides, len(shape)), fit(srcStrides, len(shape)), index.Strides})
	rm := ContiguousStrides(index.Shape)
	idx := make([]int64, len(shape))
	lin := func() int64 {
		l := int64(0)
		for d := range idx {
			l += idx[d] * rm[d]
		}
		return l
	}
	var order []int64
	last := dim == int64(outDims-1) || outDims == 0
	odometer(shape, outer, idx, func() {
		if last {
			odometer(shape, inner, idx, func() {
				for i := int64(0); i < dimSize; i++ {
					idx[dim] = i
					order = append(order, lin())
				}
				idx[dim] = 0
			})
			return
		}
		for i := int64(0); i < dimSize; i++ {
			odometer(shape, inner, idx, func() {
				idx[dim] = i
				order = append(order, lin())
				idx[dim] = 0
			})
		}
	})
	return order
}

// fit pads or trims strides to n dims (a 0-d operand's strides are empty).
func fit(st []int64, n int) []int64 {
	out := make([]int64, n)
	copy(out, st)
	return out
}

// scatterGatherOOB is the CPU form of scatter's and gather's range check.
func scatterGatherOOB(v, dim, bound int64) *Failure {
	return hostErr(classGatherBounds, "RuntimeError", "index "+strconv.FormatInt(v, 10)+" is out of bounds for dimension "+
		strconv.FormatInt(dim, 10)+" with size "+strconv.FormatInt(bound, 10))
}

func runScatterAdd(c *call) (*Result, error) {
	self, index, src := c.tensor("input"), c.tensor("index"), c.tensor("src")
	// scatter_meta_impl: dtype checks, then shape checks.
	dim, f := wrapDim(c.int("dim"), self.Dims())
	if f != nil {
		return fail(f)
	}
	if index.Numel() != 0 && index.DType != Int64 {
		return fail(runtimeErr("scatter(): Expected dtype int64 for index"))
	}
	if self.DType != src.DType {
		return fail(runtimeErr("scatter(): Expected self.dtype to be equal to src.dtype"))
	}
	out := contiguousView(self, self.Shape)
	if index.Numel() == 0 {
		return ok(out)
	}
	nd := nonemptyDims(self)
	if nd != nonemptyDims(index) {
		return fail(runtimeErr("Index tensor must have the same number of dimensions as self tensor"))
	}
	wrong := false
	for d := int64(0); d < int64(nd); d++ {
		is, _ := nonemptySize(index, d)
		if d == dim {
			continue
		}
		if ss, _ := nonemptySize(self, d); is > ss {
			wrong = true
			break
		}
	}
	if !wrong {
		for d := int64(0); d < int64(nd); d++ {
			is, _ := nonemptySize(index, d)
			ss, f := nonemptySize(src, d)
			if f != nil {
				return fail(f)
			}
			if is > ss {
				wrong = true
				break
			}
		}
	}
	if nonemptyDims(src) != nonemptyDims(index) {
		return fail(runtimeErr("Index tensor must have the same number of dimensions as src tensor"))
	}
	if wrong {
		return fail(runtimeErr("Expected index " + fmtSizes(index.Shape) + " to be smaller than self " + fmtSizes(self.Shape) +
			" apart from dimension " + strconv.FormatInt(dim, 10) + " and to be smaller size than src " + fmtSizes(src.Shape)))
	}
	bound, _ := nonemptySize(self, dim)
	vals := intValues(index)
	if c.cuda && (generalOnly || !inBounds(vals, 0, bound)) {
		as := newAsserts("index", index)
		// The iterator's order: out (stride 0 along dim), src, index.
		outSt := make([]int64, len(index.Shape))
		srcSt := make([]int64, len(index.Shape))
		copy(outSt, out.Strides)
		copy(srcSt, src.Strides)
		if len(outSt) > 0 {
			outSt[dim] = 0
		}
		order := tiVisit(index.Shape, [][]int64{outSt, srcSt, index.Strides})
		for p, lin := range order {
			if v := vals[lin]; v < 0 || v >= bound {
				b, t := elementwiseThread(int64(p), int64(len(order)), 1)
				as.add(SiteScatterGather, b, t, lin)
			}
		}
		if f := as.failure(); f != nil {
			return fail(f)
		}
	}
	// cpu_scatter_gather_base_kernel's order, one addition at a time in
	// the output dtype.
	var failure *Failure
	pos := make([]int64, out.Dims())
	ii := make([]int64, index.Dims())
	srcSt := fit(src.Strides, len(ii))
	for _, lin := range cpuScatterGatherOrder(index, dim, out.Strides, src.Strides, out.Dims()) {
		v := vals[lin]
		if v < 0 || v >= bound {
			failure = scatterGatherOOB(v, dim, bound)
			break
		}
		unravelInto(ii, lin, index.Shape)
		copy(pos, ii)
		if out.Dims() > 0 {
			pos[dim] = v
		}
		oe := storageIndex(out, pos)
		se := src.Offset
		for d, st := range srcSt {
			se += ii[d] * st
		}
		if self.DType.IsFloat() {
			out.StoreFloat(oe, out.LoadFloat(oe)+src.LoadFloat(se))
		} else {
			out.StoreInt(oe, out.LoadInt(oe)+src.LoadInt(se))
		}
	}
	if failure != nil {
		return fail(failure)
	}
	return ok(out)
}

func runOneHot(c *call) (*Result, error) {
	self := c.tensor("tensor")
	nc := c.int("num_classes")
	if self.DType != Int64 {
		return fail(runtimeErr("one_hot is only applicable to index tensor."))
	}
	shape := append([]int64(nil), self.Shape...)
	if self.Numel() == 0 {
		if nc <= 0 {
			return fail(runtimeErr("Can not infer total number of classes from empty tensor."))
		}
		return ok(MustNew(Int64, append(shape, nc)...))
	}
	vals := intValues(self)
	mn, mx := int64(math.MaxInt64), int64(math.MinInt64)
	for _, v := range vals {
		if v < mn {
			mn = v
		}
		if v > mx {
			mx = v
		}
	}
	if !c.cuda && mn < 0 {
		return fail(hostErr(classOneHotRange, "RuntimeError", "Class values must be non-negative."))
	}
	if nc == -1 {
		nc = mx + 1
	} else if !c.cuda {
		if nc <= mx {
			return fail(hostErr(classOneHotRange, "RuntimeError", "Class values must be smaller than num_classes."))
		}
	} else if nc < 1 {
		return fail(runtimeErr("num_classes should be positive"))
	}
	if c.cuda {
		// ret.scatter_(-1, self.unsqueeze(-1), 1): the device checks.
		as := newAsserts("tensor", self)
		for p, v := range vals {
			if v < 0 || v >= nc {
				b, t := elementwiseThread(int64(p), int64(len(vals)), 1)
				as.add(SiteScatterFill, b, t, int64(p))
			}
		}
		if f := as.failure(); f != nil {
			return fail(f)
		}
	}
	out := MustNew(Int64, append(shape, nc)...)
	for i, v := range vals {
		out.StoreInt(int64(i)*nc+v, 1)
	}
	return ok(out)
}

// runIndex is input[(slice(None),)*dim + (index,)] (THPVariable_getitem,
// then at::index for a tensor index).
func runIndex(c *call) (*Result, error) {
	input, index := c.tensor("input"), c.tensor("index")
	dim := c.int("dim")
	if dim < 0 {
		return nil, errorf(ErrAttr, "index: dim %d is negative", dim)
	}
	if dim+1 > int64(input.Dims()) {
		return fail(indexErr("too many indices for tensor of dimension " + strconv.Itoa(input.Dims())))
	}
	size := input.Shape[dim]
	if index.Dims() == 0 && index.DType != Bool && index.DType != Uint8 && !index.DType.IsFloat() {
		// A 0-d integer tensor indexes like a Python int: select().
		v := index.LoadInt(index.Offset)
		if v < -size || v >= size {
			return fail(indexOutOfBounds(v, dim, size))
		}
		if v < 0 {
			v += size
		}
		shape := removeDim(input.Shape, dim)
		out := MustNew(input.DType, shape...)
		if !generalOnly {
			if out.Numel() > 0 {
				newCopyPlan(shape, out.Strides, removeDim(input.Strides, dim), -1, nil, input.DType.Size()).
					exec(out.Data, input.Data, 0, input.Offset+v*input.Strides[dim])
			}
			return ok(out)
		}
		src := make([]int64, input.Dims())
		i := int64(0)
		out.Each(func(oi []int64, _ int64) {
			copy(src[:dim], oi[:dim])
			src[dim] = v
			copy(src[dim+1:], oi[dim:])
			copyElem(out, i, input, storageIndex(input, src))
			i++
		})
		return ok(out)
	}
	switch index.DType {
	case Int64:
	case Bool, Uint8:
		return indexMask(c, input, dim, index)
	default:
		return fail(indexErr("tensors used as indices must be long, byte or bool tensors"))
	}
	if size == 0 && index.Numel() > 0 {
		return fail(indexErr("index is out of bounds for dimension with size 0"))
	}
	// Output: input.shape[:dim] + index.shape + input.shape[dim+1:].
	shape := append(append(append([]int64(nil), input.Shape[:dim]...), index.Shape...), input.Shape[dim+1:]...)
	out := MustNew(input.DType, shape...)
	total := numel(shape)
	if total == 0 {
		return ok(out)
	}
	vals := intValues(index)
	ki := int64(index.Dims())
	// The iterator's operands: input restrided (0 along the index's dims)
	// and the index restrided (0 along the other dims).
	inSt := make([]int64, len(shape))
	ixSt := make([]int64, len(shape))
	for d := int64(0); d < int64(len(shape)); d++ {
		switch {
		case d < dim:
			inSt[d] = input.Strides[d]
		case d < dim+ki:
			ixSt[d] = index.Strides[d-dim]
		default:
			inSt[d] = input.Strides[d-ki+1]
		}
	}
	ixRM := ContiguousStrides(index.Shape)
	if !generalOnly && inBounds(vals, -size, size) {
		// No check fails: the checks' order does not matter. Index k of
		// the flattened index dims takes input's slice vals[k] along dim.
		gidx := make([]int64, len(vals))
		for k, v := range vals {
			if v < 0 {
				v += size
			}
			gidx[k] = v
		}
		flat := append(append(append([]int64(nil), input.Shape[:dim]...), int64(len(vals))), input.Shape[dim+1:]...)
		newCopyPlan(flat, ContiguousStrides(flat), input.Strides, int(dim), gidx, input.DType.Size()).exec(out.Data, input.Data, 0, input.Offset)
		return ok(out)
	}
	order := tiVisit(shape, [][]int64{nil, inSt, ixSt})
	outRM := ContiguousStrides(shape)
	idxOf := func(lin int64) int64 {
		j := int64(0)
		for d := int64(0); d < ki; d++ {
			j += ((lin / outRM[dim+d]) % shape[dim+d]) * ixRM[d]
		}
		return j
	}
	if c.cuda {
		as := newAsserts("index", index)
		for p, lin := range order {
			j := idxOf(lin)
			if v := vals[j]; v < -size || v >= size {
				b, t := elementwiseThread(int64(p), total, 1)
				as.add(SiteIndex, b, t, j)
			}
		}
		if f := as.failure(); f != nil {
			return fail(f)
		}
	} else {
		for _, lin := range order {
			if v := vals[idxOf(lin)]; v < -size || v >= size {
				// at::index names dimension 0 whatever dim is.
				return fail(indexOutOfBounds(v, 0, size))
			}
		}
	}
	src := make([]int64, input.Dims())
	i := int64(0)
	out.Each(func(oi []int64, _ int64) {
		copy(src[:dim], oi[:dim])
		j := int64(0)
		for d := int64(0); d < ki; d++ {
			j += oi[dim+d] * ixRM[d]
		}
		v := vals[j]
		if v < 0 {
			v += size
		}
		src[dim] = v
		copy(src[dim+1:], oi[dim+ki:])
		copyElem(out, i, input, storageIndex(input, src))
		i++
	})
	return ok(out)
}

// indexOutOfBounds is advanced indexing's range check on CPU.
func indexOutOfBounds(v, dim, size int64) *Failure {
	return hostErr(classIndexBounds, "IndexError", "index "+strconv.FormatInt(v, 10)+" is out of bounds for dimension "+
		strconv.FormatInt(dim, 10)+" with size "+strconv.FormatInt(size, 10))
}

// indexMask is indexing with a 1-D bool or uint8 mask along dim.
func indexMask(c *call, input *Tensor, dim int64, mask *Tensor) (*Result, error) {
	if mask.Dims() != 1 {
		return nil, errorf(ErrUnsupported, "index: a %d-D mask (only 1-D masks are emulated)", mask.Dims())
	}
	if mask.Shape[0] != input.Shape[dim] {
		return fail(indexErr("The shape of the mask " + fmtSizes(mask.Shape) + " at index 0 does not match the shape of the indexed tensor " +
			fmtSizes(input.Shape) + " at index " + strconv.FormatInt(dim, 10)))
	}
	var keep []int64
	for i, v := range intValues(mask) {
		if v != 0 {
			keep = append(keep, int64(i))
		}
	}
	shape := append([]int64(nil), input.Shape...)
	shape[dim] = int64(len(keep))
	out := MustNew(input.DType, shape...)
	if !generalOnly {
		if out.Numel() > 0 {
			newCopyPlan(shape, out.Strides, input.Strides, int(dim), keep, input.DType.Size()).exec(out.Data, input.Data, 0, input.Offset)
		}
	} else {
		src := make([]int64, input.Dims())
		i := int64(0)
		out.Each(func(oi []int64, _ int64) {
			copy(src, oi)
			src[dim] = keep[oi[dim]]
			copyElem(out, i, input, storageIndex(input, src))
			i++
		})
	}
	var notes []string
	if mask.DType == Uint8 {
		notes = append(notes, "torch warns on stderr: indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.")
	}
	return ok(out, notes...)
}
