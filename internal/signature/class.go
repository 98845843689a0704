package signature

import (
	"regexp"
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
	// expr matches a device assert's expression, or a host exception's
	// message (the part of Expression after "<class>: ").
	expr *regexp.Regexp
	// exception, if set, restricts a host rule to this exception class.
	exception string
}

// deviceClassRules map device assert expressions (as printed by CUDA, HIP,
// THC and Triton builds; shared/reference/pytorch-failures.md, "Per
// operator") to classes.
var deviceClassRules = []classRule{
	{class: ClassNLLTargetBounds, expr: regexp.MustCompile(`^(?:cur_target|t) >= 0 && (?:cur_target|t) < n_classes$`)},
	{class: ClassIndexSelect, expr: regexp.MustCompile(`^srcIndex < srcSelectDimSize$`)},
	{class: ClassGatherBounds, expr: regexp.MustCompile(`^idx_dim >= 0 && idx_dim < index_size && "(?:scatter gather kernel )?index out of bounds"$`)},
	{class: ClassIndexBounds, expr: regexp.MustCompile(`^(?:-sizes\[i\] <= index && index < sizes\[i\]|index >= -sizes\[i\] && index < sizes\[i\]) && "index out of bounds"$`)},
	{class: ClassBCEInputRange, expr: regexp.MustCompile(`^input_val >= zero && input_val <= one$`)},
	{class: ClassBCETargetRange, expr: regexp.MustCompile(`^target_val >= zero && target_val <= one$`)},
	{class: ClassMultinomialProb, expr: regexp.MustCompile("^(?:probability tensor contains either `inf`, `nan` or element < 0|val >= zero|cumdist\\[size - 1\\] > static_cast<scalar_t>\\(0\\))$")},
	{class: ClassInductorBounds, expr: regexp.MustCompile(`^index out of bounds: `)},
}

// hostClassRules map PyTorch's host exception messages, after
// normalizeMessage (integers are N), to classes. The texts are those of
// real torch 1.13 CPU runs (testdata/stderr/cpu_*.txt).
var hostClassRules = []classRule{
	{class: ClassNLLTargetBounds, exception: "IndexError", expr: regexp.MustCompile(`^Target N is out of bounds\.$`)},
	{class: ClassIndexSelect, exception: "IndexError", expr: regexp.MustCompile(`^index out of range in self$`)},
	{class: ClassGatherBounds, exception: "RuntimeError", expr: regexp.MustCompile(`^index N is out of bounds for dimension N with size N$`)},
	{class: ClassIndexBounds, exception: "IndexError", expr: regexp.MustCompile(`^index -?N is out of bounds for dimension N with size N$`)},
	{class: ClassOneHotRange, expr: regexp.MustCompile(`^Class values must be (?:smaller than num_classes|non-negative)\.$`)},
	{class: ClassBCEInputRange, expr: regexp.MustCompile(`^all elements of input should be between N and N$`)},
	{class: ClassBCETargetRange, expr: regexp.MustCompile(`^all elements of target should be between N and N$`)},
	{class: ClassMultinomialProb, expr: regexp.MustCompile("^probability tensor contains either `inf`, `nan` or element < N$")},
	{class: ClassInductorBounds, expr: regexp.MustCompile(`^index out of bounds: `)},
	{class: ClassNLLBatchSize, expr: regexp.MustCompile(`^Expected input batch_size \(N\) to match target batch_size \(N\)\.$`)},
	{class: ClassNLLTargetDim, expr: regexp.MustCompile(`^ND or ND target tensor expected, multi-target not supported$`)},
	{class: ClassScalarType, expr: regexp.MustCompile(`^expected scalar type \w+ but found \w+$`)},
	{class: ClassCTCLengths, expr: regexp.MustCompile(`^Expected (?:input|target)_lengths to have value at most N`)},
	{class: ClassBincountInput, expr: regexp.MustCompile(`^bincount only supports N-d non-negative integral inputs\.$`)},
}

// Class returns the kernel class of s, a coarse id shared by the CUDA, HIP,
// THC-era, Triton and CPU forms of one check ("nll_loss.target_bounds" for
// both nll_loss_forward_reduce_cuda_kernel_2d's `t >= 0 && t < n_classes`
// and the CPU "IndexError: Target 4 is out of bounds."), or "" when s is
// none of the known checks. Families without a per-op check get a class per
// family (oom.device, oom.host, device.mismatch, device.illegal_address,
// device.launch_failure, device.misaligned, device.memory_fault); a NaN
// anomaly is autograd.nan when anomaly mode found it and nonfinite.check
// when a finiteness check raised (the same check's message may print the
// tensor's device: "tensor(nan, device='cuda:0')" on the GPU is
// "tensor(nan)" on the CPU); pass, timeout, infra, signals and unknown
// exceptions get "".
//
// Known gaps: CUDA has no one_hot check of its own and reports scatter's
// assert (gather.bounds) where the CPU says one_hot.class_range; an
// Inductor assert names no op, so it has its own class.
func (s Signature) Class() string {
	switch s.Family {
	case FamilyDeviceAssert:
		for _, r := range deviceClassRules {
			if r.expr.MatchString(s.Expression) {
				return r.class
			}
		}
		return ""
	case FamilyHostCheck:
		exc, msg, ok := strings.Cut(s.Expression, ": ")
		if !ok {
			return ""
		}
		short := lastComponent(exc)
		for _, r := range hostClassRules {
			if r.exception != "" && r.exception != short {
				continue
			}
			if r.expr.MatchString(msg) {
				return r.class
			}
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
