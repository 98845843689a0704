package signature

import (
	"strings"
	"testing"
)

// The runtime's line is cut to 200 bytes: a panic's value may be any size.
func TestGoRuntimeDeathCut(t *testing.T) {
	long := "panic: " + strings.Repeat("x", 1000)
	got := GoRuntimeDeath([]byte(long + "\n\ngoroutine 1 [running]:\nmain.main()\n"))
	if got != long[:200] {
		t.Errorf("GoRuntimeDeath of a %d-byte panic = %d bytes %q, want its first 200", len(long), len(got), got)
	}
}
