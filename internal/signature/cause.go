package signature

import "strings"

// Cause is what a failure says about the inputs that raised it: whether
// they break a contract of PyTorch's (a misuse, the caller's to fix), a
// value's range (the data's), a documented rule, or nothing that a check
// names, so that the inputs may well meet the contract and the failure be
// PyTorch's. The regression report offers an issue for PyTorch's tracker
// only for CauseFault.
type Cause string

const (
	// CauseUnknown: the failure names no check that reduce knows (a host
	// exception no rule classes, a NaN found by anomaly mode): it says
	// neither misuse nor fault.
	CauseUnknown Cause = ""
	// CauseValue: a check of values against their valid range (a target
	// below 0 or at C, an index past its dimension, a probability outside
	// [0, 1]). On the host the check itself says the values break it; a
	// device assert fires on values the reduction bisects (the data's when
	// it finds their range).
	CauseValue Cause = "value"
	// CauseArgument: a check of an argument on the host, whatever its
	// values: its shape, rank, dtype or an attribute's value. The call
	// breaks the op's contract: a misuse.
	CauseArgument Cause = "argument"
	// CauseRule: a documented rule that the batch as a whole breaks
	// (BatchNorm in training needs more than one value per channel): the
	// rule and its fix, not a bug.
	CauseRule Cause = "rule"
	// CauseResource: out of memory: the batch or the setup is too large.
	CauseResource Cause = "resource"
	// CauseFault: a failure that no check of the inputs raised: an illegal
	// address, a launch failure, a misaligned access, a ROCm memory fault,
	// a crash, or an internal assert of PyTorch's ("INTERNAL ASSERT
	// FAILED"). Inputs that meet the contract can meet it.
	CauseFault Cause = "fault"
)

// classCauses are the causes of the classes Class gives: every class has
// one (TestClassCauses).
var classCauses = map[string]Cause{
	ClassNLLTargetBounds:  CauseValue,
	ClassIndexSelect:      CauseValue,
	ClassGatherBounds:     CauseValue,
	ClassIndexBounds:      CauseValue,
	ClassBCEInputRange:    CauseValue,
	ClassBCETargetRange:   CauseValue,
	ClassOneHotRange:      CauseValue,
	ClassMultinomialProb:  CauseValue,
	ClassInductorBounds:   CauseValue,
	ClassCTCLengths:       CauseValue,
	ClassBincountInput:    CauseValue,
	ClassNLLBatchSize:     CauseArgument,
	ClassNLLTargetDim:     CauseArgument,
	ClassNLLTargetSize:    CauseArgument,
	ClassScalarType:       CauseArgument,
	ClassDeviceMismatch:   CauseArgument,
	ClassBatchNormBatch:   CauseRule,
	ClassDeviceOOM:        CauseResource,
	ClassHostOOM:          CauseResource,
	ClassIllegalAddress:   CauseFault,
	ClassLaunchFailure:    CauseFault,
	ClassMisalignedAccess: CauseFault,
	ClassMemoryFault:      CauseFault,
	// A NaN: anomaly mode names the backward function that returned it
	// (an input's value, a weight, or a numerical edge of the function);
	// a finiteness check raised on a value (the user's own check, most
	// often). Neither says whose.
	ClassNaNAnomaly: CauseUnknown,
	ClassNonFinite:  CauseUnknown,
}

// internalAssert is the text of TORCH_INTERNAL_ASSERT (c10/util/Exception.h,
// 1.x and 2.x): "<cond> INTERNAL ASSERT FAILED at \"<file>\":<line>, please
// report a bug to PyTorch. <message>". Every internal assert is a failure
// of its own, so the text gives a cause and no class: a class would make
// any two of them one failure.
const internalAssert = "INTERNAL ASSERT FAILED"

// Cause says what s, a failure, says about the inputs that raised it: its
// class's cause (for an assert that several checks raise, their cause when
// they share one); for a signature without a class, CauseFault for a failure
// of the device or the process that no check named (a device assert that
// names no assert is a check all the same: unknown) and for PyTorch's
// internal assert, else CauseUnknown.
func (s Signature) Cause() Cause {
	if c := s.Class(); c != "" {
		return classCauses[c]
	}
	if cs := s.Classes(); len(cs) > 0 && s.Expression != "" {
		// An assert several checks raise: their cause, when they share it.
		c := classCauses[cs[0]]
		for _, x := range cs[1:] {
			if classCauses[x] != c {
				return CauseUnknown
			}
		}
		return c
	}
	switch s.Family {
	case FamilyCrashSignal, FamilyAbortSignal, FamilyCUDAError:
		return CauseFault
	case FamilyHostCheck:
		if strings.Contains(s.Expression, internalAssert) {
			return CauseFault
		}
	}
	return CauseUnknown
}

// Rule is a documented rule of PyTorch's that a batch breaks as a whole,
// by the class of the check that raises when it does: what the rule says
// and how a training loop meets it, one sentence each in Markdown. The
// rules of reduce's built-in ops are declared with the op (kernels.Op);
// these are those of PyTorch's other functions.
type Rule struct {
	Class string
	// Function is the function whose rule it is, as a user calls it.
	Function  string
	Text, Fix string
}

var rules = []Rule{{
	Class:    ClassBatchNormBatch,
	Function: "torch.nn.functional.batch_norm",
	Text: "In training mode BatchNorm normalizes each channel by the statistics of the batch, so it needs more than one value per channel: " +
		"a batch of one sample ([1, C], or [1, C, 1, 1] after global pooling) has a single one, whose variance is undefined.",
	Fix: "Train on batches of two samples or more: `DataLoader(..., drop_last=True)` drops a last batch of one sample " +
		"(or keep the dataset's size off a multiple of the batch size plus one); in evaluation, `model.eval()` normalizes with the running statistics instead.",
}}

// RuleOf returns the rule that a failure of class breaks, if the class is
// one of a documented rule.
func RuleOf(class string) (Rule, bool) {
	for _, r := range rules {
		if r.Class == class {
			return r, true
		}
	}
	return Rule{}, false
}
