package regress

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/kernels"
)

// report.md's last section: an issue for the tracker of the library that
// owns the failing op, for a minimal case that fails although its inputs
// meet the op's contract as far as reduce can tell (judge: verdictValid).
// It is text a person pastes into a public tracker, so everything taken
// from outside is redacted first (redactor, redact.go) and then quoted as the rest of
// report.md quotes it; the Python snippet builds the minimal batch from
// literals and names external text only inside pyQuote strings.

// upstreamIssue renders the "## Upstream issue" section (heading included,
// after a blank line) or "" when judge does not find the inputs valid: a
// misuse, a rule, the step's own exception, the data, or a failure reduce
// cannot place get none. The section is a lead sentence and one fenced
// block holding the issue: a title line, "### Bug description" (the
// failure's first line), "### To reproduce" (a self-contained Python
// snippet), "### Environment" and "### Minimal batch".
func upstreamIssue(rec *Record, reg *Regression) string {
	if reg == nil || reg.Batch == nil || judge(rec, reg).verdict != verdictValid {
		return ""
	}
	red := newRedactor(rec, reg)
	issue, longest := mdEscape(issueText(rec, reg, red), true)
	fence := strings.Repeat("`", max(3, longest+1))
	return "\n## Upstream issue\n\n" +
		"As far as reduce can tell the inputs meet the op's contract (no check of an argument raised, no value is outside its valid range, no rule names them), so the failure may be a bug in PyTorch (or in the library that owns the op). If you believe it is, this text is ready to paste:\n\n" +
		fence + "markdown\n" + strings.TrimRight(issue, "\n") + "\n" + fence + "\n\n" +
		"Its first line is the issue's title. Home directories, user and host names, sample ids, addresses, e-mail addresses, tokens and other secrets are replaced by `~`, `<user>`, `<host>`, `<id>`, `<ip>`, `<email>`, `<token>` and `<secret>`; read it through before you post it.\n"
}

// findingElements are the triggering elements of this fixture's culprit.
func findingElements(rec *Record) []Element {
	if rec.Finding < 0 || rec.Finding >= len(rec.Culprits) {
		return nil
	}
	return rec.Culprits[rec.Finding].Elements
}

// valuesFree reports whether the record says that the failure does not
// depend on the tensors' values: a size finding, or a finding whose culprit
// has no triggering element (the element search set every searched value
// to its neutral one, and the batch still failed).
func valuesFree(rec *Record) bool {
	return rec.Mode == "size" || rec.Finding >= 0 && rec.Finding < len(rec.Culprits) && len(findingElements(rec)) == 0
}

// issueText is the issue in Markdown, before the outer fence.
func issueText(rec *Record, reg *Regression, red *redactor) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	op := builtinOp(rec, reg)
	subject := "the training step"
	switch {
	case op != nil:
		subject = mdCode(opName(op))
	case rec.Step != "":
		subject = "the step " + mdCode(headlineText(shortName(rec.Step), red))
	case rec.Entry != "":
		subject = "the step " + mdCode(headlineText(shortName(rec.Entry), red))
	}
	raises := string(rec.Signature.Family)
	if rec.CPU != nil && rec.CPU.Exception != "" {
		raises = rec.CPU.Exception
	} else if rec.Signature.Exception != "" {
		raises = rec.Signature.Exception
	}
	device := issueDevice(rec)
	w("Title: %s raises %s on %s for a %d-sample batch\n\n", upperFirst(subject), mdCode(red.text(raises)), device, reg.Batch.Samples)

	b.WriteString("### Bug description\n\n")
	w("%s raises %s on %s for the batch below, whose inputs meet its contract as far as reduce can tell. ", upperFirst(subject), mdCode(red.text(raises)), device)
	b.WriteString("It is the minimal case that reduce (a test-case reducer for failing training batches) cut from a failing batch")
	switch {
	case rec.Mode == "size" && rec.Size != nil && rec.Size.SmallestPassing > 0:
		w(": it fails with a batch of %d %s, and %d copies of it pass.\n\n", rec.Size.SmallestFailing, plural(rec.Size.SmallestFailing, "sample"), rec.Size.SmallestPassing)
	case rec.Mode == "size" && rec.Size != nil:
		w(": it fails from batch size %d on, and %d %s pass.\n\n", rec.Size.SmallestFailing, rec.Size.LargestPassing, plural(rec.Size.LargestPassing, "sample"))
	case valuesFree(rec):
		b.WriteString(": it fails whatever the values of its samples, so the cause is a shape, dtype, layout or size rather than a value.\n\n")
	case len(findingElements(rec)) > 0:
		var es []string
		for _, e := range findingElements(rec) {
			v := fmtNumber(e.Value)
			if e.ValueText != "" {
				v = e.ValueText
			}
			es = append(es, mdCode(red.text(e.Tensor)+fmtIndex(e.MinimalIndex)+" = "+red.text(v)))
		}
		w("; the failure needs %s, and no nearby value was found to pass.\n\n", strings.Join(es, ", "))
	default:
		b.WriteString(".\n\n")
	}
	if line := errorLine(rec, reg, red); line != "" {
		b.WriteString(mdBlock(line))
		b.WriteString("\n")
	}

	b.WriteString("### To reproduce\n\n")
	code := reproduce(rec, reg, red)
	code, longest := mdEscape(code, true)
	fence := strings.Repeat("`", max(3, longest+1))
	w("%spython\n%s%s\n\n", fence, code, fence)
	var notes []string
	if op == nil {
		notes = append(notes, "The step is the user's own code, not shown here; the tensors are its minimal input.")
	}
	if deviceOf(rec) != "cpu" {
		notes = append(notes, "Run it with `CUDA_LAUNCH_BLOCKING=1`: without it, a failure on the device is reported asynchronously, at a later call.")
	}
	if len(notes) > 0 {
		w("%s\n\n", strings.Join(notes, " "))
	}

	b.WriteString("### Environment\n\n")
	switch {
	case op != nil:
		w("- op: %s (reduce's built-in op %s)\n", mdCode(opName(op)), mdCode(op.Name))
	case rec.Step != "":
		w("- step: %s (the user's own)\n", mdCode(headlineText(shortName(rec.Step), red)))
	case rec.Entry != "":
		w("- step: %s (the user's own)\n", mdCode(headlineText(shortName(rec.Entry), red)))
	default:
		b.WriteString("- step: the user's own command\n")
	}
	b.WriteString("- inputs:\n")
	state := reg.Batch.StateTensors()
	for _, e := range reg.Batch.Tensors {
		if state[e.Name] {
			continue
		}
		w("  - %s: %s, shape %s, strides %s, offset %d", mdCode(red.text(e.Name)), e.DType, fmtIndex(e.Shape), fmtIndex(e.Strides), e.Offset)
		if e.Tensor.Validate() == nil {
			w(" (%s)", e.Layout())
		}
		b.WriteString("\n")
	}
	env := rec.Environment
	if env.Backend != "" || env.Device != "" {
		w("- replayed by reduce with backend %s on %s", mdCode(red.text(env.Backend)), mdCode(red.text(env.Device)))
		if env.GoOS != "" {
			w(", %s", mdCode(red.text(env.GoOS+"/"+env.GoArch)))
		}
		b.WriteString("\n")
	}
	if v := issueVersions(rec, reg, red); v != "" {
		w("- versions: %s\n", v)
	}
	b.WriteString("\n### Minimal batch\n\n")
	w("- %d %s", reg.Batch.Samples, plural(reg.Batch.Samples, "sample"))
	if rec.Source.Samples > 0 {
		w(", reduced from %d", rec.Source.Samples)
	}
	if rec.Mode != "" {
		w(" (mode %s, %d replays)", mdCode(red.text(rec.Mode)), rec.Replays)
	}
	b.WriteString("\n")
	if rec.Diagnosis != "" {
		w("- reduce's diagnosis: %s\n", mdText(headlineText(rec.Diagnosis, red)))
	}
	if len(state) > 0 {
		w("- the step's recorded state (%d %s: weights, optimizer, RNG) is not included\n", len(state), plural(int64(len(state)), "tensor"))
	}
	return b.String()
}

// upperFirst is s with its first letter in upper case.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// builtinOp is the record's op when kernels knows it, else nil (a step of
// the user's own).
func builtinOp(rec *Record, reg *Regression) *kernels.Op {
	name := rec.Op
	if name == "" {
		name = reg.Batch.Op
	}
	if name == "" || rec.Entry != "" {
		return nil
	}
	op, err := kernels.Lookup(name)
	if err != nil {
		return nil
	}
	return op
}

// callRe splits an op's Signature that is a call: function, parameters.
var callRe = regexp.MustCompile(`^([A-Za-z_][\w.]*)\((.*)\)$`)

// opName is what the user calls: the op's function, or "tensor indexing"
// for an op whose Signature is an expression.
func opName(op *kernels.Op) string {
	if m := callRe.FindStringSubmatch(op.Signature); m != nil {
		return m[1]
	}
	return "tensor indexing"
}

// issueDevice names, for a person, where the snippet fails: on the CPU
// when the record knows the CPU's failure, else where the signature says.
func issueDevice(rec *Record) string {
	if rec.CPU != nil {
		return "CPU"
	}
	switch rec.Signature.Backend {
	case signature.BackendCUDA:
		return "CUDA"
	case signature.BackendHIP:
		return "ROCm"
	case signature.BackendTriton:
		return "CUDA (Triton)"
	case signature.BackendCPU:
		return "CPU"
	}
	return "the device"
}

// deviceOf is the device the snippet builds its tensors on: "cpu" when the
// minimal batch fails there, else "cuda" for a GPU failure (ROCm builds of
// torch call theirs "cuda" too).
func deviceOf(rec *Record) string {
	if rec.CPU != nil {
		return "cpu"
	}
	switch rec.Signature.Backend {
	case signature.BackendCUDA, signature.BackendHIP, signature.BackendTriton:
		return "cuda"
	}
	return "cpu"
}

// excLineRe is a traceback's "Class: message" line.
var excLineRe = regexp.MustCompile(`^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Warning|Exit)|c10::\w+): (.*\S.*)$`)

// errorLine is the failure's first relevant line, redacted: the CPU's
// exception and message, else the recorded traceback's last "Class:
// message" line, else the signature's expression.
func errorLine(rec *Record, reg *Regression, red *redactor) string {
	if rec.CPU != nil && rec.CPU.Message != "" {
		return red.text(rec.CPU.Exception + ": " + firstLine(rec.CPU.Message))
	}
	if reg.Batch.Error != nil {
		lines := strings.Split(red.text(reg.Batch.Error.Text), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if excLineRe.MatchString(lines[i]) {
				return strings.TrimSpace(lines[i])
			}
		}
	}
	if rec.CPU != nil {
		return red.text(rec.CPU.Exception)
	}
	return red.text(rec.Signature.Expression)
}

// issueVersions is versionLine of the redacted versions, less the user's
// git revision, which says nothing to the library's maintainers.
func issueVersions(rec *Record, reg *Regression, red *redactor) string {
	r := Record{Environment: RecordEnv{Torch: red.text(rec.Environment.Torch), Python: red.text(rec.Environment.Python),
		Reduce: red.text(rec.Environment.Reduce)}}
	meta := map[string]string{}
	for _, k := range []string{"torch", "python", "cuda", "hip", "device"} {
		if v := reg.Batch.Meta[k]; v != "" {
			meta[k] = red.text(v)
		}
	}
	return versionLine(&r, &Regression{Batch: &fixtures.Batch{Meta: meta}})
}

// maxSnippetValues bounds the values a tensor of the snippet is written
// with; a bigger one is built from zeros.
const maxSnippetValues = 64

// reproduce is the snippet: torch imported, each tensor of the minimal
// batch built from literals with its dtype, shape and layout, then the
// built-in op's call as reduce_batch.run_op makes it (from the op's
// Signature, kernels' one definition of the call), with the recorded
// attributes as arguments; for a step of the user's own, the tensors only,
// in a dict by name. Only pyQuote literals carry external text.
func reproduce(rec *Record, reg *Regression, red *redactor) string {
	var b strings.Builder
	device := deviceOf(rec)
	op := builtinOp(rec, reg)
	b.WriteString("import torch\n\n")
	if device != "cpu" {
		fmt.Fprintf(&b, "device = %s\n", pyQuote(device))
	}
	zeros := zeroedTensors(rec, reg)
	vars := map[string]string{} // the op's argument name → its variable
	var args map[string]*fixtures.Entry
	if op != nil {
		args = opArgs(op, reg.Batch)
	}
	if args == nil {
		b.WriteString("tensors = {}\n")
	}
	state := reg.Batch.StateTensors()
	for _, e := range reg.Batch.Tensors {
		if state[e.Name] {
			continue
		}
		lhs := ""
		if args != nil {
			for name, a := range args {
				if a == e {
					lhs, vars[name] = name, name
				}
			}
			if lhs == "" {
				continue // not an argument of the op: run_op would refuse it
			}
		} else {
			lhs = "tensors[" + pyQuote(red.text(e.Name)) + "]"
		}
		for _, l := range tensorLines(lhs, e.Tensor, device, zeros) {
			b.WriteString(l + "\n")
		}
	}
	switch {
	case args == nil && op != nil:
		b.WriteString("# The batch does not hold every tensor the op takes: its call is left out.\n")
		return b.String()
	case args == nil:
		b.WriteString("# The failing step is the user's own code: it raises when called on these tensors.\n")
		return b.String()
	}
	call, ok := opCall(op, vars, issueAttrs(rec, reg))
	if !ok {
		b.WriteString("# The op's call needs an attribute the record does not hold.\n")
		return b.String()
	}
	fmt.Fprintf(&b, "out = %s\n", call)
	if device != "cpu" {
		b.WriteString("torch.cuda.synchronize()\n")
	}
	return b.String()
}

// issueAttrs are the op's recorded attributes, as report.md lists them.
func issueAttrs(rec *Record, reg *Regression) map[string]any {
	if len(rec.Attrs) > 0 {
		return rec.Attrs
	}
	return reg.Batch.Attrs
}

// opArgs maps each of op's tensor arguments that the batch holds (by its
// name or an alias) to its entry; nil when a required one is missing.
func opArgs(op *kernels.Op, b *fixtures.Batch) map[string]*fixtures.Entry {
	out := map[string]*fixtures.Entry{}
	for _, ta := range op.Tensors {
		for _, name := range append([]string{ta.Name}, ta.Aliases...) {
			if e := b.Tensor(name); e != nil && e.Tensor != nil {
				out[ta.Name] = e
				break
			}
		}
		if out[ta.Name] == nil && !ta.Optional {
			return nil
		}
	}
	return out
}

// identRe is a Python identifier in an op's Signature.
var identRe = regexp.MustCompile(`[A-Za-z_]\w*`)

// opCall writes op's call from its Signature: tensors by their variables
// (vars, by argument name), positional attributes by their recorded value
// or default, keyword arguments only when recorded. A Signature that is an
// expression (index's) has its attributes replaced by their values. ok is
// false for a required attribute that is not recorded.
func opCall(op *kernels.Op, vars map[string]string, attrs map[string]any) (string, bool) {
	attrOf := map[string]kernels.Attr{}
	for _, a := range op.Attrs {
		attrOf[a.Name] = a
	}
	value := func(name string) (string, bool) {
		if v, ok := attrs[name]; ok {
			return pyValue(v), true
		}
		if a := attrOf[name]; !a.Required {
			return pyValue(a.Default), true
		}
		return "", false
	}
	m := callRe.FindStringSubmatch(op.Signature)
	if m == nil {
		ok := true
		expr := identRe.ReplaceAllStringFunc(op.Signature, func(id string) string {
			if _, isAttr := attrOf[id]; !isAttr {
				return id
			}
			v, found := value(id)
			ok = ok && found
			return v
		})
		return expr, ok
	}
	var parts []string
	for _, p := range strings.Split(m[2], ", ") {
		name, _, keyword := strings.Cut(p, "=")
		if _, isAttr := attrOf[name]; isAttr {
			switch _, recorded := attrs[name]; {
			case keyword && recorded:
				v, _ := value(name)
				parts = append(parts, name+"="+v)
			case !keyword:
				v, found := value(name)
				if !found {
					return "", false
				}
				parts = append(parts, v)
			}
			continue
		}
		switch v, has := vars[name]; {
		case has && keyword:
			parts = append(parts, name+"="+v)
		case has:
			parts = append(parts, v)
		case !keyword:
			parts = append(parts, "None")
		}
	}
	return m[1] + "(" + strings.Join(parts, ", ") + ")", true
}

// pyValue is a Python literal for an attribute's value.
func pyValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return pyQuote(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return strconv.FormatInt(i, 10)
		}
		if f, err := x.Float64(); err == nil || math.IsInf(f, 0) {
			return pyNumber(f)
		}
		return pyQuote(string(x))
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
		return pyNumber(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return pyQuote(fmt.Sprint(v))
}

// zeroedTensors is the set of tensors the snippet builds from zeros: those
// with more than maxSnippetValues elements, when the record says the
// failure does not depend on values (valuesFree) and, for a built-in op
// whose CPU failure is recorded, the kernels confirm (kernelsCPUFailure) that the batch with
// them zeroed fails on the CPU with the same exception and message. The
// other big tensors are zeros too, but the snippet says what their values
// were and that they may matter (zeroedTensors leaves them out).
func zeroedTensors(rec *Record, reg *Regression) map[*kernels.Tensor]bool {
	if !valuesFree(rec) {
		return nil
	}
	out := map[*kernels.Tensor]bool{}
	zb := *reg.Batch
	zb.Tensors = nil
	for _, e := range reg.Batch.Tensors {
		if e.Tensor != nil && e.Numel() > maxSnippetValues && e.Tensor.Validate() == nil {
			out[e.Tensor] = true
			z := *e
			z.Tensor = &kernels.Tensor{DType: e.DType, Shape: e.Shape, Strides: e.Strides, Offset: e.Offset, Data: make([]byte, len(e.Data))}
			e = &z
		}
		zb.Tensors = append(zb.Tensors, e)
	}
	if len(out) == 0 || rec.CPU == nil || builtinOp(rec, reg) == nil {
		return out
	}
	if cpu := kernelsCPUFailure(&zb); cpu == nil || *cpu != *rec.CPU {
		return nil
	}
	return out
}

// kernelsCPUFailure is the failure the built-in kernels give b on the CPU,
// nil when it passes or cannot run. It checks a claim of the snippet
// (that zeros in place of the recorded values fail the same way), not an
// expectation of the fixture: those come from the replays.
func kernelsCPUFailure(b *fixtures.Batch) *CPUFailure {
	op, err := kernels.Lookup(b.Op)
	if err != nil {
		return nil
	}
	res, err := op.RunOptions(kernels.Options{Mode: kernels.ModeCPU}, b.Named(), b.Attrs)
	if err != nil || res.Failure == nil {
		return nil
	}
	return &CPUFailure{Exception: res.Failure.Exception, Message: res.Failure.Message}
}

// tensorLines builds t as lhs: from its values (at most maxSnippetValues),
// or zeros; with its exact strides and offset (as_strided over a storage
// holding the recorded one's elements) when they are not a fresh tensor's.
// zeros holds the tensors whose values do not matter.
func tensorLines(lhs string, t *kernels.Tensor, device string, zeros map[*kernels.Tensor]bool) []string {
	if err := t.Validate(); err != nil {
		return []string{"# A tensor whose layout is not valid cannot be rebuilt here."}
	}
	opts := "dtype=torch." + t.DType.String()
	if device != "cpu" {
		opts += ", device=device"
	}
	plain := t.Offset == 0 && slices.Equal(t.Strides, kernels.ContiguousStrides(t.Shape))
	storage := t.Offset + t.Extent() // the elements as_strided reaches
	view := fmt.Sprintf(".as_strided(%s, %s, %d)", pyTuple(t.Shape), pyTuple(t.Strides), t.Offset)
	reshape := ".reshape(" + pyTuple(t.Shape) + ")"
	if len(t.Shape) == 1 {
		reshape = ""
	}
	if n := t.Numel(); n > maxSnippetValues {
		var lines []string
		if zeros[t] {
			lines = append(lines, fmt.Sprintf("# %d values, which do not matter: zeros fail the same way", n))
		} else {
			lines = append(lines, fmt.Sprintf("# %d values stand in for the recorded ones (%s), which may matter", n, summarize(t)))
		}
		if plain {
			return append(lines, fmt.Sprintf("%s = torch.zeros(%s, %s)", lhs, pyTuple(t.Shape), opts))
		}
		return append(lines, fmt.Sprintf("%s = torch.zeros(%d, %s)%s", lhs, storage, opts, view))
	}
	var idx, vals []string
	t.Each(func(_ []int64, e int64) {
		idx = append(idx, strconv.FormatInt(e, 10))
		vals = append(vals, pyElement(t, e))
	})
	switch {
	case plain:
		return []string{fmt.Sprintf("%s = torch.tensor(%s, %s)%s", lhs, pyList(vals), opts, reshape)}
	case storage <= maxSnippetValues:
		all := make([]string, storage)
		for e := range storage {
			all[e] = pyElement(t, e)
		}
		return []string{fmt.Sprintf("%s = torch.tensor(%s, %s)%s", lhs, pyList(all), opts, view)}
	}
	// A long storage: zeros, with the view's elements put where they lie.
	lines := []string{fmt.Sprintf("%s = torch.zeros(%d, %s)", lhs, storage, opts)}
	if len(vals) > 0 {
		idxOpts := ""
		if device != "cpu" {
			idxOpts = ", device=device"
		}
		lines = append(lines, fmt.Sprintf("%s[torch.tensor(%s%s)] = torch.tensor(%s, %s)", lhs, pyList(idx), idxOpts, pyList(vals), opts))
	}
	return append(lines, lhs+" = "+lhs+view)
}

// pyElement is storage element e of t as a Python literal of its kind.
func pyElement(t *kernels.Tensor, e int64) string {
	switch {
	case t.DType == kernels.Bool:
		if t.LoadInt(e) != 0 {
			return "True"
		}
		return "False"
	case t.DType.IsFloat():
		return pyNumber(t.LoadFloat(e))
	}
	return strconv.FormatInt(t.LoadInt(e), 10)
}

// pyList writes a list literal, ten items a line when it is long.
func pyList(items []string) string {
	const perLine = 10
	if len(items) <= perLine {
		return "[" + strings.Join(items, ", ") + "]"
	}
	var b strings.Builder
	b.WriteString("[\n")
	for i := 0; i < len(items); i += perLine {
		b.WriteString("    " + strings.Join(items[i:min(i+perLine, len(items))], ", ") + ",\n")
	}
	b.WriteString("]")
	return b.String()
}

// pyTuple writes a tuple of integers: (), (3,), (2, 3).
func pyTuple(xs []int64) string {
	if len(xs) == 1 {
		return "(" + strconv.FormatInt(xs[0], 10) + ",)"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// summarize says in a few words what values t holds: the smallest and
// largest finite ones, and how many are not finite.
func summarize(t *kernels.Tensor) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	nonFinite := 0
	t.Each(func(_ []int64, e int64) {
		v := t.LoadFloat(e)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			nonFinite++
			return
		}
		lo, hi = min(lo, v), max(hi, v)
	})
	s := "none finite"
	if lo <= hi {
		s = "from " + fmtNumber(lo) + " to " + fmtNumber(hi)
	}
	if nonFinite > 0 {
		s += fmt.Sprintf(", %d not finite", nonFinite)
	}
	return s
}
