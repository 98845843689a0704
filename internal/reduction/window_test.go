package reduction_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/signature"
	"reduce/kernels"
)

// windowBatch is a failing step's batch of n samples {x} recorded with a
// window of k earlier steps of n samples {x}, x of normal values but for
// the elements of bad (step, row), which hold 1e12; the failing batch's
// own row 3 too when last is set.
func windowBatch(t *testing.T, k, n int, bad [][2]int, last bool) (*fixtures.Batch, string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(k), uint64(n)))
	x := func(name string, step int) *fixtures.Entry {
		tt := &kernels.Tensor{DType: kernels.Float32, Shape: []int64{int64(n), 2}, Strides: []int64{2, 1}, Data: make([]byte, n*2*4)}
		for i := range int64(2 * n) {
			tt.StoreFloat(i, rng.NormFloat64())
		}
		for _, b := range bad {
			if b[0] == step {
				tt.StoreFloat(int64(2*b[1]), 1e12)
			}
		}
		return &fixtures.Entry{Name: name, BatchDim: fixtures.Dim(0), Tensor: tt}
	}
	dict := func(name string) *fixtures.Node {
		return &fixtures.Node{Kind: fixtures.NodeDict, Keys: []json.RawMessage{json.RawMessage(`"x"`)},
			Items: []*fixtures.Node{{Kind: fixtures.NodeTensor, Name: name}}}
	}
	main := x("x", -1)
	if last {
		main.StoreFloat(6, 1e12)
	}
	b := &fixtures.Batch{Samples: int64(n), Tensors: []*fixtures.Entry{main}, Structure: dict("x"),
		Step: &fixtures.Step{Module: "train", Qualname: "step"}, Window: &fixtures.Window{Failed: int64(k + 3), Start: 3},
		Error: &fixtures.Failure{Text: "FloatingPointError: loss is inf", Exception: "FloatingPointError"}}
	for s := range k {
		name := fmt.Sprintf("window.%d.x", s)
		b.Tensors = append(b.Tensors, x(name, s))
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("s%d-%d", s, i)
		}
		b.Window.Steps = append(b.Window.Steps, &fixtures.WindowStep{Index: int64(s + 3), Samples: int64(n), SampleIDs: ids, Structure: dict(name)})
	}
	require.NoError(t, b.Validate())
	path := filepath.Join(t.TempDir(), "crash.bin")
	require.NoError(t, fixtures.Write(path, b))
	return b, path
}

// poisonStep is a training step whose weights a huge value in an earlier
// step's sample blows up: the failing step's loss is inf when any step
// replayed before it, or its own batch, holds one.
func poisonStep(b *fixtures.Batch) signature.Signature {
	if huge(b) > 0 && b.Samples > 0 {
		return raise("FloatingPointError: loss is inf")
	}
	return pass
}

// huge counts the elements of b's tensors past 1e6.
func huge(b *fixtures.Batch) int {
	n := 0
	for _, e := range b.Tensors {
		e.Each(func(_ []int64, s int64) {
			if math.Abs(e.LoadFloat(s)) > 1e6 {
				n++
			}
		})
	}
	return n
}

// TestWindowReplayBound: one culprit among k earlier steps of n samples
// is found, with its step and its element, the failing step's batch kept
// whole as the witness, in at most log2(k n) + 10 replays.
func TestWindowReplayBound(t *testing.T) {
	for _, tc := range []struct{ k, n, step, row int }{
		{4, 8, 1, 5}, {8, 16, 6, 0}, {14, 16, 12, 5}, {16, 64, 3, 41}, {7, 256, 0, 255},
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.k, tc.n), func(t *testing.T) {
			b, path := windowBatch(t, tc.k, tc.n, [][2]int{{tc.step, tc.row}}, false)
			be := newStep(poisonStep)
			res, err := reduce(t, b, path, be, reduction.Options{})
			require.NoError(t, err)
			assert.Equal(t, reduction.ModeWindow, res.Mode, res.ModeReason)
			require.Len(t, res.Findings, 1)
			w := res.Findings[0].Window
			require.NotNil(t, w)
			require.Len(t, w.Steps, 1)
			s := w.Steps[0]
			assert.Equal(t, int64(tc.step+3), s.Index)
			assert.Equal(t, int64(tc.k-tc.step), s.Before, "steps before the failing one")
			assert.Equal(t, []int{tc.row}, s.Rows)
			assert.Equal(t, []string{fmt.Sprintf("s%d-%d", tc.step, tc.row)}, s.IDs)
			require.Len(t, s.Elements, 1)
			assert.Equal(t, "x", s.Elements[0].Tensor)
			assert.Equal(t, []int64{int64(tc.row), 0}, s.Elements[0].Index)
			assert.Equal(t, float64(float32(1e12)), s.Elements[0].Value)
			assert.Len(t, res.Findings[0].Indices, tc.n, "the failing step's batch whole")
			bound := int(math.Ceil(math.Log2(float64(tc.k*tc.n)))) + 10
			assert.LessOrEqual(t, res.Replays, bound, "replays by phase: %v", res.Phases)
			t.Logf("%d steps of %d samples: %d replays (bound %d): %v", tc.k, tc.n, res.Replays, bound, res.Phases)
			orig := contentKey(t, b)
			assert.Equal(t, 2, be.replays[orig], "the original: the two confirmations")
			for key, n := range be.replays {
				if key != orig {
					assert.Equal(t, 1, n, "batch %s replayed twice", key[:12])
				}
			}
		})
	}
}

// TestWindowLastBatchAlone: a failing step's batch that fails alone from
// the window's start is reduced as one recorded without a window, and the
// reduction says so.
func TestWindowLastBatchAlone(t *testing.T) {
	b, path := windowBatch(t, 6, 16, nil, true)
	res, err := reduce(t, b, path, newStep(poisonStep), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeSamples, res.Mode)
	assert.Contains(t, res.ModeReason, "the failing step's batch alone, replayed from the state at the window's start (step 3), fails: the cause is in that batch, not in the 6 steps recorded before it")
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	assert.Nil(t, f.Window)
	assert.Equal(t, []int{3}, f.Indices)
	require.Len(t, f.Elements, 1)
	assert.Equal(t, []int64{3, 0}, f.Elements[0].Index)
	// The fixture's batch is the recorded one without the window.
	assert.Nil(t, f.Batch.Window)
	assert.Len(t, f.Batch.Tensors, 1)
}

// TestWindowTwoCulprits: two samples of two steps, both needed (the
// weights blow up only when both ran), are found together.
func TestWindowTwoCulprits(t *testing.T) {
	b, path := windowBatch(t, 8, 16, [][2]int{{2, 9}, {5, 1}}, false)
	both := func(b *fixtures.Batch) signature.Signature {
		if huge(b) == 2 && b.Samples > 0 {
			return raise("FloatingPointError: loss is inf")
		}
		return pass
	}
	res, err := reduce(t, b, path, newStep(both), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	w := res.Findings[0].Window
	require.NotNil(t, w)
	require.Len(t, w.Steps, 2)
	assert.Equal(t, int64(5), w.Steps[0].Index)
	assert.Equal(t, []int{9}, w.Steps[0].Rows)
	assert.Equal(t, int64(8), w.Steps[1].Index)
	assert.Equal(t, []int{1}, w.Steps[1].Rows)
	assert.Contains(t, res.Findings[0].Batch.Tensors[0].Name, "x")
}

// TestWindowCompanion: a step of one culprit sample alone raises another
// failure (a loss over no sample left): the sample kept beside it is named
// as the step's companion, not as a cause.
func TestWindowCompanion(t *testing.T) {
	b, path := windowBatch(t, 6, 16, [][2]int{{2, 7}}, false)
	step := func(b *fixtures.Batch) signature.Signature {
		if b.Window != nil { // none left: the failing step's batch alone
			for k, s := range b.Window.Steps {
				// The culprit alone in its step: no labelled sample left.
				if e := b.Tensor(fmt.Sprintf("window.%d.x", k)); s.Samples == 1 && e.LoadFloat(e.Offset) > 1e6 {
					return raise("ValueError: no labelled sample left")
				}
			}
		}
		return poisonStep(b)
	}
	res, err := reduce(t, b, path, newStep(step), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	w := res.Findings[0].Window
	require.NotNil(t, w)
	require.Len(t, w.Steps, 1)
	s := w.Steps[0]
	require.Len(t, s.Rows, 2)
	assert.Contains(t, s.Rows, 7)
	require.Len(t, s.Companions, 1)
	assert.NotEqual(t, 7, s.Companions[0])
	assert.Equal(t, []int{7}, s.Causes())
	var text bytes.Buffer
	res.WriteText(&text)
	assert.Contains(t, text.String(), "cause: sample s2-7 (step 5, 4 steps before the failing step 9; with s2-")
	assert.Contains(t, text.String(), "which the step needs to run: without it the step raised another failure)")
}
