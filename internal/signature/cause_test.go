package signature

import (
	"testing"
)

// TestClassCauses: every class that Class gives (a device assert's, a host
// check's, a file's, a family's) has a cause, so that a class added
// without one fails here; and the causes of the checks the regression
// report decides by are the ones it relies on.
func TestClassCauses(t *testing.T) {
	classes := map[string]bool{ClassHostOOM: true, ClassDeviceOOM: true, ClassNaNAnomaly: true, ClassNonFinite: true}
	for _, r := range deviceClassRules {
		if r.class != "" {
			classes[r.class] = true
		}
		for _, c := range r.classes {
			classes[c] = true
		}
	}
	for _, r := range hostClassRules {
		classes[r.class] = true
	}
	for _, cs := range fileClasses {
		for _, c := range cs {
			classes[c] = true
		}
	}
	for _, f := range families {
		if f.class != "" {
			classes[f.class] = true
		}
	}
	for c := range classes {
		if _, ok := classCauses[c]; !ok {
			t.Errorf("class %s has no cause in classCauses", c)
		}
	}
	for c := range classCauses {
		if !classes[c] {
			t.Errorf("classCauses names %s, which Class never gives", c)
		}
	}
	for _, r := range rules {
		if classCauses[r.Class] != CauseRule {
			t.Errorf("rule of %s: its class's cause is %q, want %q", r.Class, classCauses[r.Class], CauseRule)
		}
	}
	for c, cause := range classCauses {
		if _, ok := RuleOf(c); cause == CauseRule && !ok {
			t.Errorf("class %s is a rule's, and RuleOf has none", c)
		}
	}
}

// TestCauseCorpus: the causes of real texts, under both torches.
func TestCauseCorpus(t *testing.T) {
	cases := loadCorpus(t)
	for name, want := range map[string]Cause{
		"cpu_multi_target": CauseArgument, "cpu_multi_target_torch2": CauseArgument,
		"step_target_rank2": CauseArgument, "step_target_rank2_torch2": CauseArgument,
		"cpu_batch_size": CauseArgument, "cpu_batch_size_torch2": CauseArgument, "cpu_dtype": CauseArgument,
		"step_batchnorm_one": CauseRule, "step_batchnorm_one_torch2": CauseRule,
		"cpu_nll_target_4": CauseValue, "cpu_nll_target_4_torch2": CauseValue, "cuda_nll_loss_2d_aten": CauseValue,
		"cpu_alloc_oom": CauseResource, "illegal_address": CauseFault, "cpu_segfault": CauseFault,
		"cpu_abort":      CauseFault,
		"step_own_raise": CauseUnknown, "step_own_raise_torch2": CauseUnknown,
		"step_all_ignored": CauseUnknown, "step_call_view": CauseUnknown, "cpu_nan_anomaly": CauseUnknown,
	} {
		c := cases[name]
		if c == nil {
			t.Errorf("no corpus file %s", name)
			continue
		}
		sig := Parse(c.stderr, c.exit)
		if got := sig.Cause(); got != want {
			t.Errorf("%s: %s: cause %q, want %q", name, sig, got, want)
		}
	}
	// An internal assert is a fault, and no class: two of them are two
	// failures.
	a := Signature{Family: FamilyHostCheck, Expression: `RuntimeError: t.is_contiguous() INTERNAL ASSERT FAILED at "aten/src/ATen/native/A.cpp":N, please report a bug to PyTorch.`}
	b := Signature{Family: FamilyHostCheck, Expression: `RuntimeError: false INTERNAL ASSERT FAILED at "aten/src/ATen/native/B.cpp":N, please report a bug to PyTorch.`}
	if a.Cause() != CauseFault || b.Cause() != CauseFault {
		t.Errorf("internal asserts: causes %q, %q, want %q", a.Cause(), b.Cause(), CauseFault)
	}
	if (Judge{Want: b, Level: MatchStrict}).Rule(a).Outcome == Reproduces {
		t.Error("two internal asserts reproduce each other")
	}
}

// TestRaisedAt: where the exception of a real traceback was raised, for
// every corpus file that says (the replays of steps under both torches: a
// raise of the step's own, torch's functional check, a call into torch's
// C++ from the step), and for the texts of scripts run with -c, whose
// frames quote no source: torch's frame is torch's, the user's says
// nothing.
func TestRaisedAt(t *testing.T) {
	cases := loadCorpus(t)
	n := 0
	for _, name := range sortedNames(cases) {
		c := cases[name]
		got := RaisedAt(c.stderr)
		if c.raised == nil {
			continue
		}
		n++
		if got == nil || *got != *c.raised {
			t.Errorf("%s: RaisedAt = %+v, want %+v", name, got, *c.raised)
		}
	}
	if n < 10 {
		t.Errorf("%d corpus files say where their exception was raised, want the 10 of the steps at least", n)
	}
	for name, want := range map[string]*Raise{
		"cpu_multi_target":        {By: RaisedByTorch, File: "torch/nn/functional.py", Function: "nll_loss"},
		"cpu_multi_target_torch2": {By: RaisedByTorch, File: "torch/nn/functional.py", Function: "nll_loss"},
		"cpu_nan_loss_check":      nil, // File "<string>": no source line, no verdict
		"cpu_segfault":            nil,
	} {
		got := RaisedAt(cases[name].stderr)
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("%s: RaisedAt = %+v, want %+v", name, got, want)
		}
	}
	for text, want := range map[string]*Raise{
		// A chained exception: the last traceback's innermost frame.
		"Traceback (most recent call last):\n  File \"/srv/app/train.py\", line 3, in f\n    raise KeyError(k)\nKeyError: 'x'\n\n" +
			"During handling of the above exception, another exception occurred:\n\n" +
			"Traceback (most recent call last):\n  File \"/srv/app/train.py\", line 9, in step\n    assert ok, \"bad batch\"\nAssertionError: bad batch\n": {
			By: RaisedByCode, File: "train.py", Function: "step"},
		// Another installed package; the standard library; Windows paths.
		"Traceback (most recent call last):\n  File \"/venv/lib/python3.11/site-packages/transformers/trainer.py\", line 9, in step\n    raise ValueError(x)\nValueError: x\n": {
			By: RaisedByLibrary, File: "trainer.py", Function: "step"},
		"Traceback (most recent call last):\n  File \"/usr/lib/python3.11/json/decoder.py\", line 355, in raw_decode\n    raise JSONDecodeError(\"x\", s, err.value) from None\njson.decoder.JSONDecodeError: x\n": {
			By: RaisedByLibrary, File: "decoder.py", Function: "raw_decode"},
		"Traceback (most recent call last):\n  File \"C:\\Users\\me\\venv\\Lib\\site-packages\\torch\\nn\\functional.py\", line 3, in cross_entropy\n    return torch._C._nn.cross_entropy_loss(x)\nRuntimeError: x\n": {
			By: RaisedByTorch, File: "torch/nn/functional.py", Function: "cross_entropy"},
		// reduce's package, in the zip a replay imports it from, or a folder:
		// the harness, never the step's own raise.
		"Traceback (most recent call last):\n  File \"/tmp/reduce-torch-1/reduce_batch-0.21.0.zip/reduce_batch/steps.py\", line 9, in resolve_step\n    raise HarnessError(x)\nreduce_batch.errors.HarnessError: x\n": {
			By: RaisedByLibrary, File: "reduce_batch/steps.py", Function: "resolve_step"},
		"Traceback (most recent call last):\n  File \"/srv/reduce/replay/python/reduce_batch/ops.py\", line 9, in run_op\n    raise ValueError(x)\nValueError: x\n": {
			By: RaisedByLibrary, File: "reduce_batch/ops.py", Function: "run_op"},
		// A source checkout of torch, outside site-packages.
		"Traceback (most recent call last):\n  File \"/home/me/pytorch/torch/nn/modules/batchnorm.py\", line 3, in forward\n    raise ValueError(x)\nValueError: x\n": {
			By: RaisedByTorch, File: "torch/nn/modules/batchnorm.py", Function: "forward"},
		// No traceback; a frame without an exception line.
		"RuntimeError: CUDA error: device-side assert triggered\n":                                  nil,
		"Traceback (most recent call last):\n  File \"/srv/train.py\", line 3, in f\n    raise X\n": nil,
	} {
		got := RaisedAt([]byte(text))
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("RaisedAt(%q) = %+v, want %+v", text, got, want)
		}
	}
}
