package reduction

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHarnessLine: the line in which reduce's Python side said why the
// recording cannot be replayed makes the confirmation's error bad input
// (exit 2); a crash of reduce's own, or the machine's output and device,
// says none.
func TestHarnessLine(t *testing.T) {
	for _, c := range []struct{ stderr, want string }{
		{"Traceback...\nreduce_batch: harness: cannot rebuild M as cls(**hparams): x\n", "cannot rebuild M as cls(**hparams): x"},
		{"reduce: harness: the program ended before d.D:8 gave its first batch: no candidate ran\n", "the program ended before d.D:8 gave its first batch: no candidate ran"},
		{"reduce_batch: harness: child 12 cannot open its output: EPIPE\n", ""},
		{"reduce_batch: harness: cannot initialize device cuda\n", ""},
		{"Traceback (most recent call last):\nKeyError: 'x'\n", ""},
	} {
		assert.Equal(t, c.want, harnessLine(c.stderr), c.stderr)
	}
}
