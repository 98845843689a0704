package reduction_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/signature"
)

// bareAssert is what the recorder keeps of a CUDA device assert: the
// exception's text; the assert line went to the process's output.
const bareAssert = "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n    print(loss.item())\n" +
	"RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"

// recordText writes b with the recorded error text and returns its path.
func recordText(t *testing.T, b *fixtures.Batch, text string) string {
	t.Helper()
	b.Error = &fixtures.Failure{Text: text}
	path := filepath.Join(t.TempDir(), "crash.bin")
	require.NoError(t, fixtures.Write(path, b))
	return path
}

// TestConfirmRefinesBareAssert: a recording that names no assert is
// reduced against the first replay's assert, and the result, the log and
// the Confirmed event say so.
func TestConfirmRefinesBareAssert(t *testing.T) {
	b, _ := crossEntropy(t, 16, map[int]int64{11: 4})
	path := recordText(t, b, bareAssert)
	var mu sync.Mutex
	var logs []string
	var confirmed *reduction.Confirmed
	res, err := reduce(t, b, path, newStep(cudaStep), reduction.Options{Events: func(ev reduction.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *reduction.Log:
			logs = append(logs, e.Text)
		case *reduction.Confirmed:
			confirmed = e
		}
	}})
	require.NoError(t, err)
	require.NotNil(t, res.Recorded)
	assert.Equal(t, signature.FamilyDeviceAssert, res.Recorded.Family)
	assert.Empty(t, res.Recorded.Expression, "the recording names no assert")
	assert.Equal(t, "t >= 0 && t < n_classes", res.Want.Expression, "the replay's assert is kept")
	assert.Equal(t, signature.ClassNLLTargetBounds, res.Want.Class())
	assert.Contains(t, res.WantNote, `names no assert (only "device-side assert triggered")`)
	assert.Contains(t, res.WantNote, "the first replay's assert is kept")
	require.NotNil(t, confirmed)
	assert.Equal(t, res.WantNote, confirmed.Note)
	assert.Equal(t, confirmed.Replays, confirmed.Reproduced)
	assert.Contains(t, logs, "confirm: "+res.WantNote)
	require.Len(t, res.Findings, 1)
	assert.Equal(t, []int{11}, res.Findings[0].Indices)
}

// TestConfirmFileOnlyRecording: a recording that names only a file is
// reproduced by the asserts that file raises and by nothing else.
func TestConfirmFileOnlyRecording(t *testing.T) {
	const thc = "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n" +
		"RuntimeError: cuda runtime error (59) : device-side assert triggered at /pytorch/aten/src/THCUNN/generic/ClassNLLCriterion.cu:59\n"
	b, _ := crossEntropy(t, 8, map[int]int64{3: 9})
	res, err := reduce(t, b, recordText(t, b, thc), newStep(cudaStep), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, signature.ClassNLLTargetBounds, res.Want.Class())
	assert.Equal(t, []int{3}, res.Findings[0].Indices)

	// The same recording's file is index_select's: the nll assert of the
	// replays is another failure.
	const index = "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n" +
		"RuntimeError: cuda runtime error (59) : device-side assert triggered at /pytorch/aten/src/THC/generic/THCTensorIndex.cu:434\n"
	b, _ = crossEntropy(t, 8, map[int]int64{3: 9})
	_, err = reduce(t, b, recordText(t, b, index), newStep(cudaStep), reduction.Options{})
	require.ErrorIs(t, err, reduction.ErrNoRepro)
}

// TestConfirmUnknownKindStays: when the replays name no assert either, the
// failure kept names none, and the result says what it matches.
func TestConfirmUnknownKindStays(t *testing.T) {
	b, _ := crossEntropy(t, 8, map[int]int64{5: 7})
	path := recordText(t, b, bareAssert)
	step := func(c *fixtures.Batch) signature.Signature {
		if s := cudaStep(c); s.Family != signature.FamilyDeviceAssert {
			return s
		}
		return signature.Recorded(bareAssert)
	}
	res, err := reduce(t, b, path, newStep(step), reduction.Options{})
	require.NoError(t, err)
	assert.Empty(t, res.Want.Expression)
	assert.Contains(t, res.WantNote, "it reproduces only replays that name none either")
	assert.Equal(t, []int{5}, res.Findings[0].Indices)
}
