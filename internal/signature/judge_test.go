package signature

import "testing"

// reproduces is Rule's match of a failure at a level, for the tests of its
// classes: want is a failure here.
func reproduces(got, want Signature, level MatchLevel) bool {
	return Judge{Want: want, Level: level}.Rule(got).Outcome == Reproduces
}

// TestJudge: the rulings every caller relies on: the reduction (a recorded
// failure, refined by the first replay's assert; none recorded), `reduce
// replay` (the same, and a batch that must pass) and the regression writer.
func TestJudge(t *testing.T) {
	nll := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Kernel: "nll_loss2d_forward_kernel", Expression: "t >= 0 && t < n_classes"}
	idx := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Kernel: "indexSelectLargeIndex", Expression: "srcIndex < srcSelectDimSize"}
	bare := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Exception: "RuntimeError"}
	nllFile := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, File: "SpatialClassNLLCriterion.cu"}
	cpuNLL := Signature{Family: FamilyHostCheck, Backend: BackendCPU, Kernel: "nll_loss", Expression: "IndexError: Target N is out of bounds."}
	pass := Signature{Family: FamilyPass}
	timeout := Signature{Family: FamilyTimeout}
	const refined = `the recording names no assert (only "device-side assert triggered"): the replay's assert is one it allows`
	tests := []struct {
		name string
		j    Judge
		got  Signature
		want Outcome
		note string
	}{
		{"same check, another build", Judge{Want: nll}, cpuNLL, Reproduces, ""},
		{"another check", Judge{Want: nll}, idx, OtherFailure, ""},
		{"family level", Judge{Want: nll, Level: MatchFamily}, idx, Reproduces, ""},
		{"any level", Judge{Want: nll, Level: MatchAny}, Signature{Family: FamilyOOM}, Reproduces, ""},
		{"a pass", Judge{Want: nll}, pass, Passes, ""},
		{"a timeout is no reproduction", Judge{Want: nll, Level: MatchAny}, timeout, OtherFailure, ""},
		{"recorded bare assert, a named one", Judge{Want: bare, Recorded: true}, idx, Reproduces, refined},
		{"a kept bare assert is no recording", Judge{Want: bare}, idx, OtherFailure, ""},
		{"recorded bare assert, a bare one", Judge{Want: bare, Recorded: true}, bare, Reproduces, ""},
		{"recorded file, its assert", Judge{Want: nllFile, Recorded: true}, nll, Reproduces, ""},
		{"recorded file, another file's assert", Judge{Want: nllFile, Recorded: true}, idx, OtherFailure, ""},
		{"nothing recorded: any failure", Judge{}, cpuNLL, Reproduces, ""},
		{"nothing recorded: a pass", Judge{}, pass, Passes, ""},
		{"nothing recorded: a timeout", Judge{}, timeout, OtherFailure, ""},
		{"must pass: a pass", Judge{Want: pass}, pass, Reproduces, ""},
		{"must pass: a failure", Judge{Want: pass, Level: MatchAny}, nll, OtherFailure, ""},
	}
	for _, tc := range tests {
		r := tc.j.Rule(tc.got)
		if r.Outcome != tc.want || r.Note != tc.note {
			t.Errorf("%s: Rule(%s) = %s %q, want %s %q", tc.name, tc.got, r.Outcome, r.Note, tc.want, tc.note)
		}
	}
}
