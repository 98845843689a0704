package reduction_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
)

// tracedStep is a step of the user's own, as its process prints it: a
// label of 9 is out of bounds, raised by the step's own check; a label of
// 7 without one of 9 is another failure, raised by the same step. Every
// failure comes with its traceback, which names the user's code.
func tracedStep() (step, func(*fixtures.Batch) []byte) {
	text := func(b *fixtures.Batch) []byte {
		label := b.Tensor("label").Tensor
		line := ""
		for i := int64(0); i < b.Samples; i++ {
			switch label.LoadInt(i) {
			case 9:
				line = "IndexError: Target 9 is out of bounds."
			case 7:
				if line == "" {
					line = "ValueError: label 7 is reserved"
				}
			}
		}
		if line == "" {
			return nil
		}
		return []byte("Traceback (most recent call last):\n" +
			"  File \"/home/alice/proj/train.py\", line 42, in step\n" +
			"    raise " + strings.SplitN(line, ":", 2)[0] + "(msg)\n" + line + "\n")
	}
	st := func(b *fixtures.Batch) signature.Signature {
		out := text(b)
		if out == nil {
			return pass
		}
		return signature.Parse(out, signature.ExitInfo{Code: 1})
	}
	return st, text
}

// fixtureFiles are the files of the fixture directory dir, by name.
func fixtureFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = string(data)
	}
	return files
}

// TestResumeSameFixture: a reduction interrupted and resumed writes the
// fixture an uninterrupted one writes, byte for byte, under the same
// name: what the fixture takes from a replay's output beyond its
// signature (where the step raised, the failures' messages) comes back
// from the journal.
func TestResumeSameFixture(t *testing.T) {
	b := labelBatch(16)
	b.Step = &fixtures.Step{Module: "train", Qualname: "step"}
	b.Tensor("label").Tensor.StoreInt(11, 9) // the culprit
	b.Tensor("label").Tensor.StoreInt(3, 7)  // another failure, met on the way
	st, text := tracedStep()
	path := recordStep(t, b, st)
	newBackend := func() *stepBackend {
		be := newStep(st)
		be.stderr, be.settings.Step = text, "train:step"
		return be
	}
	out := t.TempDir()
	o := reduction.Options{Source: path, Out: out}

	want, err := run(context.Background(), b, newBackend(), o)
	require.NoError(t, err)
	require.Len(t, want.Fixtures, 1)
	wantFiles := fixtureFiles(t, want.Fixtures[0])
	var rec regress.Record
	require.NoError(t, json.Unmarshal([]byte(wantFiles[regress.RecordFile]), &rec))
	require.NotNil(t, rec.Raised, "the step's traceback says who raised")
	assert.Equal(t, signature.RaisedByCode, rec.Raised.By)
	require.NotEmpty(t, want.OtherFailures)
	assert.Contains(t, wantFiles[regress.ReportFile], "ValueError: label 7 is reserved", "the other failure's message")
	// The same place, so that report.md names the same directory.
	require.NoError(t, os.RemoveAll(out))

	// During the confirmation, during the search, and after the minimal
	// batch failed (the resumed run replays it again before it writes).
	checks := 0
	for _, at := range []int{2, 3, 4, 5, 6, 8, 10, 11} {
		t.Run(fmt.Sprintf("interrupted at replay %d", at), func(t *testing.T) {
			t.Cleanup(func() { os.RemoveAll(out) })
			ctx, cancel := context.WithCancel(context.Background())
			first := newBackend()
			first.cancel, first.cancelAt = cancel, at
			_, err := run(ctx, b, first, o)
			require.ErrorIs(t, err, reduction.ErrInterrupted)

			resumed := o
			resumed.Resume = true
			var mu sync.Mutex
			var logs []string
			resumed.Events = func(ev reduction.Event) {
				if l, ok := ev.(*reduction.Log); ok {
					mu.Lock()
					logs = append(logs, l.Text)
					mu.Unlock()
				}
			}
			again := newBackend()
			got, err := run(context.Background(), b, again, resumed)
			require.NoError(t, err)
			// The minimal batch, where the journal answered it, is
			// replayed once more before the fixture is written, uncounted.
			checked := 0
			for _, l := range logs {
				if strings.Contains(l, "fails in a replay of this run too") {
					checked++
				}
			}
			assert.Equal(t, got.Replays+checked, again.total)
			checks += checked
			require.Positive(t, got.Resumed, "answers were taken from the journal")
			require.Len(t, got.Fixtures, 1)
			assert.Equal(t, filepath.Base(want.Fixtures[0]), filepath.Base(got.Fixtures[0]), "the same fixture")
			gotFiles := fixtureFiles(t, got.Fixtures[0])
			for name, data := range wantFiles {
				assert.Equal(t, data, gotFiles[name], name)
			}
			assert.Len(t, gotFiles, len(wantFiles))
		})
	}
	assert.Positive(t, checks, "some run resumed after the minimal batch failed")
}

// TestResumeJournalDoesNotHold: a journal edited so that every answer
// fails is refused once the minimal batch it yields passes when replayed
// in this run; no fixture is written.
func TestResumeJournalDoesNotHold(t *testing.T) {
	b, path := crossEntropy(t, 64, map[int]int64{37: 4})
	out := t.TempDir()
	o := reduction.Options{Source: path, Out: out}
	ctx, cancel := context.WithCancel(context.Background())
	first := newStep(kernelStep)
	first.cancel, first.cancelAt = cancel, 9
	_, err := run(ctx, b, first, o)
	require.ErrorIs(t, err, reduction.ErrInterrupted)

	// Every answer says the recorded failure.
	jpath := filepath.Join(out, ".reduce-"+sha(t, path)[:12]+".journal")
	data, err := os.ReadFile(jpath)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var head map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &head))
	for i := 1; i < len(lines); i++ {
		var e map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(lines[i]), &e))
		e["signature"] = head["want"]
		delete(e, "report")
		line, err := json.Marshal(e)
		require.NoError(t, err)
		lines[i] = string(line)
	}
	require.NoError(t, os.WriteFile(jpath, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	before, err := os.ReadDir(out)
	require.NoError(t, err)

	o.Resume = true
	res, err := run(context.Background(), b, newStep(kernelStep), o)
	require.ErrorIs(t, err, reduction.ErrResume)
	assert.Nil(t, res)
	assert.Contains(t, err.Error(), jpath, "names the journal")
	assert.Contains(t, err.Error(), "run without --resume", "and the fix")
	after, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Equal(t, names(before), names(after), "no fixture written")
}

func names(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestResumeInterruptedBeforeReplay: a resumed run interrupted before it
// replayed anything writes no fixture from the journal's answers alone:
// its minimal batch failed in no replay of this run.
func TestResumeInterruptedBeforeReplay(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	out := t.TempDir()
	o := reduction.Options{Source: path, Out: out}
	interrupted := func(at int) (*reduction.Result, error) {
		ctx, cancel := context.WithCancel(context.Background())
		be := newStep(kernelStep)
		be.cancel, be.cancelAt = cancel, at
		return run(ctx, b, be, o)
	}
	// The first run's minimal batch failed before it was interrupted.
	first, err := interrupted(11)
	require.ErrorIs(t, err, reduction.ErrInterrupted)
	require.NotNil(t, first)
	before, err := os.ReadDir(out)
	require.NoError(t, err)

	o.Resume = true
	res, err := interrupted(1)
	require.ErrorIs(t, err, reduction.ErrInterrupted)
	assert.Nil(t, res)
	assert.Contains(t, err.Error(), "nothing written: continue with --resume")
	after, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Equal(t, names(before), names(after), "no fixture written")
}
