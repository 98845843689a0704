package signature

import "testing"

// TestMatchFileOnlyAsserts: two device asserts that name only the file
// that reported them (THC's "device-side assert triggered at FILE:LINE")
// match strictly when the file is one (whatever its directory, line or
// extension: a HIP build's .hip), and not when the files differ: the
// index kernels' assert is not nll_loss's.
func TestMatchFileOnlyAsserts(t *testing.T) {
	thc := func(path string) Signature {
		return Recorded("Traceback (most recent call last):\n  File \"train.py\", line 7, in <module>\n    loss.item()\n" +
			"RuntimeError: cuda runtime error (59) : device-side assert triggered at " + path + "\n")
	}
	nll := thc("/pytorch/aten/src/THCUNN/generic/SpatialClassNLLCriterion.cu:111")
	index := thc("/pytorch/aten/src/THC/generic/THCTensorIndex.cu:434")
	for _, s := range []Signature{nll, index} {
		if s.Family != FamilyDeviceAssert || s.Expression != "" || s.Kernel != "" || s.File == "" {
			t.Fatalf("want a device assert that names only its file, got %+v", s)
		}
	}
	hip := nll
	hip.File, hip.Backend = "SpatialClassNLLCriterion.hip", BackendHIP
	for _, c := range []struct {
		name      string
		got, want Signature
		match     bool
	}{
		{"same file", nll, nll, true},
		{"same file, other path and line", thc("/opt/build/THCUNN/generic/SpatialClassNLLCriterion.cu:95"), nll, true},
		{"same stem, HIP build", hip, nll, true},
		{"other file", index, nll, false},
		{"other file, reversed", nll, index, false},
	} {
		if got := c.got.Matches(c.want, MatchStrict); got != c.match {
			t.Errorf("%s: %+v.Matches(%+v, strict) = %v, want %v", c.name, c.got, c.want, got, c.match)
		}
		if !c.got.Matches(c.want, MatchFamily) {
			t.Errorf("%s: one family, no match at the family level", c.name)
		}
	}
}
