package kernels

import "strconv"

// What an op's contract says to a person when a batch breaks it: the
// regression report (package regress) names the contract and the fix of a
// misuse, or the rule a batch breaks, instead of offering an issue for
// PyTorch's tracker. Each is declared once, with the op that checks it.

// Misuse is one of an op's argument checks that raise on the host whatever
// the values (a shape, a rank, a dtype), with the contract it enforces and
// the usual fix: a failure of it is the caller's misuse of the op, never a
// bug of PyTorch's.
type Misuse struct {
	// Class is the check's class id (Failure.Class), as package signature
	// classes its text.
	Class string
	// Tensor is the argument the check is about, "" when it is several.
	Tensor string
	// Contract says what the arguments must be, Fix how a training loop
	// usually meets it: one sentence each, in Markdown, with PyTorch's
	// argument names.
	Contract, Fix string
}

// Rule is a documented rule of an op under which inputs that each meet
// its contract still give no usable result: the batch as a whole breaks it
// (every target ignored, so that a mean over no targets is 0/0), and the
// op returns a non-finite value instead of raising.
type Rule struct {
	// Tensor is the argument the rule is about.
	Tensor string
	// Text says the rule, Fix how a training loop meets it: one sentence
	// each, in Markdown.
	Text, Fix string
	// broken reports whether t, passed as Tensor with attrs (PyTorch's
	// defaults for those absent), breaks the rule, and says how, in
	// Markdown, of "it": "holds -100 (`ignore_index`) in every element".
	broken func(t *Tensor, attrs map[string]any) (string, bool)
}

// Broken reports whether t, passed to the op as r.Tensor with attrs (nil:
// PyTorch's defaults), breaks the rule, and says how.
func (r *Rule) Broken(t *Tensor, attrs map[string]any) (string, bool) {
	if t == nil || t.Validate() != nil {
		return "", false
	}
	return r.broken(t, attrs)
}

// MisuseOf returns the misuse that a failure of class is, as the ops
// declare it, and the ops that do (by name); nil when no op declares the
// class a misuse.
func MisuseOf(class string) (*Misuse, []*Op) {
	var m *Misuse
	var ops []*Op
	for _, name := range OpNames() {
		op := registry[name]
		if om := op.MisuseOf(class); om != nil {
			m = om
			ops = append(ops, op)
		}
	}
	return m, ops
}

// MisuseOf returns op's misuse of class, or nil.
func (op *Op) MisuseOf(class string) *Misuse {
	if class == "" {
		return nil
	}
	for _, m := range op.Misuses {
		if m.Class == class {
			return m
		}
	}
	return nil
}

// Rules lists the rules the ops declare, each once, in the order of the
// ops' names.
func Rules() []*Rule {
	var out []*Rule
	seen := map[*Rule]bool{}
	for _, name := range OpNames() {
		for _, r := range registry[name].Rules {
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// defaultIgnoreIndex is the default of the class-index losses'
// ignore_index.
const defaultIgnoreIndex = -100

// The argument checks and the rule of the losses over class indices:
// cross_entropy is log_softmax then nll_loss, and the two share them.
var (
	misuseTargetDim = &Misuse{
		Class:  classNLLTargetDim,
		Tensor: "target",
		Contract: "`target` must hold one class index per sample, shape [N], for `input` [N, C] " +
			"(or class probabilities shaped like `input`, in its float dtype)",
		Fix: "a column of labels [N, 1] needs `target.squeeze(1)` (or `.view(-1)`) before the loss; " +
			"a multi-hot [N, C] target is multi-label: use `binary_cross_entropy_with_logits` instead",
	}
	misuseTargetSize = &Misuse{
		Class:  classNLLTargetSize,
		Tensor: "target",
		Contract: "for `input` [N, C, d1, ..., dK] (a class per position), `target` must be [N, d1, ..., dK]: " +
			"`input`'s shape without its class dim C",
		Fix: "make the two agree: the class dim of `input` second (`input.permute(0, 2, 1)` for [N, L, C] logits), " +
			"the target at the same resolution as the logits (resize or crop one of them)",
	}
	misuseBatchSize = &Misuse{
		Class:    classNLLBatchSize,
		Tensor:   "target",
		Contract: "`input` and `target` must have one row per sample each: their first dims are the same N",
		Fix: "pass the target of the same samples as the logits (a target sliced or padded differently, " +
			"or logits flattened over a sequence while the target was not: flatten both, `input.view(-1, C)` and `target.view(-1)`)",
	}
	misuseScalarType = &Misuse{
		Class:    classScalarType,
		Contract: "class-index `target`s must be int64 (`torch.long`), and a `weight` must have `input`'s dtype",
		Fix:      "cast the tensor of the wrong dtype: `target.long()`, `weight.to(input.dtype)`",
	}
	ruleAllIgnored = &Rule{
		Tensor: "target",
		Text: "with `reduction='mean'` the loss is the mean over the targets that are not `ignore_index`: " +
			"a batch in which every target is ignored has none, and its mean loss is 0/0 = NaN (torch returns NaN, it does not raise)",
		Fix: "skip a batch with no target left (`if (target != ignore_index).any(): ...`), or use `reduction='sum'` " +
			"and divide by `max(1, (target != ignore_index).sum())`",
		broken: func(t *Tensor, attrs map[string]any) (string, bool) {
			if t.DType.IsFloat() || t.DType == Bool || t.Numel() == 0 {
				return "", false
			}
			ii, red := int64(defaultIgnoreIndex), "mean"
			if v, ok := attrs["ignore_index"]; ok {
				i, err := toInt64(v)
				if err != nil {
					return "", false
				}
				ii = i
			}
			if v, ok := attrs["reduction"].(string); ok {
				red = v
			}
			if red != "mean" {
				return "", false
			}
			all := true
			t.Each(func(_ []int64, e int64) { all = all && t.LoadInt(e) == ii })
			if !all {
				return "", false
			}
			return "holds " + strconv.FormatInt(ii, 10) + " (`ignore_index`) in every element", true
		},
	}
)
