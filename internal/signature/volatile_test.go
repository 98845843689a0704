package signature

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestVolatileValues: a message that quotes a value of the batch is one
// failure whichever value it quotes, when the judge knows the values; a
// quoted word that is no value of the batch (a key the code names) still
// tells two failures apart, and a known class is left as it is.
func TestVolatileValues(t *testing.T) {
	parse := func(line string) Signature {
		return Parse([]byte("Traceback (most recent call last):\n  File \"s.py\", line 3, in step\n"+line+"\n"), ExitInfo{Code: 1})
	}
	want := parse("ValueError: duplicate clip_id 'c-7f3a' in batch")
	probe := parse("ValueError: duplicate clip_id 'reduce-fresh-2' in batch")
	other := parse("ValueError: duplicate clip_id 'c-0000' in batch")
	j := Judge{Want: want}
	assert.Equal(t, OtherFailure, j.Rule(probe).Outcome, "without the batch's values, another value is another message")
	j.Volatile = VolatileValues([]string{"c-7f3a", "c-0000", "reduce-fresh-1"})
	assert.Equal(t, Reproduces, j.Rule(probe).Outcome)
	assert.Equal(t, Reproduces, j.Rule(other).Outcome)
	assert.Equal(t, Reproduces, j.Rule(parse(`ValueError: duplicate clip_id "c-0000" in batch`)).Outcome, "double quotes")
	assert.Equal(t, OtherFailure, j.Rule(parse("ValueError: missing clip_id 'c-0000' in batch")).Outcome, "another message")
	keyed := Judge{Want: parse("KeyError: 'labels'"), Volatile: VolatileValues([]string{"c-7f3a"})}
	assert.Equal(t, OtherFailure, keyed.Rule(parse("KeyError: 'input_ids'")).Outcome, "a key the code names is no value of the batch")
	// Unquoted, as a word of its own.
	w := Judge{Want: parse("ValueError: duplicate clip_id c-7f3a"), Volatile: VolatileValues([]string{"c-7f3a", "c-0000"})}
	assert.Equal(t, Reproduces, w.Rule(parse("ValueError: duplicate clip_id c-0000")).Outcome)
	assert.Equal(t, OtherFailure, w.Rule(parse("ValueError: duplicate clip_id c-0000x")).Outcome, "a longer word is another value")
}

// TestMessage: the line that states the failure, as printed.
func TestMessage(t *testing.T) {
	stderr := []byte("Traceback (most recent call last):\n  File \"s.py\", line 3, in step\n    raise ValueError(x)\nValueError: duplicate clip_id 'c-7f3a' in batch\n")
	s := Parse(stderr, ExitInfo{Code: 1})
	assert.Equal(t, "ValueError: duplicate clip_id 'c-7f3a' in batch", Message(stderr, s))
	assert.Equal(t, "", Message([]byte("Segmentation fault\n"), Signature{Family: FamilyCrashSignal}))
	dev := []byte("/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.\nRuntimeError: CUDA error: device-side assert triggered\n")
	ds := Parse(dev, ExitInfo{Code: 1})
	assert.Contains(t, Message(dev, ds), "Assertion `t >= 0 && t < n_classes` failed.")
}

// TestGrouped: failures that differ only in a number are one line.
func TestGrouped(t *testing.T) {
	a := Signature{Family: FamilyHostCheck, Expression: "RuntimeError: mat1 and mat2 shapes cannot be multiplied (Nx1 and Nx5)"}
	b := a
	b.Expression = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (Nx2 and Nx5)"
	c := a
	c.Expression = "RuntimeError: other"
	assert.Equal(t, Grouped(a), Grouped(b))
	assert.NotEqual(t, Grouped(a), Grouped(c))
}
