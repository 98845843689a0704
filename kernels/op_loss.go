package kernels

import (
	"math"
	"strconv"
	"sync/atomic"
)

// Losses: cross_entropy, nll_loss, binary_cross_entropy. The control flow and
// every message follow torch 1.13's aten/src/ATen/native/LossNLL.cpp,
// LossNLL2d.cpp, Loss.cpp and their CUDA twins (cuda/Loss.cu,
// cuda/NLLLoss2d.cu); the CPU texts were checked against torch 1.13 by
// TestOpsAgainstTorch.

const (
	reductionNone = 0
	reductionMean = 1
	reductionSum  = 2
)

func init() {
	register(&Op{
		Name:    "cross_entropy",
		Tensors: []TensorArg{{Name: "input"}, {Name: "target"}, {Name: "weight", Optional: true}},
		Attrs: []Attr{
			{Name: "ignore_index", Kind: AttrInt, Default: int64(defaultIgnoreIndex)},
			{Name: "reduction", Kind: AttrString, Default: "mean", Choices: reductions},
			{Name: "label_smoothing", Kind: AttrFloat, Default: 0.0},
		},
		Signature: "torch.nn.functional.cross_entropy(input, target, weight=None, ignore_index=-100, reduction='mean', label_smoothing=0.0)",
		Torch:     TorchCall{Function: "nn.functional.cross_entropy", Positional: []string{"input", "target"}},
		Advice:    adviceClassTargets,
		run:       runCrossEntropy,
		memory:    memoryCrossEntropy,
		frames:    []Frame{frameCrossEntropy},
		neutral:   map[string]string{"target": "ignore_index"},
		Misuses:   []*Misuse{misuseTargetDim, misuseTargetSize, misuseBatchSize, misuseScalarType},
		Rules:     []*Rule{ruleAllIgnored},
	})
	register(&Op{
		Name:    "nll_loss",
		Tensors: []TensorArg{{Name: "input"}, {Name: "target"}, {Name: "weight", Optional: true}},
		Attrs: []Attr{
			{Name: "ignore_index", Kind: AttrInt, Default: int64(defaultIgnoreIndex)},
			{Name: "reduction", Kind: AttrString, Default: "mean", Choices: reductions},
		},
		Signature: "torch.nn.functional.nll_loss(input, target, weight=None, ignore_index=-100, reduction='mean')",
		Torch:     TorchCall{Function: "nn.functional.nll_loss", Positional: []string{"input", "target"}},
		Advice:    adviceClassTargets,
		run:       runNLLLoss,
		memory:    memoryNLLLoss,
		frames:    []Frame{frameNLLLoss},
		neutral:   map[string]string{"target": "ignore_index"},
		Misuses:   []*Misuse{misuseTargetDim, misuseTargetSize, misuseBatchSize, misuseScalarType},
		Rules:     []*Rule{ruleAllIgnored},
	})
	register(&Op{
		Name:    "binary_cross_entropy",
		Tensors: []TensorArg{{Name: "input"}, {Name: "target"}, {Name: "weight", Optional: true}},
		Attrs: []Attr{
			{Name: "reduction", Kind: AttrString, Default: "mean", Choices: reductions},
		},
		Signature: "torch.nn.functional.binary_cross_entropy(input, target, weight=None, reduction='mean')",
		Torch:     TorchCall{Function: "nn.functional.binary_cross_entropy", Positional: []string{"input", "target"}},
		Advice:    "The input must be a probability in [0, 1]: apply a sigmoid first, or use `binary_cross_entropy_with_logits` (which is also numerically safer); NaN inputs fail the same check.",
		run:       runBCE,
		memory:    memoryBCE,
		frames:    []Frame{frameBCE},
	})
}

// adviceClassTargets is the advice of the losses over class indices.
const adviceClassTargets = "Targets must be in [0, C) with C = input.shape[1], or equal ignore_index: a 255 \"void\" label needs `ignore_index=255`; a label equal to C means num_classes is one too small (or labels are 1-based)."

// memoryCrossEntropy: log_softmax, the product for probability targets,
// then nll_loss's buffers.
func memoryCrossEntropy(c *call, add allocate) bool {
	input, target := c.tensor("input"), c.tensor("target")
	if !input.DType.IsFloat() {
		return false
	}
	add("log_softmax", input.Numel(), input.DType)
	if sameShape(input.Shape, target.Shape) {
		// Probability targets: -(log_softmax * target), then the sum.
		add("log_softmax * target", input.Numel(), input.DType)
	}
	lossPlan(add, c.str("reduction"), target, input.DType)
	return true
}

func memoryNLLLoss(c *call, add allocate) bool {
	// nll_loss checks shapes before it allocates.
	input, target := c.tensor("input"), c.tensor("target")
	if !input.DType.IsFloat() || input.Dims() >= 2 && (target.Dims() == 0 || target.Shape[0] != input.Shape[0]) {
		return false
	}
	lossPlan(add, c.str("reduction"), target, input.DType)
	return true
}

// lossPlan adds nll_loss's output and total_weight.
func lossPlan(add allocate, reduction string, target *Tensor, dt DType) {
	if reduction == "none" {
		add("output", target.Numel(), dt)
		return
	}
	add("output", 1, dt)
	add("total_weight", 1, dt)
}

func memoryBCE(c *call, add allocate) bool {
	input := c.tensor("input")
	if !input.DType.IsFloat() || !sameShape(input.Shape, c.tensor("target").Shape) {
		return false
	}
	// loss = empty_like(input), then its reduction.
	add("loss", input.Numel(), input.DType)
	if c.str("reduction") != "none" {
		add("output", 1, input.DType)
	}
	return true
}

// reductions are the values reductionEnum takes.
var reductions = []string{"none", "mean", "elementwise_mean", "sum"}

// reductionEnum is torch.nn._reduction.get_enum.
func reductionEnum(r string, frame Frame) (int, *Failure) {
	switch r {
	case "none":
		return reductionNone, nil
	case "mean", "elementwise_mean":
		return reductionMean, nil
	case "sum":
		return reductionSum, nil
	}
	return 0, valueErr(r+" is not a valid value for reduction", frame, frameGetEnum)
}

func runCrossEntropy(c *call) (*Result, error) {
	red, f := reductionEnum(c.str("reduction"), frameCrossEntropy)
	if f != nil {
		return fail(f)
	}
	out, notes, f := crossEntropy(c, c.tensor("input"), c.tensor("target"), c.tensor("weight"),
		red, c.int("ignore_index"), c.float("label_smoothing"))
	if f != nil {
		return fail(withFrames(f, frameCrossEntropy))
	}
	return ok(out, notes...)
}

func runNLLLoss(c *call) (*Result, error) {
	red, f := reductionEnum(c.str("reduction"), frameNLLLoss)
	if f != nil {
		return fail(f)
	}
	out, notes, f := nllLossND(c, inputRows(c.tensor("input")), c.tensor("target"), c.tensor("weight"), red, c.int("ignore_index"))
	if f != nil {
		return fail(withFrames(f, frameNLLLoss))
	}
	return ok(out, notes...)
}

// crossEntropy is at::native::cross_entropy_loss.
func crossEntropy(c *call, self, target, weight *Tensor, red int, ii int64, ls float64) (*Tensor, []string, *Failure) {
	if sameShape(self.Shape, target.Shape) {
		// Probability targets.
		if !target.DType.IsFloat() {
			return nil, nil, runtimeErr("Expected floating point type for target with class probabilities, got " + scalarTypeName(target.DType))
		}
		if ii >= 0 {
			return nil, nil, runtimeErr("ignore_index is not supported for floating point target")
		}
		out, f := crossEntropyProb(c, self, target, weight, red, ls)
		return out, nil, f
	}
	if ls > 0 {
		if ls > 1 {
			return nil, nil, runtimeErr("label_smoothing must be between 0.0 and 1.0. Got: " + fmtDouble(ls))
		}
		return crossEntropySmoothed(c, self, target, weight, red, ii, ls)
	}
	lsm, f := logSoftmaxFor(c, self)
	if f != nil {
		return nil, nil, f
	}
	return nllLossND(c, lsm, target, weight, red, ii)
}

// classDimOf is cross_entropy's class dim: 0 for a 1-D input, else 1.
func classDimOf(self *Tensor) int64 {
	if self.Dims() == 1 {
		return 0
	}
	return 1
}

// logSoftmaxFor is log_softmax over cross_entropy's class dim, as
// nll_loss reads it: computed a row at a time on the fast path, built whole
// on the general one.
func logSoftmaxFor(c *call, self *Tensor) (classRows, *Failure) {
	if generalOnly {
		lsm, f := logSoftmax(c, self, classDimOf(self))
		if f != nil {
			return classRows{}, f
		}
		return inputRows(lsm), nil
	}
	d, f := logSoftmaxCheck(c, self, classDimOf(self))
	if f != nil {
		return classRows{}, f
	}
	return logSoftmaxRows(self, d), nil
}

// logSoftmaxCheck is at::log_softmax's checks: the class dim wrapped, or
// the failure of a dtype without a kernel (none for an empty self, which
// the kernels return before dispatching on).
func logSoftmaxCheck(c *call, self *Tensor, dim int64) (int64, *Failure) {
	d, f := wrapDim(dim, self.Dims())
	if f != nil || self.Numel() == 0 {
		return d, f
	}
	last := self.Dims() == 0 || d == int64(self.Dims()-1)
	switch self.DType {
	case Float32, Float64, BFloat16:
	case Float16:
		if !c.cuda {
			if last {
				return 0, notImplemented("log_softmax_lastdim_kernel_impl", self.DType)
			}
			return 0, notImplemented("softmax_kernel_impl", self.DType)
		}
	default:
		if c.cuda {
			// cuda/SoftMax.cu dispatches under this name (not checked
			// against a GPU build).
			return 0, notImplemented("host_softmax", self.DType)
		}
		if last {
			return 0, notImplemented("log_softmax_lastdim_kernel_impl", self.DType)
		}
		return 0, notImplemented("softmax_kernel_impl", self.DType)
	}
	return d, nil
}

// rowLogSumExp is log_softmax's statistics of one row: its max (NaN when
// the row holds one) and the log of Σ exp(v - max). The row's log-softmax
// is then v - max - lse, in that order.
func rowLogSumExp(vals []float64) (m, lse float64) {
	m = math.Inf(-1)
	for _, v := range vals {
		if v > m || math.IsNaN(v) {
			m = v
		}
	}
	s := 0.0
	for _, v := range vals {
		s += math.Exp(v - m)
	}
	return m, math.Log(s)
}

// logSoftmax is at::log_softmax(self, dim, self.scalar_type()): a new
// contiguous tensor of self's dtype. cross_entropy's fast paths never
// build it (classRows and probLossRows compute its rows one at a time);
// its general path here is their reference.
func logSoftmax(c *call, self *Tensor, dim int64) (*Tensor, *Failure) {
	d, f := logSoftmaxCheck(c, self, dim)
	if f != nil {
		return nil, f
	}
	if self.Numel() == 0 {
		return MustNew(self.DType, self.Shape...), nil
	}
	out := MustNew(self.DType, self.Shape...)
	shape := self.Shape
	if len(shape) == 0 {
		shape = []int64{1}
		d = 0
	}
	// Iterate over every position of the other dims.
	outer := numel(shape[:d])
	size := shape[d]
	inner := numel(shape[d+1:])
	src := self
	if self.Dims() == 0 {
		src = &Tensor{DType: self.DType, Shape: []int64{1}, Strides: []int64{1}, Offset: self.Offset, Data: self.Data}
	}
	idx := make([]int64, len(shape))
	vals := make([]float64, size)
	if !generalOnly {
		// Row by row: the same sums in the same order, one dtype switch a
		// row; rows are independent, so they run in parallel.
		parallel(outer*inner, rowGrain(size), func(lo, hi int64) {
			idx := make([]int64, len(shape))
			vals := make([]float64, size)
			for r := lo; r < hi; r++ {
				o, in := r/inner, r%inner
				unravelInto(idx, o*size*inner+in, shape)
				src.loadFloats(vals, storageIndex(src, idx), src.Strides[d])
				m, ls := rowLogSumExp(vals)
				for k, v := range vals {
					vals[k] = v - m - ls
				}
				out.storeFloats(o*size*inner+in, inner, vals)
			}
		})
		return out, nil
	}
	rm := ContiguousStrides(shape)
	for o := int64(0); o < outer; o++ {
		for in := int64(0); in < inner; in++ {
			base := unravel(o*size*inner+in, shape)
			copy(idx, base)
			m := math.Inf(-1)
			for k := int64(0); k < size; k++ {
				idx[d] = k
				v := src.LoadFloat(storageIndex(src, idx))
				vals[k] = v
				if v > m || math.IsNaN(v) {
					m = v
				}
			}
			s := 0.0
			for k := int64(0); k < size; k++ {
				s += math.Exp(vals[k] - m)
			}
			ls := math.Log(s)
			for k := int64(0); k < size; k++ {
				idx[d] = k
				lin := int64(0)
				for j := range idx {
					lin += idx[j] * rm[j]
				}
				out.StoreFloat(lin, vals[k]-m-ls)
			}
		}
	}
	return out, nil
}

// rowGrain is the fewest rows of size elements worth a goroutine.
func rowGrain(size int64) int64 { return max(1, 1<<16/max(size, 1)) }

// classRows is nll_loss's input as its kernels read it: the value at
// position p (the row-major index over the dims other than the class dim,
// which nll_loss_nd's 4-D view of an N-D input keeps) and class t. Tensor
// is the input as nll_loss's checks see it (shape and dtype; its storage is
// never read); the values come from src, read in place. With lsm set they
// are log_softmax(src) over classDim, computed a row at a time as
// logSoftmax computes them, then rounded to the dtype as its store rounds
// them: cross_entropy never builds the N×C log-softmax.
type classRows struct {
	*Tensor
	src      *Tensor
	classDim int
	lsm      bool
	// onRow, when set, is given each log-softmax row that at computes
	// (position p; the row is reused afterwards).
	onRow func(p int64, row []float64)
}

// inputRows is nll_loss's own input, read in place.
func inputRows(t *Tensor) classRows {
	return classRows{Tensor: t, src: t, classDim: int(classDimOf(t))}
}

// logSoftmaxRows is log_softmax(self, d) (d wrapped, the checks of
// logSoftmaxCheck passed), computed row by row as nll_loss reads it.
func logSoftmaxRows(self *Tensor, d int64) classRows {
	shape := append([]int64(nil), self.Shape...)
	head := &Tensor{DType: self.DType, Shape: shape, Strides: ContiguousStrides(shape)}
	return classRows{Tensor: head, src: self, classDim: int(d), lsm: true}
}

// view is the same values seen through the header shape (nll_loss_nd's
// 4-D view).
func (r classRows) view(shape []int64) classRows {
	r.Tensor = &Tensor{DType: r.DType, Shape: shape, Strides: ContiguousStrides(shape)}
	return r
}

// posBase is the storage element of t at position p (the row-major index
// over the dims other than classDim), class 0.
func posBase(t *Tensor, classDim int, p int64) int64 {
	e := t.Offset
	for d := t.Dims() - 1; d >= 0; d-- {
		if d == classDim {
			continue
		}
		n := t.Shape[d]
		e += (p % n) * t.Strides[d]
		p /= n
	}
	return e
}

func (r classRows) base(p int64) int64 { return posBase(r.src, r.classDim, p) }

// row sets vals (one per class) to the values at position p.
func (r classRows) row(p int64, vals []float64) {
	r.src.loadFloats(vals, r.base(p), r.src.Strides[r.classDim])
	if r.lsm {
		m, ls := rowLogSumExp(vals)
		for k, v := range vals {
			vals[k] = roundTo(r.DType, v-m-ls)
		}
	}
}

// at sets vals[i] to the value at position lo+i and class tg[i] for every
// i with tg[i] >= 0 (a class in range); log-softmax rows are computed in
// parallel, each into its own vals[i].
func (r classRows) at(lo int64, tg []int64, vals []float64) {
	cs := r.src.Strides[r.classDim]
	if !r.lsm {
		for i, t := range tg {
			if t >= 0 {
				vals[i] = r.src.LoadFloat(r.base(lo+int64(i)) + t*cs)
			}
		}
		return
	}
	size := r.src.Shape[r.classDim]
	parallel(int64(len(tg)), rowGrain(size), func(a, b int64) {
		row := make([]float64, size)
		for i := a; i < b; i++ {
			if t := tg[i]; t >= 0 {
				r.row(lo+i, row)
				vals[i] = row[t]
				if r.onRow != nil {
					r.onRow(lo+i, row)
				}
			}
		}
	})
}

// each is the loop of nll_loss's kernels over positions 0..n-1, in order,
// a chunk at a time: target(p) is position p's target; keep(p, t) says
// whether the input is read there (false for an ignored target) or fails,
// which ends the loop; visit(p, t, v) then gets the value at (p, t).
func (r classRows) each(n int64, target func(p int64) int64, keep func(p, t int64) (bool, *Failure), visit func(p, t int64, v float64)) *Failure {
	const chunk = 1 << 14
	tg := make([]int64, min(n, chunk))
	vals := make([]float64, len(tg))
	for lo := int64(0); lo < n; lo += chunk {
		k := min(chunk, n-lo)
		for i := int64(0); i < k; i++ {
			t := target(lo + i)
			use, f := keep(lo+i, t)
			if f != nil {
				return f
			}
			if !use {
				t = -1
			}
			tg[i] = t
		}
		r.at(lo, tg[:k], vals[:k])
		for i, t := range tg[:k] {
			if t >= 0 {
				visit(lo+int64(i), t, vals[i])
			}
		}
	}
	return nil
}

// nllLossND is at::native::nll_loss_nd.
func nllLossND(c *call, self classRows, target, weight *Tensor, red int, ii int64) (*Tensor, []string, *Failure) {
	if self.Dims() < 1 {
		return nil, nil, valueErr("Expected 1 or more dimensions (got " + strconv.Itoa(self.Dims()) + ")")
	}
	tgt0 := int64(0) // sizes()[0] of a 0-d target reads past its end; torch 1.13 gets 0
	if target.Dims() > 0 {
		tgt0 = target.Shape[0]
	}
	if self.Dims() != 1 && self.Shape[0] != tgt0 {
		return nil, nil, hostErr(classNLLBatchSize, "ValueError", "Expected input batch_size ("+strconv.FormatInt(self.Shape[0], 10)+
			") to match target batch_size ("+strconv.FormatInt(tgt0, 10)+").")
	}
	switch self.Dims() {
	case 1, 2:
		out, f := nllLoss(c, self, target, weight, red, ii)
		return out, nil, f
	case 4:
		return nllLoss2d(c, self, target, weight, red, ii)
	}
	// dim == 3 or dim > 4: reshape to 4-D.
	n, ch := self.Shape[0], self.Shape[1]
	outSize := append([]int64{n}, self.Shape[2:]...)
	var tgtRest []int64
	if target.Dims() > 0 {
		tgtRest = target.Shape[1:]
	}
	if !sameShape(tgtRest, self.Shape[2:]) {
		return nil, nil, hostErr(classNLLTargetSize, "RuntimeError", "Expected target size "+fmtSizes(outSize)+", got "+fmtSizes(target.Shape))
	}
	// The input is read in place: its positions keep their order in the
	// 4-D view.
	in4 := self.view([]int64{n, ch, 0, 0})
	if self.Numel() > 0 {
		in4 = self.view([]int64{n, ch, 1, self.Numel() / (n * ch)})
	}
	t3 := reshaped(target, []int64{n, 0, 0})
	if target.Numel() > 0 {
		t3 = reshaped(target, []int64{n, 1, target.Numel() / n})
	}
	out, notes, f := nllLoss2d(c, in4, t3, weight, red, ii)
	if f != nil {
		return nil, nil, f
	}
	if red == reductionNone {
		out = &Tensor{DType: out.DType, Shape: outSize, Strides: ContiguousStrides(outSize), Data: out.Data}
	}
	return out, notes, nil
}

// reshaped is t.contiguous().view(shape), sharing t's storage when t is
// contiguous.
func reshaped(t *Tensor, shape []int64) *Tensor {
	if !t.IsContiguous() {
		return contiguousView(t, shape)
	}
	shape = append([]int64(nil), shape...)
	return &Tensor{DType: t.DType, Shape: shape, Strides: ContiguousStrides(shape), Offset: t.Offset, Data: t.Data}
}

// contiguousView is t.contiguous().view(shape).
func contiguousView(t *Tensor, shape []int64) *Tensor {
	out := MustNew(t.DType, t.Shape...)
	if generalOnly {
		i := int64(0)
		t.Each(func(_ []int64, e int64) {
			copyElem(out, i, t, e)
			i++
		})
	} else if t.Numel() > 0 {
		p := newCopyPlan(t.Shape, out.Strides, t.Strides, -1, nil, t.DType.Size())
		p.tile = true // out is dense
		p.exec(out.Data, t.Data, 0, t.Offset)
	}
	out.Shape = append([]int64(nil), shape...)
	out.Strides = ContiguousStrides(shape)
	return out
}

// targetValue reads a class-index target element as torch's kernels do.
func targetValue(t *Tensor, e int64) int64 { return t.LoadInt(e) }

// targetOutOfBounds is the CPU IndexError. printChar renders the value as
// an ostream renders a uint8_t (a character), which the no-reduction 2-D
// kernel does for Byte targets.
func targetOutOfBounds(v int64, printChar bool) *Failure {
	if printChar {
		b := byte(v)
		switch {
		case b == 0:
			// A NUL ends the C string that becomes the Python message.
			return indexErr("Target ")
		case b >= 0x80:
			// Not valid UTF-8: Python gets an empty message.
			return indexErr("")
		}
		// The message names a character, not a number: signature classes
		// it only when that character is a digit (it reads as "Target N
		// is out of bounds."), and the class says what signature says.
		class := ""
		if b >= '0' && b <= '9' {
			class = classNLLTargetBounds
		}
		return hostErr(class, "IndexError", "Target "+string([]byte{b})+" is out of bounds.")
	}
	return hostErr(classNLLTargetBounds, "IndexError", "Target "+strconv.FormatInt(v, 10)+" is out of bounds.")
}

// ignored reports t == ignore_index in the target's C++ type.
func ignored(t, ii int64) bool { return t == ii }

// cascade is nll_loss's cascade sum (LossNLL.cpp): partial sums in 8 levels,
// every addition rounded to the input dtype.
type cascade struct {
	dt         DType
	power      int64
	mask       int64
	loss, wsum [8]float64
}

func newCascade(dt DType, n int64) *cascade {
	p := int64(4)
	if l := ceilLog2(n) / 8; l > p {
		p = l
	}
	return &cascade{dt: dt, power: p, mask: (int64(1) << p) - 1}
}

func ceilLog2(n int64) int64 {
	if n <= 1 {
		return 0
	}
	l := int64(0)
	for v := n - 1; v > 0; v >>= 1 {
		l++
	}
	return l
}

func (s *cascade) add(i int64, loss, w float64, weighted bool) {
	r := func(v float64) float64 { return roundTo(s.dt, v) }
	if weighted {
		s.loss[0] = r(s.loss[0] - r(loss*w))
		s.wsum[0] = r(s.wsum[0] + w)
	} else {
		s.loss[0] = r(s.loss[0] - loss)
	}
	for j := int64(0); j+1 < 8; j++ {
		m := s.mask << (j * s.power)
		if i&m != 0 {
			break
		}
		s.wsum[j+1] = r(s.wsum[j+1] + s.wsum[j])
		s.loss[j+1] = r(s.loss[j+1] + s.loss[j])
		s.wsum[j], s.loss[j] = 0, 0
	}
}

func (s *cascade) total() (loss, w float64) {
	for j := 0; j < 8; j++ {
		loss = roundTo(s.dt, loss+s.loss[j])
		w = roundTo(s.dt, w+s.wsum[j])
	}
	return loss, w
}

// scalarOut is a 0-d tensor.
func scalarOut(dt DType, v float64) *Tensor {
	out := MustNew(dt)
	out.StoreFloat(0, v)
	return out
}

// nllLoss is nll_loss_forward for 1-D and 2-D inputs.
func nllLoss(c *call, self classRows, target, weight *Tensor, red int, ii int64) (*Tensor, *Failure) {
	// TORCH_META_FUNC(nll_loss_forward)
	if target.Dims() > 1 {
		return nil, hostErr(classNLLTargetDim, "RuntimeError", "0D or 1D target tensor expected, multi-target not supported")
	}
	noBatch := self.Dims() == 1 && target.Dims() == 0
	if !noBatch {
		ts, f := sizeAt(target, 0)
		if f != nil {
			return nil, f
		}
		if self.Shape[0] != ts {
			return nil, runtimeErr("size mismatch (got input: " + fmtSizes(self.Shape) + ", target: " + fmtSizes(target.Shape) + ")")
		}
	}
	nClasses := self.Shape[self.Dims()-1]
	if weight != nil && !(weight.Dims() == 1 && weight.Numel() == nClasses) {
		return nil, runtimeErr("weight tensor should be defined either for all " + strconv.FormatInt(nClasses, 10) +
			" classes or no classes but got weight tensor of shape: " + fmtSizes(weight.Shape))
	}
	dt := self.DType
	twoD := self.Dims() == 2
	batch := int64(1)
	if twoD {
		batch = self.Shape[0]
	}
	tgtT := Int64
	if target.DType == Uint8 {
		tgtT = Uint8
	}
	if c.cuda {
		// nll_loss_forward_out_cuda_template (cuda/Loss.cu).
		if weight != nil && weight.DType != dt {
			return nil, expectedScalarType(dt, weight.DType)
		}
		kernel := "nll_loss_forward_reduce_cuda_kernel_2d"
		switch {
		case red == reductionNone && twoD:
			kernel = "nll_loss_forward_no_reduce_cuda_kernel"
			if batch == 0 {
				return MustNew(dt, 0), nil
			}
		case target.Numel() == 0:
			if red == reductionMean {
				return scalarOut(dt, math.NaN()), nil
			}
			return scalarOut(dt, 0), nil
		case !twoD:
			kernel = "nll_loss_forward_reduce_cuda_kernel_1d"
		}
		if !dt.IsFloat() {
			return nil, notImplemented(kernel, dt)
		}
		if target.DType != Uint8 && target.DType != Int64 {
			return nil, notImplemented(kernel+"_index", target.DType)
		}
		if f := nllCUDAAsserts(self.Tensor, target, red, ii, nClasses); f != nil {
			return nil, f
		}
	} else {
		switch dt {
		case Float32, Float64, BFloat16:
		default:
			return nil, notImplemented("nll_loss_out_frame", dt)
		}
		if weight != nil && weight.DType != dt {
			return nil, expectedScalarType(dt, weight.DType)
		}
	}
	wAt := func(t int64) float64 {
		if weight == nil {
			return 1
		}
		return weight.LoadFloat(weight.Offset + t*weight.Strides[0])
	}
	tgtAt := func(b int64) int64 {
		if target.Dims() == 0 {
			return targetValue(target, target.Offset)
		}
		return targetValue(target, target.Offset+b*target.Strides[0])
	}
	if red == reductionNone && twoD {
		if target.DType != tgtT {
			return nil, expectedScalarType(tgtT, target.DType)
		}
		out := MustNew(dt, batch)
		f := self.each(batch, tgtAt, classCheck(ii, nClasses, func(t int64) *Failure { return targetOutOfBounds(t, tgtT == Uint8) }, nil),
			func(i, t int64, v float64) { out.StoreFloat(i, roundTo(dt, -v*wAt(t))) })
		if f != nil {
			return nil, f
		}
		return out, nil
	}
	if target.Numel() == 0 {
		if red == reductionMean {
			return scalarOut(dt, math.NaN()), nil
		}
		return scalarOut(dt, 0), nil
	}
	if target.DType != tgtT {
		return nil, expectedScalarType(tgtT, target.DType)
	}
	return nllReduce(self, batch, tgtAt, weight != nil, wAt, red, ii, nClasses)
}

// classCheck is the kernels' test of a target: not read when it is
// ignore_index; out of [0, nClasses) it fails with oob, or, where a kernel
// has no bounds check (undef set), is passed to undef and not read.
func classCheck(ii, nClasses int64, oob func(t int64) *Failure, undef func(p int64)) func(p, t int64) (bool, *Failure) {
	return func(p, t int64) (bool, *Failure) {
		switch {
		case ignored(t, ii):
			return false, nil
		case t >= 0 && t < nClasses:
			return true, nil
		case undef != nil:
			undef(p)
			return false, nil
		}
		return false, oob(t)
	}
}

// nllReduce is the reduction of nll_loss's kernels over n positions: the
// cascade sum of -x·w in position order, divided for the mean by the sum
// of the weights or by the count of targets not ignored.
func nllReduce(x classRows, n int64, target func(p int64) int64, weighted bool, wAt func(t int64) float64, red int, ii, nClasses int64) (*Tensor, *Failure) {
	dt := x.DType
	cs := newCascade(dt, n)
	ignoredN := int64(0)
	keep := classCheck(ii, nClasses, func(t int64) *Failure { return targetOutOfBounds(t, false) }, nil)
	f := x.each(n, target, func(p, t int64) (bool, *Failure) {
		if ignored(t, ii) {
			ignoredN++
		}
		return keep(p, t)
	}, func(p, t int64, v float64) { cs.add(p, v, wAt(t), weighted) })
	if f != nil {
		return nil, f
	}
	loss, tw := cs.total()
	if !weighted {
		tw = roundTo(dt, float64(n-ignoredN))
	}
	if red == reductionMean {
		loss = roundTo(dt, loss/tw)
	}
	return scalarOut(dt, loss), nil
}

// nllCUDAAsserts emulates the device checks of cuda/Loss.cu's three
// forward kernels.
func nllCUDAAsserts(self, target *Tensor, red int, ii, nClasses int64) *Failure {
	elems := rowMajor(target)
	bad := func(i int64) bool {
		t := target.LoadInt(elems[i])
		return !ignored(t, ii) && (t < 0 || t >= nClasses)
	}
	as := newAsserts("target", target)
	switch {
	case red == reductionNone && self.Dims() == 2:
		// <<<GET_BLOCKS(batch), CUDA_NUM_THREADS=1024>>>, CUDA_KERNEL_LOOP:
		// every bad element is its own thread.
		for i := range elems {
			if bad(int64(i)) {
				as.add(SiteNLLNoReduce, int64(i)/1024, int64(i)%1024, int64(i))
			}
		}
	case self.Dims() == 1:
		// <<<1, 1>>>.
		if len(elems) > 0 && bad(0) {
			as.add(SiteNLLReduce1D, 0, 0, 0)
		}
	default:
		// <<<1, NLL_LOSS_THREADS=32>>>: thread t visits t, t+32, ... and
		// stops at its first bad target.
		for i := range elems {
			if bad(int64(i)) {
				as.add(SiteNLLReduce2D, 0, int64(i)%32, int64(i))
			}
		}
	}
	return as.failure()
}

// nllLoss2d is nll_loss2d_forward for 4-D inputs (CPU: LossNLL2d.cpp; CUDA:
// cuda/NLLLoss2d.cu).
func nllLoss2d(c *call, input classRows, target, weight *Tensor, red int, ii int64) (*Tensor, []string, *Failure) {
	if c.cuda {
		if target.Dims() != 3 {
			return nil, nil, runtimeErr("only batches of spatial targets supported (3D tensors) but got targets of size: : " + fmtSizes(target.Shape))
		}
		if input.Dims() != 4 {
			return nil, nil, runtimeErr("only batches of spatial inputs supported (4D tensors), but got input of size: " + fmtSizes(input.Shape))
		}
		if weight != nil && weight.Numel() != input.Shape[1] {
			return nil, nil, runtimeErr("weight tensor should be defined either for all or no classes")
		}
		if !(input.Shape[0] == target.Shape[0] && input.Shape[2] == target.Shape[1] && input.Shape[3] == target.Shape[2]) {
			return nil, nil, runtimeErr("input and target batch or spatial sizes don't match: target " + fmtSizes(target.Shape) + ", input " + fmtSizes(input.Shape))
		}
	} else {
		if target.Dims() != 3 {
			return nil, nil, runtimeErr("only batches of spatial targets supported (3D tensors) but got targets of dimension: " + strconv.Itoa(target.Dims()))
		}
		if input.Dims() != 4 {
			return nil, nil, runtimeErr("only batches of spatial inputs supported (4D tensors), but got input of dimension: " + strconv.Itoa(input.Dims()))
		}
		if weight != nil && weight.Numel() != input.Shape[1] {
			return nil, nil, runtimeErr("weight tensor should be defined either for all or no classes")
		}
		if !(input.Shape[0] == target.Shape[0] && input.Shape[2] == target.Shape[1] && input.Shape[3] == target.Shape[2]) {
			return nil, nil, runtimeErr("size mismatch (got input: " + fmtSizes(input.Shape) + " , target: " + fmtSizes(target.Shape))
		}
	}
	dt := input.DType
	N, C, H, W := input.Shape[0], input.Shape[1], input.Shape[2], input.Shape[3]
	var notes []string
	if c.cuda {
		kernel := "nll_loss2d_forward_kernel"
		if red == reductionNone {
			kernel = "nll_loss2d_forward_no_reduce_kernel"
			if N*H*W == 0 {
				return MustNew(dt, N, H, W), nil, nil
			}
		} else if target.Numel() == 0 {
			if red == reductionMean {
				return scalarOut(dt, math.NaN()), nil, nil
			}
			return scalarOut(dt, 0), nil, nil
		}
		if !dt.IsFloat() {
			return nil, nil, notImplemented(kernel, dt)
		}
		// The kernel's arguments are evaluated right to left (GCC): the
		// weight's data_ptr<scalar_t>() before the target's.
		if weight != nil && weight.DType != dt {
			return nil, nil, expectedScalarType(dt, weight.DType)
		}
		if target.DType != Int64 {
			return nil, nil, expectedScalarType(Int64, target.DType)
		}
		if red != reductionNone {
			if f := nll2dCUDAAsserts(target, ii, C); f != nil {
				return nil, nil, f
			}
		}
	} else {
		switch dt {
		case Float32, Float64, BFloat16:
		default:
			return nil, nil, notImplemented("nll_loss2d_forward_out_frame", dt)
		}
		if weight != nil && weight.DType != dt {
			return nil, nil, expectedScalarType(dt, weight.DType)
		}
	}
	var wc []float64 // weight.contiguous()
	if weight != nil {
		weight.Each(func(_ []int64, e int64) { wc = append(wc, weight.LoadFloat(e)) })
	}
	wAt := func(t int64) float64 {
		if wc == nil {
			return 1
		}
		return wc[t]
	}
	tgtAt := func(p int64) int64 {
		b, h, w := p/(H*W), p/W%H, p%W
		return target.LoadInt(target.Offset + b*target.Strides[0] + h*target.Strides[1] + w*target.Strides[2])
	}
	if red == reductionNone {
		if target.DType != Int64 {
			return nil, nil, expectedScalarType(Int64, target.DType)
		}
		out := MustNew(dt, N, H, W)
		undefined := 0
		oob := func(t int64) *Failure { return targetOutOfBounds(t, false) }
		var cudaOOB func(p int64)
		if c.cuda {
			// 1.13's nll_loss2d_forward_no_reduce_kernel has no bounds
			// check (pytorch/pytorch#49882): it reads outside the input.
			cudaOOB = func(p int64) {
				out.StoreFloat(p, math.NaN())
				undefined++
			}
		}
		f := input.each(N*H*W, tgtAt, classCheck(ii, C, oob, cudaOOB),
			func(p, t int64, v float64) { out.StoreFloat(p, roundTo(dt, -v*wAt(t))) })
		if f != nil {
			return nil, nil, f
		}
		if undefined > 0 {
			notes = append(notes, strconv.Itoa(undefined)+" out-of-range targets with reduction='none' on a 4-D (or reshaped N-D) input: "+
				"torch 1.13's CUDA kernel has no device check there (pytorch/pytorch#49882) and reads outside the input; "+
				"those outputs are undefined (NaN here)")
		}
		return out, notes, nil
	}
	if target.Numel() == 0 {
		if red == reductionMean {
			return scalarOut(dt, math.NaN()), nil, nil
		}
		return scalarOut(dt, 0), nil, nil
	}
	if target.DType != Int64 {
		return nil, nil, expectedScalarType(Int64, target.DType)
	}
	out, f := nllReduce(input, N*H*W, tgtAt, weight != nil, wAt, red, ii, C)
	return out, notes, f
}

// nll2dCUDAAsserts emulates nll_loss2d_forward_kernel's launch:
// blocks_per_sample = max(1, GET_BLOCKS(map_nelem)/128) blocks of 1024
// threads per sample; thread t of block k of sample s visits spatial
// elements (k·1024 + t) + j·1024·blocks_per_sample and stops at its first
// bad target.
func nll2dCUDAAsserts(target *Tensor, ii, nClasses int64) *Failure {
	n := target.Shape[0]
	mapN := target.Shape[1] * target.Shape[2]
	bps := ceilDiv(mapN, 1024) / 128
	if bps == 0 {
		bps = 1
	}
	elems := rowMajor(target)
	as := newAsserts("target", target)
	for s := int64(0); s < n; s++ {
		for i := int64(0); i < mapN; i++ {
			lin := s*mapN + i
			t := target.LoadInt(elems[lin])
			if ignored(t, ii) || (t >= 0 && t < nClasses) {
				continue
			}
			blk := s*bps + (i/1024)%bps
			as.add(SiteNLL2D, blk, i%1024, lin)
		}
	}
	return as.failure()
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// crossEntropySmoothed is cross_entropy_loss_label_smoothing.
func crossEntropySmoothed(c *call, self, target, weight *Tensor, red int, ii int64, ls float64) (*Tensor, []string, *Failure) {
	classDim := classDimOf(self)
	input, f := logSoftmaxFor(c, self)
	if f != nil {
		return nil, nil, f
	}
	dt := input.DType
	// smooth_loss = -(input * weight).sum(class_dim) or -input.sum(class_dim):
	// rowSum is one position's. The weight is read here, but a bad one
	// fails only after nll_loss, as in torch.
	var wv []float64
	if weight != nil && weight.Dims() > 0 {
		weight.Each(func(_ []int64, e int64) { wv = append(wv, weight.LoadFloat(e)) })
	}
	rowSum := func(row []float64) float64 {
		s := 0.0
		for k, v := range row {
			if wv != nil {
				v = roundTo(dt, v*wv[k])
			}
			s += v
		}
		return -roundTo(dt, s)
	}
	positions := numel(removeDim(input.Shape, classDim))
	nClasses := input.Shape[classDim]
	smooth := make([]float64, positions)
	// The rows nll_loss computes (those of its targets in range, not
	// ignored) give their sums on the way; the rest are computed below.
	done := make([]bool, positions)
	if input.lsm && (weight == nil || int64(len(wv)) == nClasses) {
		input.onRow = func(p int64, row []float64) {
			smooth[p], done[p] = rowSum(row), true
		}
	}
	nll, notes, f := nllLossND(c, input, target, weight, red, ii)
	if f != nil {
		return nil, nil, f
	}
	// ignore_mask = target == ignore_index, compared in the target's dtype.
	tvals := intValues(target)
	iiT := ii
	if target.DType == Uint8 {
		iiT = int64(uint8(ii))
	}
	if weight != nil {
		// weight.view(shape with weight.size(0) at class_dim).
		w0 := weight.Shape[0]
		vshape := make([]int64, input.Dims())
		for i := range vshape {
			vshape[i] = 1
		}
		vshape[classDim] = w0
		if weight.Numel() != w0 {
			return nil, nil, runtimeErr("shape '" + fmtSizes(vshape) + "' is invalid for input of size " + strconv.FormatInt(weight.Numel(), 10))
		}
	}
	// Rows in parallel: each writes its own smooth[p].
	parallel(positions, rowGrain(nClasses), func(lo, hi int64) {
		row := make([]float64, nClasses)
		for p := lo; p < hi; p++ {
			switch {
			case tvals[p] == iiT:
				smooth[p] = 0
			case !done[p]:
				input.row(p, row)
				smooth[p] = rowSum(row)
			}
		}
	})
	var ret []float64
	switch red {
	case reductionMean:
		sum := 0.0
		for _, v := range smooth {
			sum += v
		}
		sum = roundTo(dt, sum)
		if wv != nil {
			// weight.gather(0, target.masked_select(~ignore_mask)).sum()
			den := 0.0
			n := 0
			for _, t := range tvals {
				if t == iiT {
					continue
				}
				n++
				if target.DType == Int64 {
					den += wv[t]
				}
			}
			if n > 0 && target.DType != Int64 {
				return nil, nil, runtimeErr("gather(): Expected dtype int64 for index")
			}
			if n > 0 && nonemptyDims(weight) != 1 {
				return nil, nil, runtimeErr("Index tensor must have the same number of dimensions as input tensor")
			}
			ret = []float64{roundTo(dt, sum/roundTo(dt, den))}
		} else {
			n := 0
			for _, t := range tvals {
				if t != iiT {
					n++
				}
			}
			ret = []float64{roundTo(dt, sum/float64(n))}
		}
	case reductionSum:
		sum := 0.0
		for _, v := range smooth {
			sum += v
		}
		ret = []float64{roundTo(dt, sum)}
	default:
		ret = smooth
	}
	// (1 - label_smoothing) * nllloss + ret * (label_smoothing / n_classes)
	a := opmathScalar(dt, 1-ls)
	b := opmathScalar(dt, ls/float64(nClasses))
	out := MustNew(dt, nll.Shape...)
	i := int64(0)
	nll.Each(func(_ []int64, e int64) {
		v := roundTo(dt, roundTo(dt, a*nll.LoadFloat(e))+roundTo(dt, ret[i]*b))
		out.StoreFloat(i, v)
		i++
	})
	return out, notes, nil
}

// opmathScalar is a Python/C++ double scalar as a CPU kernel sees it: cast
// to the op's math type (float for float32, bfloat16 and float16).
func opmathScalar(dt DType, v float64) float64 {
	if dt == Float64 {
		return v
	}
	return float64(float32(v))
}

func removeDim(s []int64, d int64) []int64 {
	out := make([]int64, 0, len(s))
	for i, v := range s {
		if int64(i) != d {
			out = append(out, v)
		}
	}
	return out
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// crossEntropyProb is cross_entropy_loss_prob_target.
func crossEntropyProb(c *call, self, target, weight *Tensor, red int, ls float64) (*Tensor, *Failure) {
	classDim := int64(1)
	if self.Dims() == 1 {
		classDim = 0
	}
	nClasses, f := sizeAt(self, classDim)
	if f != nil {
		return nil, f
	}
	if weight != nil && !(weight.Dims() == 1 && weight.Numel() == nClasses) {
		return nil, runtimeErr("cross_entropy: weight tensor should be defined either for all " + strconv.FormatInt(nClasses, 10) +
			" classes or no classes but got weight tensor of shape: " + fmtSizes(weight.Shape))
	}
	input, f := logSoftmaxFor(c, self)
	if f != nil {
		return nil, f
	}
	if ls > 0 && ls > 1 {
		return nil, runtimeErr("label_smoothing must be between 0.0 and 1.0. Got: " + fmtDouble(ls))
	}
	tdt := target.DType
	// The target's label smoothing: target * (1 - ls) + ls / n_classes.
	smoothT := func(v float64) float64 { return v }
	if ls > 0 {
		a, b := opmathScalar(tdt, 1-ls), opmathScalar(tdt, ls/float64(nClasses))
		smoothT = func(v float64) float64 { return roundTo(tdt, roundTo(tdt, v*a)+b) }
	}
	dt1 := promoteFloat(input.DType, tdt)
	dt := dt1
	var wv []float64
	if weight != nil {
		dt = promoteFloat(dt1, weight.DType)
		weight.Each(func(_ []int64, e int64) { wv = append(wv, weight.LoadFloat(e)) })
	}
	// prod's element: input * target (* weight_) at class k.
	elem := func(x, t float64, k int64) float64 {
		v := roundTo(dt1, x*smoothT(t))
		if wv != nil {
			v = roundTo(dt, v*wv[k])
		}
		return v
	}
	if generalOnly {
		return probLossGeneral(input.Tensor, target, int(classDim), dt, red, elem)
	}
	return probLossRows(input, target, dt, red, elem)
}

// probLossGeneral is cross_entropy's loss for probability targets over
// the whole log-softmax lsm: prod = lsm * target (* weight) element by
// element, then its sum in row-major order, or each position's sum over
// the classes.
func probLossGeneral(lsm, target *Tensor, classDim int, dt DType, red int, elem func(x, t float64, k int64) float64) (*Tensor, *Failure) {
	rm := ContiguousStrides(lsm.Shape)
	tv := floatValues(target)
	prod := make([]float64, lsm.Numel())
	for i := range prod {
		k := (int64(i) / rm[classDim]) % lsm.Shape[classDim]
		prod[i] = elem(lsm.LoadFloat(int64(i)), tv[i], k)
	}
	if red != reductionNone {
		sum := 0.0
		for _, v := range prod {
			sum += v
		}
		return probReduced(lsm, dt, red, sum), nil
	}
	x := inputRows(lsm)
	out := MustNew(dt, removeDim(lsm.Shape, int64(classDim))...)
	for p := int64(0); p < out.Numel(); p++ {
		s := 0.0
		for k := int64(0); k < lsm.Shape[classDim]; k++ {
			s += prod[x.base(p)+k*rm[classDim]]
		}
		out.StoreFloat(p, -roundTo(dt, s))
	}
	return out, nil
}

// probReduced is the mean or the sum from prod's sum.
func probReduced(lsm *Tensor, dt DType, red int, sum float64) *Tensor {
	sum = -roundTo(dt, sum)
	if red == reductionMean {
		if lsm.Numel() == 0 {
			return scalarOut(dt, math.NaN())
		}
		sum = roundTo(dt, sum/float64(lsm.Numel()/lsm.Shape[classDimOf(lsm)]))
	}
	return scalarOut(dt, sum)
}

// probLossRows is probLossGeneral a row of the log-softmax at a time,
// without prod: with no reduction each position's sum over the classes,
// positions in parallel; otherwise the one sum in prod's row-major order
// (position by position within each index of the dims before the class
// dim, class by class), from each row's statistics computed in parallel a
// block at a time.
func probLossRows(lsm classRows, target *Tensor, dt DType, red int, elem func(x, t float64, k int64) float64) (*Tensor, *Failure) {
	cd := lsm.classDim
	size := lsm.Shape[cd]
	xs, ts := lsm.src.Strides[cd], target.Strides[cd]
	if red == reductionNone {
		out := MustNew(dt, removeDim(lsm.Shape, int64(cd))...)
		parallel(out.Numel(), rowGrain(size), func(lo, hi int64) {
			x, t := make([]float64, size), make([]float64, size)
			for p := lo; p < hi; p++ {
				lsm.row(p, x)
				target.loadFloats(t, posBase(target, cd, p), ts)
				s := 0.0
				for k := range x {
					s += elem(x[k], t[k], int64(k))
				}
				out.StoreFloat(p, -roundTo(dt, s))
			}
		})
		return out, nil
	}
	outer, inner := numel(lsm.Shape[:cd]), numel(lsm.Shape[cd+1:])
	per := max(1, (1<<14)/max(inner, 1)) // indices of the outer dims a block
	n := per * inner
	xb, tb := make([]int64, n), make([]int64, n)
	m, lse := make([]float64, n), make([]float64, n)
	sum := 0.0
	for o0 := int64(0); o0 < outer; o0 += per {
		o1 := min(outer, o0+per)
		p0 := o0 * inner
		parallel((o1-o0)*inner, rowGrain(size), func(lo, hi int64) {
			row := make([]float64, size)
			for q := lo; q < hi; q++ {
				xb[q], tb[q] = lsm.base(p0+q), posBase(target, cd, p0+q)
				lsm.src.loadFloats(row, xb[q], xs)
				m[q], lse[q] = rowLogSumExp(row)
			}
		})
		for o := o0; o < o1; o++ {
			for k := int64(0); k < size; k++ {
				for q := (o - o0) * inner; q < (o-o0+1)*inner; q++ {
					x := roundTo(lsm.DType, lsm.src.LoadFloat(xb[q]+k*xs)-m[q]-lse[q])
					sum += elem(x, target.LoadFloat(tb[q]+k*ts), k)
				}
			}
		}
	}
	return probReduced(lsm.Tensor, dt, red, sum), nil
}

// runBCE is F.binary_cross_entropy and binary_cross_entropy_out_cpu /
// binary_cross_entropy_out_cuda.
func runBCE(c *call) (*Result, error) {
	input, target, weight := c.tensor("input"), c.tensor("target"), c.tensor("weight")
	red, f := reductionEnum(c.str("reduction"), frameBCEReduction)
	if f != nil {
		return fail(f)
	}
	if !sameShape(target.Shape, input.Shape) {
		return fail(valueErr("Using a target size ("+torchSize(target.Shape)+") that is different to the input size ("+
			torchSize(input.Shape)+") is deprecated. Please ensure they have the same size.", frameBCESize))
	}
	var wExp *Tensor
	if weight != nil {
		ns, f := inferSize(target.Shape, weight.Shape)
		if f != nil {
			return fail(withFrames(f, frameBCEWeight))
		}
		wExp = expandTo(weight, ns)
	}
	dt := input.DType
	// TensorIterator: output loss (input's dtype), inputs input and target.
	if target.DType != dt {
		return fail(withFrames(runtimeErr("Found dtype "+scalarTypeName(target.DType)+" but expected "+scalarTypeName(dt)), frameBCE))
	}
	if c.cuda {
		if !dt.IsFloat() {
			return fail(withFrames(notImplemented("binary_cross_entropy_out_cuda", dt), frameBCE))
		}
	} else if dt != Float32 && dt != Float64 {
		return fail(withFrames(notImplemented("binary_cross_entropy", dt), frameBCE))
	}
	// loss = empty_like(input): the kernel visits elements in its memory
	// order.
	lossStrides := denseLike(input)
	newLoss := func() (loss, lossT *Tensor) {
		loss = newStrided(dt, input.Shape, lossStrides)
		return loss, &Tensor{DType: dt, Shape: input.Shape, Strides: lossStrides, Data: loss.Data}
	}
	r := func(v float64) float64 { return roundTo(dt, v) }
	if !generalOnly && input.IsContiguous() && target.IsContiguous() && (&Tensor{Shape: input.Shape, Strides: lossStrides}).IsContiguous() &&
		(wExp == nil || sameShape(wExp.Shape, input.Shape)) {
		// The loss tensor is built only to be returned: a reduction
		// sums the values as they are computed.
		var loss, lossT *Tensor
		if red == reductionNone {
			loss, lossT = newLoss()
		}
		sum, f := bceContiguous(c, input, target, wExp, loss)
		switch {
		case f == nil && red == reductionNone:
			return ok(lossT)
		case f == nil:
			return ok(bceReduced(dt, input.Numel(), red, sum))
		case f.Exception != "":
			return fail(f)
		}
		// A device assert: the general path finds every bad input.
	}
	loss, lossT := newLoss()
	order := tiVisit(input.Shape, [][]int64{lossStrides, input.Strides, target.Strides})
	in := rowMajor(input)
	tg := rowMajor(target)
	var bad []int64 // positions (in visiting order) of bad inputs
	for p, lin := range order {
		x := input.LoadFloat(in[lin])
		if !(x >= 0 && x <= 1) {
			if !c.cuda {
				return fail(hostErr(classBCEInputRange, "RuntimeError", "all elements of input should be between 0 and 1", frameBCE))
			}
			bad = append(bad, int64(p))
			continue
		}
		y := target.LoadFloat(tg[lin])
		l1 := math.Max(r(math.Log1p(-x)), -100)
		l2 := math.Max(r(math.Log(x)), -100)
		v := r(r(r(y-1)*l1) - r(y*l2))
		loss.StoreFloat(storageIndex(lossT, unravel(lin, input.Shape)), v)
	}
	if len(bad) > 0 {
		return fail(bceCUDAAsserts(input, target, lossT, order, bad))
	}
	return bceFinish(c, input, loss, lossT, wExp, red)
}

// bceContiguous is binary_cross_entropy's elementwise loss, times the
// weight wExp (input's shape) if any, when input, target and the loss are
// contiguous, so that the kernel's order is row-major: the general path's
// arithmetic, run by run, runs in parallel a block at a time. It writes
// the values to loss, or with loss nil returns their sum in row-major
// order. It fails with the CPU range failure, or an empty Failure for a
// bad input in CUDA mode (whose asserts the general path then computes).
func bceContiguous(c *call, input, target, wExp, loss *Tensor) (float64, *Failure) {
	dt := input.DType
	r := func(v float64) float64 { return roundTo(dt, v) }
	const chunk = 4096
	const block = 64 * chunk
	n := input.Numel()
	var buf []float64 // a block's values, to be summed
	if loss == nil {
		buf = make([]float64, min(n, block))
	}
	var bad atomic.Bool
	sum := 0.0
	for b0 := int64(0); b0 < n && !bad.Load(); b0 += block {
		b1 := min(n, b0+block)
		parallel(ceilDiv(b1-b0, chunk), 16, func(lo, hi int64) {
			xs, ys := make([]float64, chunk), make([]float64, chunk)
			for p := b0 + lo*chunk; p < min(b0+hi*chunk, b1) && !bad.Load(); p += chunk {
				k := min(chunk, b1-p)
				x, y := xs[:k], ys[:k]
				input.loadFloats(x, input.Offset+p, 1)
				target.loadFloats(y, target.Offset+p, 1)
				for _, xv := range x {
					if !(xv >= 0 && xv <= 1) {
						bad.Store(true)
						return
					}
				}
				bceValues(dt, x, y)
				if wExp != nil {
					// loss.mul_(weight).
					wExp.rowMajorFloats(p, y)
					for j := range x {
						x[j] = r(x[j] * y[j])
					}
				}
				if loss != nil {
					loss.storeFloats(p, 1, x)
				} else {
					copy(buf[p-b0:], x)
				}
			}
		})
		if loss == nil && !bad.Load() {
			for _, v := range buf[:b1-b0] {
				sum += v
			}
		}
	}
	switch {
	case !bad.Load():
		return sum, nil
	case c.cuda:
		return 0, &Failure{}
	}
	return 0, hostErr(classBCEInputRange, "RuntimeError", "all elements of input should be between 0 and 1", frameBCE)
}

// bceValues sets x[j] to the loss of input x[j] (in [0, 1]) and target
// y[j].
func bceValues(dt DType, x, y []float64) {
	r := func(v float64) float64 { return roundTo(dt, v) }
	switch dt {
	case Float32:
		// r is float32 rounding, and the logs of x in [0, 1] are no NaN, so
		// math.Max(l, -100) is a comparison.
		r := func(v float64) float64 { return float64(float32(v)) }
		for j, xv := range x {
			l1 := r(math.Log1p(-xv))
			if l1 < -100 {
				l1 = -100
			}
			l2 := r(math.Log(xv))
			if l2 < -100 {
				l2 = -100
			}
			x[j] = r(r(r(y[j]-1)*l1) - r(y[j]*l2))
		}
	default:
		for j, xv := range x {
			l1 := math.Max(r(math.Log1p(-xv)), -100)
			l2 := math.Max(r(math.Log(xv)), -100)
			x[j] = r(r(r(y[j]-1)*l1) - r(y[j]*l2))
		}
	}
}

// bceReduced is binary_cross_entropy's mean or sum of n losses from their
// sum.
func bceReduced(dt DType, n int64, red int, sum float64) *Tensor {
	if red == reductionMean {
		if n == 0 {
			return scalarOut(dt, math.NaN())
		}
		return scalarOut(dt, sum/float64(n))
	}
	return scalarOut(dt, sum)
}

// bceFinish applies binary_cross_entropy's weight and reduction to loss
// (lossT's storage).
func bceFinish(c *call, input, loss, lossT, wExp *Tensor, red int) (*Result, error) {
	dt := input.DType
	r := func(v float64) float64 { return roundTo(dt, v) }
	if wExp != nil {
		// loss.mul_(weight): weight broadcast to the loss's shape.
		if !sameShape(wExp.Shape, input.Shape) {
			return fail(withFrames(runtimeErr("output with shape "+fmtSizes(input.Shape)+" doesn't match the broadcast shape "+fmtSizes(wExp.Shape)), frameBCE))
		}
		if generalOnly {
			for lin := int64(0); lin < input.Numel(); lin++ {
				idx := unravel(lin, input.Shape)
				e := storageIndex(lossT, idx)
				loss.StoreFloat(e, r(loss.LoadFloat(e)*wExp.LoadFloat(storageIndex(wExp, idx))))
			}
		} else {
			we := rowMajor(wExp)
			for lin, e := range rowMajor(lossT) {
				loss.StoreFloat(e, r(loss.LoadFloat(e)*wExp.LoadFloat(we[lin])))
			}
		}
	}
	if red == reductionNone {
		return ok(lossT)
	}
	sum := 0.0
	if generalOnly {
		for lin := int64(0); lin < input.Numel(); lin++ {
			sum += loss.LoadFloat(storageIndex(lossT, unravel(lin, input.Shape)))
		}
	} else {
		for _, v := range floatValues(lossT) {
			sum += v
		}
	}
	return ok(bceReduced(dt, input.Numel(), red, sum))
}

// inferSize is torch._C._infer_size (broadcasting two shapes).
func inferSize(a, b []int64) ([]int64, *Failure) {
	n := len(a)
	if len(b) > n {
		n = len(b)
	}
	out := make([]int64, n)
	for i := n - 1; i >= 0; i-- {
		off := n - 1 - i
		da, db := int64(1), int64(1)
		if j := len(a) - 1 - off; j >= 0 {
			da = a[j]
		}
		if j := len(b) - 1 - off; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, runtimeErr("The size of tensor a (" + strconv.FormatInt(da, 10) + ") must match the size of tensor b (" +
				strconv.FormatInt(db, 10) + ") at non-singleton dimension " + strconv.Itoa(i))
		}
	}
	return out, nil
}

// expandTo is t.expand(shape) for a shape inferSize produced.
func expandTo(t *Tensor, shape []int64) *Tensor {
	st := make([]int64, len(shape))
	off := len(shape) - t.Dims()
	for i := range shape {
		j := i - off
		if j >= 0 && t.Shape[j] != 1 {
			st[i] = t.Strides[j]
		}
	}
	return &Tensor{DType: t.DType, Shape: append([]int64(nil), shape...), Strides: st, Offset: t.Offset, Data: t.Data}
}

// bceCUDAAsserts emulates gpu_kernel's launch for binary_cross_entropy:
// 128 threads per block, 512 elements per block (4 per thread). Full blocks
// of contiguous, aligned operands run vectorised (thread t takes vec
// consecutive elements at t·vec, then at (t+128)·vec, ...); the tail block
// and non-contiguous iterators run unrolled (thread t takes t, t+128,
// t+256, t+384). Each thread stops at its first bad input.
func bceCUDAAsserts(input, target, loss *Tensor, order, bad []int64) *Failure {
	n := input.Numel()
	vec := 1
	if isContiguousAs(input, loss) && isContiguousAs(target, loss) {
		vec = 4
		for _, t := range []*Tensor{input, target} {
			for vec > 1 && (t.Offset*int64(t.DType.Size()))%int64(vec*t.DType.Size()) != 0 {
				vec /= 2
			}
		}
	}
	as := newAsserts("input", input)
	for _, p := range bad {
		blk, thr := elementwiseThread(p, n, vec)
		as.add(SiteBCE, blk, thr, order[p])
	}
	return as.failure()
}

// isContiguousAs reports that t has exactly like's strides (so a
// TensorIterator over both is one contiguous run).
func isContiguousAs(t, like *Tensor) bool {
	for d := range t.Shape {
		if t.Shape[d] != 1 && t.Strides[d] != like.Strides[d] {
			return false
		}
	}
	return true
}
