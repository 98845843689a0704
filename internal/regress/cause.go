package regress

import (
	"fmt"
	"regexp"
	"strings"

	"reduce/internal/signature"
	"reduce/kernels"
)

// What the minimal batch's inputs are against the contract of what failed,
// and so what report.md says of the cause: a misuse (an argument check
// raised: the contract and the fix), a documented rule the batch breaks,
// the step's own exception, the data (a value, a relation, a size: the
// diagnosis and the first checks say it), inputs that meet the contract
// as far as reduce can tell (then, and only then, an issue for PyTorch's
// tracker), or neither. The facts come from where they are defined once:
// a check's cause and a rule of PyTorch's functions from package
// signature, a built-in op's misuses and rules from its declaration in
// kernels, whose raised the exception from the replays' traceback
// (Record.Raised).

// verdict is what judge says of a finding's inputs: a closed set.
type verdict int

const (
	// verdictNone: nothing to judge (a partial record, no failure).
	verdictNone verdict = iota
	// verdictData: the finding blames the data (values out of a range, a
	// non-finite value, a relation between samples, a size or shape, the
	// memory): the report's diagnosis and first checks say how.
	verdictData
	// verdictMisuse: a check of the arguments raised: the call breaks
	// the op's contract.
	verdictMisuse
	// verdictRule: the batch breaks a documented rule.
	verdictRule
	// verdictOwn: the step's own code raised the exception.
	verdictOwn
	// verdictValid: no check of the inputs names them: they meet the op's
	// contract as far as reduce can tell, and the failure may be
	// PyTorch's (report.md ends with an issue for its tracker).
	verdictValid
	// verdictUnknown: reduce cannot tell; the report says so, and offers
	// no issue.
	verdictUnknown
)

// judgement is a verdict with its words, in Markdown: what failed (lead),
// the contract or rule the inputs break, and the fix.
type judgement struct {
	verdict             verdict
	lead, contract, fix string
}

// judge decides what the minimal batch's inputs are against the contract
// of what failed, in this order:
//
//   - nothing, for a partial record or one whose family is no failure;
//   - the data, when the finding blames it: a relation between samples, a
//     size or shape, an emulated device's memory, an OOM, or a triggering
//     element with a rule (a range, a non-finite value);
//   - a misuse, when the failure's check is one of an argument
//     (signature.CauseArgument), or any host check of a built-in op that
//     is no check of values (the kernels raise torch's argument checks
//     only, each with its misuse when the op declares one);
//   - the data, for a host check of values (torch's own check says the
//     values are out of range, whether or not the reduction bisected it);
//   - a rule, for a check of a documented rule (signature.RuleOf), or a
//     non-finite failure of a step whose minimal batch breaks a built-in
//     op's rule (kernels.Rules: every target ignore_index);
//   - the step's own exception, when its own raise or assert raised it
//     (Record.Raised);
//   - valid inputs, when no check names them: a device assert whose values
//     no rule explains, a fault of the device or the process
//     (signature.CauseFault: an illegal address, a crash, an internal
//     assert);
//   - else, reduce cannot tell.
func judge(rec *Record, reg *Regression) judgement {
	if rec == nil || rec.Partial || !signature.Failing(rec.Signature) {
		return judgement{verdict: verdictNone}
	}
	if rec.Predates != "" {
		return judgement{verdict: verdictData, lead: "The cause predates this batch: " + mdText(rec.Predates) + ". The minimal batch is a witness: it fails against the recorded state, and its samples are not the culprits.",
			fix: "find the step whose batch made the state so (a loss or gradient norm that jumped before this step), record its batch with the state from before it, and reduce that"}
	}
	if w := rec.Window; w != nil {
		return judgement{verdict: verdictData, lead: "The cause is in an earlier step of the recorded window: " + mdText(w.Words()) + ". Its gradient step leaves the weights or the optimizer's state so that the failing step's batch, innocent alone, fails.",
			fix: "fix or filter that sample in the data pipeline; and guard the training against it where it happens: skip a step whose loss or gradient norm is not finite (`torch.nn.utils.clip_grad_norm_(..., error_if_nonfinite=True)` raises there), or mask a missing value with `torch.where` before the loss rather than by indexing after it (its gradient is still NaN)"}
	}
	if rec.Finding >= 0 && rec.Finding < len(rec.Culprits) && rec.Culprits[rec.Finding].Relation != nil {
		return judgement{verdict: verdictData} // a relation between samples
	}
	if rec.Shape != nil && rec.Shape.Squeezed && rec.Signature.Cause() == signature.CauseArgument {
		// A column where the call wants one value per sample: its
		// argument check's contract and fix say it.
		return misuse(rec, reg, builtinOp(rec, reg), rec.Signature.Class())
	}
	if rec.Shape != nil || rec.Size != nil || rec.DeviceMemory() > 0 || rec.Signature.Family == signature.FamilyOOM {
		// A size the model or the device cannot take: the pipeline's or
		// the setup's to fix (and an emulated device a snippet lacks).
		return judgement{verdict: verdictData}
	}
	if j, ok := brokenRule(rec, reg); ok {
		return j // a documented rule the minimal batch breaks as a whole
	}
	for _, e := range findingElements(rec) {
		if e.Rule != "" {
			return judgement{verdict: verdictData} // the values' range: the data
		}
	}
	sig := rec.Signature
	class, cause := sig.Class(), sig.Cause()
	op := builtinOp(rec, reg)
	host := sig.Family == signature.FamilyHostCheck
	switch {
	case cause == signature.CauseArgument || op != nil && host && cause != signature.CauseValue && cause != signature.CauseFault:
		return misuse(rec, reg, op, class)
	case cause == signature.CauseValue && host:
		return judgement{verdict: verdictData}
	case cause == signature.CauseResource:
		return judgement{verdict: verdictData}
	case cause == signature.CauseRule:
		if r, ok := signature.RuleOf(class); ok {
			return judgement{verdict: verdictRule, contract: r.Text, fix: r.Fix,
				lead: fmt.Sprintf("A documented rule of %s that this batch breaks, not a bug of PyTorch's: %s.", mdCode(r.Function), failureText(rec, reg))}
		}
	}
	if r := rec.Raised; r != nil && r.By == signature.RaisedByCode && op == nil {
		where := "the step's own code"
		if r.Function != "" && r.File != "" {
			where = fmt.Sprintf("%s in %s", mdCode(r.Function), mdCode(r.File))
		}
		return judgement{verdict: verdictOwn,
			lead: fmt.Sprintf("The step raised this exception itself: a `raise` or `assert` statement of its own code (%s) raised %s, not PyTorch. "+
				"The batch breaks a rule of the step's own, not a contract of PyTorch's.", where, failureText(rec, reg)),
			fix: "if the step's check is right, the culprit samples (below) break it: fix them in the data pipeline; " +
				"if they should pass, fix the check (its message names what it wanted)."}
	}
	switch {
	case sig.Family == signature.FamilyDeviceAssert, cause == signature.CauseFault:
		return judgement{verdict: verdictValid}
	}
	return unknown(rec, reg)
}

// misuse is the judgement of a failed argument check of class: the
// contract and fix the built-in op declares for it (op's, else any op's
// that declares class), or words of the check's kind.
func misuse(rec *Record, reg *Regression, op *kernels.Op, class string) judgement {
	var m *kernels.Misuse
	if op != nil {
		m = op.MisuseOf(class)
	}
	var ops []*kernels.Op
	if m == nil {
		m, ops = kernels.MisuseOf(class)
	}
	j := judgement{verdict: verdictMisuse}
	what := "a PyTorch call in the step"
	switch {
	case op != nil:
		what = mdCode(opName(op))
	case rec.Raised != nil && rec.Raised.By == signature.RaisedByTorch && rec.Raised.Function != "":
		what = mdCode(rec.Raised.Function)
	case rec.Signature.Kernel != "":
		what = mdCode(rec.Signature.Kernel)
	case len(ops) > 0:
		var names []string
		for _, o := range ops {
			names = append(names, mdCode(opName(o)))
		}
		what = strings.Join(names, " or ")
	}
	j.lead = fmt.Sprintf("A misuse of %s, not a bug of PyTorch's: its check of its arguments raised %s, whatever their values.", what, failureText(rec, reg))
	if m == nil {
		j.contract = "the message names the argument and what the check wanted: its shape, rank, dtype or device, or an attribute's value"
		j.fix = "make the call's arguments agree with the function's documentation, or convert them where the batch is made"
		if rec.Signature.Family == signature.FamilyDeviceMismatch {
			j.contract = "every tensor of one call must be on one device"
			j.fix = "move the tensors the message names (`.to(device)`), and create tensors inside the step with `device=`"
		}
		return j
	}
	j.contract, j.fix = m.Contract, m.Fix
	if sh := rec.Shape; op == nil && m.Tensor != "" && sh != nil && sh.Squeezed && len(sh.Tensors) == 1 && sh.Tensors[0] != m.Tensor {
		// The step's own name for the argument: its label is the loss's target.
		name := sh.Tensors[0]
		j.fix = strings.ReplaceAll(j.fix, "`"+m.Tensor+".", "`"+name+".") +
			fmt.Sprintf(" (the batch's %s is the call's %s here)", mdCode(name), mdCode(m.Tensor))
	}
	if op != nil && m.Tensor != "" {
		if args := opArgs(op, reg.Batch); args != nil {
			var is []string
			for _, ta := range op.Tensors {
				if e := args[ta.Name]; e != nil && (ta.Name == m.Tensor || ta.Name == "input") {
					is = append(is, fmt.Sprintf("%s is %s %s", mdCode(ta.Name), e.DType, fmtIndex(e.Shape)))
				}
			}
			if len(is) > 0 {
				j.contract += "; here " + strings.Join(is, " and ")
			}
		}
	}
	return j
}

// brokenRule is the rule of a built-in op that a step's minimal batch
// breaks, for a non-finite failure (the rules give NaN rather than
// raise): a tensor of the batch that breaks one of kernels.Rules with the
// op's defaults (the step's own attributes are unknown).
func brokenRule(rec *Record, reg *Regression) (judgement, bool) {
	if rec.Signature.Family != signature.FamilyNaNAnomaly || builtinOp(rec, reg) != nil || reg == nil || reg.Batch == nil {
		return judgement{}, false
	}
	state := reg.Batch.StateTensors()
	for _, r := range kernels.Rules() {
		for _, e := range reg.Batch.Tensors {
			if state[e.Name] || e.Tensor == nil {
				continue
			}
			how, ok := r.Broken(e.Tensor, nil)
			if !ok {
				continue
			}
			var ops []string
			for _, name := range kernels.OpNames() {
				o, _ := kernels.Lookup(name)
				for _, or := range o.Rules {
					if or == r {
						ops = append(ops, mdCode(opName(o)))
					}
				}
			}
			return judgement{verdict: verdictRule, contract: r.Text, fix: r.Fix,
				lead: fmt.Sprintf("Most likely a documented rule of %s that this batch breaks, not a bug of PyTorch's: the minimal batch's %s (%s %s) %s, "+
					"and the step's check of the loss raised %s. If %s is the %s of such a loss, this is why:",
					strings.Join(ops, " and "), mdCode(e.Name), e.DType, fmtIndex(e.Shape), how, failureText(rec, reg), mdCode(e.Name), mdCode(r.Tensor))}, true
		}
	}
	return judgement{}, false
}

// unknown is the judgement for a failure that reduce cannot place.
func unknown(rec *Record, reg *Regression) judgement {
	who := "It raised " + failureText(rec, reg)
	if r := rec.Raised; r != nil && r.Function != "" {
		switch r.By {
		case signature.RaisedByTorch:
			who = fmt.Sprintf("PyTorch raised %s in %s (%s)", failureText(rec, reg), mdCode(r.Function), mdCode(r.File))
		case signature.RaisedByLibrary:
			who = fmt.Sprintf("A library raised %s in %s (%s)", failureText(rec, reg), mdCode(r.Function), mdCode(r.File))
		case signature.RaisedByCall:
			who = fmt.Sprintf("A call in %s (%s) raised %s", mdCode(r.Function), mdCode(r.File), failureText(rec, reg))
		}
	}
	return judgement{verdict: verdictUnknown,
		lead: who + ": a check that reduce does not know, so it cannot tell whether these inputs meet the contract of the call that failed, and writes no issue for PyTorch's tracker.",
		fix: "replay the minimal batch (`reduce replay`, below) to see the traceback, and compare the arguments of the call that raised with its documentation; " +
			"if they meet it, the minimal batch is the reproduction to report."}
}

// failureText is the failure for a sentence: its exception and first line
// as the CPU raised it or as recorded, else its signature, in code.
func failureText(rec *Record, reg *Regression) string {
	switch {
	case rec.CPU != nil && rec.CPU.Message != "":
		return mdCode(rec.CPU.Exception + ": " + firstLine(rec.CPU.Message))
	case reg != nil && reg.Batch != nil && reg.Batch.Error != nil && reg.Batch.Error.Text != "":
		lines := strings.Split(strings.TrimSpace(reg.Batch.Error.Text), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if excLineRe.MatchString(lines[i]) {
				return mdCode(strings.TrimSpace(lines[i]))
			}
		}
	}
	if rec.Signature.Expression != "" {
		return mdCode(rec.Signature.Expression)
	}
	return mdCode(string(rec.Signature.Family))
}

// causeSection renders "## Cause" for a misuse, a rule, the step's own
// exception or a failure reduce cannot place; "" otherwise (the data's
// findings have their diagnosis and first checks, valid inputs the
// upstream issue).
func causeSection(j judgement) string {
	if j.lead == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Cause\n\n" + j.lead + "\n\n")
	switch j.verdict {
	case verdictMisuse:
		b.WriteString("- contract: " + j.contract + "\n")
	case verdictRule:
		b.WriteString("- rule: " + j.contract + "\n")
	}
	if j.fix != "" {
		b.WriteString("- fix: " + j.fix + "\n")
	}
	switch j.verdict {
	case verdictMisuse:
		b.WriteString("\nNo upstream issue: these inputs break the op's contract.\n")
	case verdictRule:
		b.WriteString("\nNo upstream issue: the batch breaks a documented rule.\n")
	case verdictOwn:
		b.WriteString("\nNo upstream issue: the step's own code raised it.\n")
	}
	return b.String() + "\n"
}

// shortName is a step's or entry's "file:function" as a title shows it:
// a path reduced to its last element, so that no directory (a home, a
// user name) is in it.
func shortName(s string) string {
	file, fn, ok := cutLast(s, ":")
	if !ok || !strings.ContainsAny(file, `/\`) {
		return s
	}
	return file[strings.LastIndexAny(file, `/\`)+1:] + ":" + fn
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// absPathRe is an absolute path in a line of text: a POSIX one, a Windows
// one, or one under the home directory ("~/"): a run of path elements
// after a boundary.
var absPathRe = regexp.MustCompile(`(^|[\s(\[{'"=,;])(?:[A-Za-z]:\\|~?/)(?:[^\s/\\'"` + "`" + `:;,)\]]+[/\\])*([^\s/\\'"` + "`" + `:;,)\]]+)`)

// headlineText is external text for a title or a headline: with the user
// and host names of red replaced, and every absolute path cut to its last
// element.
func headlineText(s string, red *redactor) string {
	return absPathRe.ReplaceAllString(red.text(s), "${1}${2}")
}

// people is r without its sample ids: what report.md, which names the
// culprits by their ids, redacts from its title and headline.
func (r *redactor) people() *redactor {
	out := &redactor{cwd: r.cwd}
	for _, w := range r.words {
		if w.to != "<id>" {
			out.words = append(out.words, w)
		}
	}
	return out
}
