package signature

import (
	"regexp"
	"slices"
	"strings"
)

// Kernel classes: coarse ids for "which check of which op failed" that a
// device assert and the CPU exception of the same op share, so that a torch
// CPU replay and a CUDA replay (or the go backend's emulation of either) can
// be said to agree. Class returns them.
const (
	ClassNLLTargetBounds  = "nll_loss.target_bounds"
	ClassIndexSelect      = "index_select.bounds" // embedding, index_select
	ClassGatherBounds     = "gather.bounds"       // gather, scatter, scatter_add (and one_hot on CUDA)
	ClassIndexBounds      = "index.bounds"        // x[idx], index_put
	ClassBCEInputRange    = "bce.input_range"
	ClassBCETargetRange   = "bce.target_range"
	ClassOneHotRange      = "one_hot.class_range"
	ClassMultinomialProb  = "multinomial.prob_range"
	ClassInductorBounds   = "inductor.index_bounds"
	ClassNLLBatchSize     = "nll_loss.batch_size"
	ClassNLLTargetDim     = "nll_loss.target_dim"
	ClassNLLTargetSize    = "nll_loss.target_size"  // a K-dimensional loss's target, [N, d1, ...] against input [N, C, d1, ...]
	ClassBatchNormBatch   = "batch_norm.batch_size" // training BatchNorm on one value per channel
	ClassScalarType       = "dtype.expected_scalar_type"
	ClassCTCLengths       = "ctc_loss.lengths"
	ClassBincountInput    = "bincount.input"
	ClassDeviceMismatch   = "device.mismatch"
	ClassDeviceOOM        = "oom.device"
	ClassHostOOM          = "oom.host"
	ClassIllegalAddress   = "device.illegal_address"
	ClassLaunchFailure    = "device.launch_failure"
	ClassMisalignedAccess = "device.misaligned"
	ClassMemoryFault      = "device.memory_fault"
	ClassNaNAnomaly       = "autograd.nan"    // anomaly mode: a backward Function returned NaN
	ClassNonFinite        = "nonfinite.check" // a finiteness check raised: the user's, clip_grad_norm_'s
)

type classRule struct {
	class string
	// classes, for a device assert that more than one check raises (and
	// then no class): the classes it may be, as for a text that names only
	// its file (Signature.Classes).
	classes []string
	// expr matches a device assert's expression, or a host exception's
	// message (the part of Expression after "<class>: ").
	expr *regexp.Regexp
	// exception, if set, restricts a host rule to this exception class.
	exception string
	// side, if set, says which half of a two-sided check the message
	// names, where the host says and the device assert does not (one_hot
	// on the CPU: "non-negative" and "smaller than num_classes"; CUDA has
	// one assert for both). Two messages of one class with different sides
	// are different failures.
	side string
}

// deviceClassRules map device assert expressions to classes: every form
// one check's expression took across builds (shared/reference/
// pytorch-failures.md, "Per operator"), each with the source it comes from.
var deviceClassRules = []classRule{
	// ATen aten/src/ATen/native/cuda/Loss.cu and NLLLoss2d.cu (1.x, 2.x):
	// `t >= 0 && t < n_classes`, reduction='none' `cur_target >= 0 &&
	// cur_target < n_classes`; THCUNN aten/src/THCUNN/ClassNLLCriterion.cu
	// and SpatialClassNLLCriterion.cu (<= 1.4) the same two; HIP builds
	// print them too.
	{class: ClassNLLTargetBounds, expr: regexp.MustCompile(`^(?:cur_target|t) >= 0 && (?:cur_target|t) < n_classes$`)},
	// ATen Indexing.cu and THC aten/src/THC/THCTensorIndex.cu (indexSelectLargeIndex/SmallIndex).
	{class: ClassIndexSelect, expr: regexp.MustCompile(`^srcIndex < srcSelectDimSize$`)},
	// ATen ScatterGatherKernel.cu: "index out of bounds" (1.x, 2.x before
	// 2.1), "scatter gather kernel index out of bounds" (newer); THC
	// aten/src/THC/THCTensorScatterGather.cu (<= 1.4): `indexValue >= 0 &&
	// indexValue < src.sizes[dim]`, and its scatter kernels' `indexValue
	// >= 0 && indexValue < tensor.sizes[dim]`.
	{class: ClassGatherBounds, expr: regexp.MustCompile(`^(?:idx_dim >= 0 && idx_dim < index_size && "(?:scatter gather kernel )?index out of bounds"|indexValue >= 0 && indexValue < (?:src|tensor)\.sizes\[dim\])$`)},
	// ATen IndexKernel.cu: `-sizes[i] <= index && index < sizes[i]` (2.x),
	// `index >= -sizes[i] && index < sizes[i]` (1.x).
	{class: ClassIndexBounds, expr: regexp.MustCompile(`^(?:-sizes\[i\] <= index && index < sizes\[i\]|index >= -sizes\[i\] && index < sizes\[i\]) && "index out of bounds"$`)},
	// IndexKernelUtils.cu's vectorized_gather_kernel (2.x): `ind >=0 && ind
	// < ind_dim_size && "vectorized gather kernel index out of bounds"`,
	// raised by indexing (x[idx]) and by index_select, which embedding
	// calls (an embedding replayed on an H200 under torch 2.11 raised it:
	// docs/gpu/). The text does not say which: both classes.
	{classes: []string{ClassIndexSelect, ClassIndexBounds}, expr: regexp.MustCompile(`^ind ?>= ?0 && ind < ind_dim_size && "vectorized gather kernel index out of bounds"$`)},
	// ATen Loss.cu (1.x, 2.x): `input_val >= zero && input_val <= one`;
	// THCUNN aten/src/THCUNN/BCECriterion.cu (<= 1.4): `input >= 0. &&
	// input <= 1.` (bce_functor), `*input >= 0. && *input <= 1.` (the
	// no-reduce functor).
	{class: ClassBCEInputRange, expr: regexp.MustCompile(`^(?:input_val >= zero && input_val <= one|(\*?)input >= 0\. && (\*?)input <= 1\.)$`)},
	{class: ClassBCETargetRange, expr: regexp.MustCompile(`^target_val >= zero && target_val <= one$`)},
	// ATen MultinomialKernel.cu / TensorCompare.cu (_assert_async, 2.x),
	// and the older MultinomialKernel.cu / THC THCTensorRandom.cuh forms.
	{class: ClassMultinomialProb, expr: regexp.MustCompile("^(?:probability tensor contains either `inf`, `nan` or element < 0|val >= zero|cumdist\\[size - 1\\] > static_cast<scalar_t>\\(0\\)|THCNumerics<T>::ge\\(val, zero\\))$")},
	// Inductor's generated Triton kernels (2.x): "index out of bounds: 0 <= tmpN < S".
	{class: ClassInductorBounds, expr: regexp.MustCompile(`^index out of bounds: `)},
}

// hostClassRules map PyTorch's host exception messages, after
// normalizeMessage (integers are N, paths their last element), to
// classes. The 1.13 and 2.x texts are those of real torch CPU runs
// (testdata/stderr/cpu_*.txt); the older ones are cited per rule.
var hostClassRules = []classRule{
	{class: ClassNLLTargetBounds, exception: "IndexError", expr: regexp.MustCompile(`^Target N is out of bounds\.?$`)},
	// THNN aten/src/THNN/generic/ClassNLLCriterion.c and
	// SpatialClassNLLCriterion.c (<= 1.4), THAssert on the CPU: "Assertion
	// `cur_target >= 0 && cur_target < n_classes' failed.  at
	// .../ClassNLLCriterion.c:93".
	{class: ClassNLLTargetBounds, expr: regexp.MustCompile("^Assertion [`'\"](?:cur_target|t) >= N && (?:cur_target|t) < n_classes['`\"] failed\\.")},
	{class: ClassIndexSelect, exception: "IndexError", expr: regexp.MustCompile(`^index out of range in self$`)},
	// TH aten/src/TH/generic/THTensorEvenMoreMath.cpp (index_select, and
	// embedding through it; <= 1.4): "index out of range at
	// .../THTensorEvenMoreMath.cpp:NN", from 1.2 "index out of range: Tried
	// to access index 10 out of table with 9 rows. at ...".
	{class: ClassIndexSelect, exception: "RuntimeError", expr: regexp.MustCompile(`^index out of range(?:: Tried to access index N out of table with N rows\.)? at THTensor(?:EvenMore)?Math\.(?:cpp|c)\b`)},
	{class: ClassGatherBounds, exception: "RuntimeError", expr: regexp.MustCompile(`^index N is out of bounds for dimension N with size N$`)},
	// TH THTensorEvenMoreMath.cpp / THTensorMath.c (<= 1.4): THError
	// "Invalid index in gather" / "Invalid index in scatter".
	{class: ClassGatherBounds, exception: "RuntimeError", expr: regexp.MustCompile(`^Invalid index in (?:gather|scatter|scatterAdd)\b`)},
	{class: ClassIndexBounds, exception: "IndexError", expr: regexp.MustCompile(`^index -?N is out of bounds for dimension N with size N$`)},
	{class: ClassOneHotRange, side: "upper", expr: regexp.MustCompile(`^Class values must be smaller than num_classes\.$`)},
	{class: ClassOneHotRange, side: "lower", expr: regexp.MustCompile(`^Class values must be non-negative\.$`)},
	{class: ClassBCEInputRange, expr: regexp.MustCompile(`^all elements of input should be between N and N$`)},
	// THNN aten/src/THNN/generic/BCECriterion.c (<= 1.4): THAssertMsg(x >=
	// 0. && x <= 1., "input value should be between 0~1, but got %f").
	{class: ClassBCEInputRange, expr: regexp.MustCompile("^Assertion [`'\"]x >= N\\. && x <= N\\.['`\"] failed\\.")},
	{class: ClassBCETargetRange, expr: regexp.MustCompile(`^all elements of target should be between N and N$`)},
	{class: ClassMultinomialProb, expr: regexp.MustCompile("^probability tensor contains either `inf`, `nan` or element < N$")},
	// TH THTensorRandom.cpp (<= 1.4): "invalid multinomial distribution (encountering probability entry < 0)".
	{class: ClassMultinomialProb, expr: regexp.MustCompile(`^invalid multinomial distribution \((?:encountering probability entry < N|sum of probabilities <= N)\)`)},
	{class: ClassInductorBounds, expr: regexp.MustCompile(`^index out of bounds: `)},
	{class: ClassNLLBatchSize, expr: regexp.MustCompile(`^Expected input batch_size \(N\) to match target batch_size \(N\)\.$`)},
	{class: ClassNLLTargetDim, expr: regexp.MustCompile(`^ND or ND target tensor expected, multi-target not supported$`)},
	// aten/src/ATen/native/LossNLL.cpp nll_loss_nd (1.13 and 2.x): a
	// 3-D or more input whose target's trailing sizes differ.
	{class: ClassNLLTargetSize, expr: regexp.MustCompile(`^Expected target size \[(?:N(?:, N)*)?\], got \[(?:N(?:, N)*)?\]$`)},
	// torch/nn/functional.py _verify_batch_size (1.13 and 2.x), raised by
	// batch_norm in training mode.
	{class: ClassBatchNormBatch, exception: "ValueError", expr: regexp.MustCompile(`^Expected more than N value per channel when training, got input size torch\.Size\(\[N(?:, N)*\]\)$`)},
	{class: ClassScalarType, expr: regexp.MustCompile(`^expected scalar type \w+ but found \w+$`)},
	{class: ClassCTCLengths, expr: regexp.MustCompile(`^Expected (?:input|target)_lengths to have value at most N`)},
	{class: ClassBincountInput, expr: regexp.MustCompile(`^bincount only supports N-d non-negative integral inputs\.$`)},
}

// fileClasses map the source files that raise device asserts (by name
// without extension: .cu, .cuh, .hip, .c and .cpp alike) to the classes of
// the asserts each can raise, for a text that names only the file: THC's
// "cuda runtime error (59) : device-side assert triggered at
// .../SpatialClassNLLCriterion.cu:NN", "THCudaCheck FAIL file=...", an
// assert line cut before its expression. A file not listed here (THC's
// THCTensorMath.cu, THCGeneral.cpp, THCCachingHostAllocator.cpp, c10's
// CUDAException.cpp) is where the asynchronous error surfaced, not where it
// was raised, and names nothing.
var fileClasses = map[string][]string{
	// THCUNN aten/src/THCUNN/{,generic/}ClassNLLCriterion.cu,
	// SpatialClassNLLCriterion.cu, BCECriterion.cu (<= 1.4), and THNN's .c
	// files of the same names on the CPU.
	"ClassNLLCriterion":        {ClassNLLTargetBounds},
	"SpatialClassNLLCriterion": {ClassNLLTargetBounds},
	"BCECriterion":             {ClassBCEInputRange},
	// THC aten/src/THC/THCTensorIndex.cu (index_select, index_add, put,
	// take; <= 1.4) and THCTensorScatterGather.cu.
	"THCTensorIndex":         {ClassIndexSelect, ClassIndexBounds},
	"THCTensorScatterGather": {ClassGatherBounds},
	// ATen aten/src/ATen/native/cuda/ (1.x, 2.x) and its hipified
	// native/hip/ copies.
	"Loss":                {ClassNLLTargetBounds, ClassBCEInputRange, ClassBCETargetRange},
	"NLLLoss2d":           {ClassNLLTargetBounds},
	"Indexing":            {ClassIndexSelect},
	"IndexKernel":         {ClassIndexBounds},
	"IndexKernelUtils":    {ClassIndexSelect, ClassIndexBounds},
	"ScatterGatherKernel": {ClassGatherBounds},
	"MultinomialKernel":   {ClassMultinomialProb},
	"TensorCompare":       {ClassMultinomialProb},
}

// fileStem is a path's last element without its extension.
func fileStem(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		path = path[i+1:]
	}
	if i := strings.IndexByte(path, '.'); i > 0 {
		path = path[:i]
	}
	return path
}

// knownFile reports whether path is one of fileClasses' files.
func knownFile(path string) bool {
	_, ok := fileClasses[fileStem(path)]
	return ok && path != ""
}

// Class returns the kernel class of s, a coarse id shared by the CUDA, HIP,
// THC-era, Triton and CPU forms of one check ("nll_loss.target_bounds" for
// both nll_loss_forward_reduce_cuda_kernel_2d's `t >= 0 && t < n_classes`
// and the CPU "IndexError: Target 4 is out of bounds."), or "" when s is
// none of the known checks. A device assert that names only its file
// (File) has that file's class when the file raises one kind of assert
// only (SpatialClassNLLCriterion.cu: nll_loss.target_bounds); Classes
// gives the set otherwise. Families without a per-op check get a class per
// family (oom.device, oom.host, device.mismatch, device.illegal_address,
// device.launch_failure, device.misaligned, device.memory_fault); a NaN
// anomaly is autograd.nan when anomaly mode found it and nonfinite.check
// when a finiteness check raised (the same check's message may print the
// tensor's device: "tensor(nan, device='cuda:0')" on the GPU is
// "tensor(nan)" on the CPU); pass, timeout, infra, signals, the library
// errors (cublas_error, cudnn_error, cuda_error: their Expression, the
// status, is their key) and unknown exceptions get "".
//
// Known gaps: CUDA has no one_hot check of its own and reports scatter's
// assert (gather.bounds) where the CPU says one_hot.class_range; an
// Inductor assert names no op, so it has its own class.
func (s Signature) Class() string {
	switch s.Family {
	case FamilyDeviceAssert:
		if s.Expression == "" {
			if cs := fileClasses[fileStem(s.File)]; s.File != "" && len(cs) == 1 {
				return cs[0]
			}
			return ""
		}
		for _, r := range deviceClassRules {
			if r.expr.MatchString(s.Expression) {
				return r.class
			}
		}
		return ""
	case FamilyHostCheck:
		if r := s.hostRule(); r != nil {
			return r.class
		}
		return ""
	case FamilyOOM:
		if s.Expression == exprHostOOM {
			return ClassHostOOM
		}
		return ClassDeviceOOM
	case FamilyNaNAnomaly:
		if strings.Contains(s.Expression, anomalyText) {
			return ClassNaNAnomaly
		}
		return ClassNonFinite
	}
	for _, f := range families {
		if f.family == s.Family {
			return f.class
		}
	}
	return ""
}

// hostRule returns the rule of hostClassRules that a host check's
// Expression meets, or nil.
func (s Signature) hostRule() *classRule {
	exc, msg, ok := strings.Cut(s.Expression, ": ")
	if s.Family != FamilyHostCheck || !ok {
		return nil
	}
	short := lastComponent(exc)
	for i, r := range hostClassRules {
		if r.exception != "" && r.exception != short {
			continue
		}
		if r.expr.MatchString(msg) {
			return &hostClassRules[i]
		}
	}
	return nil
}

// otherSide reports whether a and b are host checks that name different
// halves of one check (classRule.side).
func otherSide(a, b Signature) bool {
	ra, rb := a.hostRule(), b.hostRule()
	return ra != nil && rb != nil && ra.side != "" && rb.side != "" && ra.side != rb.side
}

// Classes returns the classes s may be: its Class when it has one; the
// classes of the file it names when it is a device assert that names only
// its file (THCTensorIndex.cu: index_select.bounds and index.bounds), or of
// an assert that several checks raise (vectorized_gather_kernel's); nil
// when it names no known check (a device assert of unknown kind, which
// said only "device-side assert triggered", or an exception no rule
// knows).
func (s Signature) Classes() []string {
	if c := s.Class(); c != "" {
		return []string{c}
	}
	if s.Family != FamilyDeviceAssert {
		return nil
	}
	if s.Expression == "" && s.File != "" {
		return append([]string(nil), fileClasses[fileStem(s.File)]...)
	}
	for _, r := range deviceClassRules {
		if r.expr.MatchString(s.Expression) {
			return append([]string(nil), r.classes...)
		}
	}
	return nil
}

// sameClass reports whether two classes are one failure: equal, or both
// out of memory (a device's and the host's allocator run out for the same
// reason, a batch too large; which one depends on the build and device
// the replay ran on).
func sameClass(a, b string) bool {
	return a == b || (strings.HasPrefix(a, "oom.") && strings.HasPrefix(b, "oom."))
}

// anyClassIn reports whether some class of cs is one of set.
func anyClassIn(cs, set []string) bool {
	for _, c := range cs {
		for _, x := range set {
			if sameClass(c, x) {
				return true
			}
		}
	}
	return false
}

// sameSet reports whether a and b hold the same classes.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		if !slices.Contains(b, c) {
			return false
		}
	}
	return true
}
