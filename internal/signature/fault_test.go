package signature

import "testing"

// The go worker's own death, as the Go runtime prints it, is told from a
// step's text; Parse makes a Fault infra whatever the text and the status.
func TestGoRuntimeDeath(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"runtime: out of memory: cannot allocate 2147483648-byte block (3833856 in use)\nfatal error: out of memory\n\ngoroutine 22 gp=0x1 m=3 mp=0x2 [running]:\nruntime.throw({0x81fd2e, 0xd})\n",
			"runtime: out of memory: cannot allocate 2147483648-byte block (3833856 in use)"},
		{"fatal error: runtime: out of memory\n\nruntime stack:\nruntime.throw(...)\n", "fatal error: runtime: out of memory"},
		{"panic: runtime error: index out of range [5] with length 3\n\ngoroutine 1 [running]:\nmain.main()\n", "panic: runtime error: index out of range [5] with length 3"},
		// A panic without its goroutine dump is text, not the runtime's.
		{"panic: boom\n", ""},
		{"Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: CUDA out of memory.\n", ""},
		{"", ""},
	} {
		if got := GoRuntimeDeath([]byte(tc.text)); got != tc.want {
			t.Errorf("GoRuntimeDeath(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
	const text = "fatal error: runtime: out of memory\n"
	if s := Parse([]byte(text), ExitInfo{Code: 2}); s.Family == FamilyInfra {
		t.Errorf("without a fault, exit 2 reads as the text: %v", s)
	}
	for _, e := range []ExitInfo{{Code: 2, Fault: "worker fault: the go worker died"}, {Code: 0, Fault: "worker fault: exited 0 before the step returned"},
		{Code: -1, Signal: 11, Fault: "worker fault: x"}} {
		if s := Parse([]byte(text), e); s.Family != FamilyInfra || s.Expression != e.Fault || Failing(s) {
			t.Errorf("Parse with fault %+v = %v: want infra", e, s)
		}
	}
}
