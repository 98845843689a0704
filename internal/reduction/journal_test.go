package reduction

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/signature"
	"reduce/replay"
)

func TestJournal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", ".reduce-x.journal")
	head := journalHeader{Source: "abc", Settings: replay.Settings{Kind: replay.KindGo, Device: "cpu"}, Trials: 1,
		Match: signature.MatchStrict, Want: signature.Signature{Family: signature.FamilyHostCheck}}
	j, _, err := openJournal(path, head, false)
	require.NoError(t, err)
	fail := signature.Signature{Family: signature.FamilyHostCheck, Expression: "IndexError: Target N is out of bounds."}
	pass := signature.Signature{Family: signature.FamilyPass}
	// A built-in op's replay reports its outputs, or its failure on the CPU.
	outputs := &replay.Report{Outputs: []replay.Output{{Name: "output", DType: "float32", Shape: []int64{}, Values: []float64{1.5}, Sum: 1.5, SumAbs: 1.5}}}
	cpu := &replay.Report{CPU: &replay.CPUFailure{Exception: "IndexError", Message: "Target 4 is out of bounds."}}
	// A failing replay's line and where it raised, which the fixtures
	// read from its output, are kept with it.
	said := printed{Message: "IndexError: Target 4 is out of bounds.", Raised: &signature.Raise{By: signature.RaisedByCode, File: "train.py", Function: "step"}}
	j.record("{0-3}", 0, fail, cpu, said)
	j.record("{0-1}", 0, pass, outputs, printed{})
	j.record("{0-1}", 1, fail, nil, printed{})
	_, rep, ok := j.answerAt("{0-1}", 0)
	require.True(t, ok)
	assert.Equal(t, outputs, rep, "a report is its trial's")
	_, rep, _ = j.answerAt("{0-1}", 1)
	assert.Nil(t, rep)
	// Answers of this run are found again, by key and trial, and are not
	// counted as resumed.
	a, ok, fromFile := j.lookup("{0-3}", 0)
	require.True(t, ok)
	assert.False(t, fromFile)
	assert.Equal(t, fail, a.sig)
	assert.False(t, j.resumedAt("{0-3}", 0), "this run's answer")
	a, _, _ = j.lookup("{0-1}", 1)
	assert.Equal(t, fail, a.sig, "each trial has its own answer")
	_, ok, fromFile = j.lookup("{0-3}", 1)
	assert.False(t, ok, "trial 1 was never answered")
	assert.False(t, fromFile, "nothing of this run is resumed")
	j.close(false)

	t.Run("resume", func(t *testing.T) {
		j, _, err := openJournal(path, head, true)
		require.NoError(t, err)
		defer j.close(false)
		resumed := 0
		lookup := func(key string, trial int) (signature.Signature, bool, bool) {
			a, ok, fromFile := j.lookup(key, trial)
			if fromFile {
				resumed++
			}
			return a.sig, ok, fromFile
		}
		s, ok, fromFile := lookup("{0-3}", 0)
		require.True(t, ok)
		assert.True(t, fromFile)
		assert.Equal(t, fail, s)
		_, _, fromFile = lookup("{0-3}", 0)
		assert.False(t, fromFile, "counted once")
		a, _, _ := j.lookup("{0-3}", 0)
		assert.Equal(t, said, a.printed, "what the replay printed is journaled with its answer")
		assert.True(t, j.resumedAt("{0-3}", 0), "an earlier run's answer, used or not")
		s, _, _ = lookup("{0-1}", 1)
		assert.Equal(t, fail, s, "the answer of trial 1 maps back to trial 1")
		s, _, _ = lookup("{0-1}", 0)
		assert.Equal(t, pass, s)
		_, rep, _ := j.answerAt("{0-1}", 0)
		assert.Equal(t, outputs, rep, "the report is journaled with its answer")
		_, rep, _ = j.answerAt("{0-3}", 0)
		assert.Equal(t, cpu, rep)
		_, _, ok = j.answerAt("{2-3}", 0)
		assert.False(t, ok)
		_, ok, _ = lookup("{2-3}", 0)
		assert.False(t, ok)
		assert.Equal(t, 3, resumed)
	})
	t.Run("another reduction", func(t *testing.T) {
		for name, edit := range map[string]func(*journalHeader){
			"match":         func(h *journalHeader) { h.Match = signature.MatchFamily },
			"trials":        func(h *journalHeader) { h.Trials = 2 },
			"source":        func(h *journalHeader) { h.Source = "def" },
			"want":          func(h *journalHeader) { h.Want = signature.Signature{} },
			"backend":       func(h *journalHeader) { h.Settings.Kind = replay.KindTorch },
			"device":        func(h *journalHeader) { h.Settings.Device = "cuda" },
			"device memory": func(h *journalHeader) { h.Settings.DeviceMemory = 1 << 20 },
		} {
			other := head
			edit(&other)
			_, _, err := openJournal(path, other, true)
			require.Error(t, err, name)
			assert.Contains(t, err.Error(), "written for another reduction", name)
			assert.True(t, errors.Is(err, ErrResume), name)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, _, err := openJournal(filepath.Join(dir, "none"), head, true)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no journal at")
		assert.True(t, errors.Is(err, ErrResume))
	})
	t.Run("last line cut short", func(t *testing.T) {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		cut := filepath.Join(dir, "cut.journal")
		require.NoError(t, os.WriteFile(cut, append(data, []byte(`{"key":"{1}","trial":0,"sig`)...), 0o644))
		j, _, err := openJournal(cut, head, true)
		require.NoError(t, err)
		j.record("{1}", 0, pass, nil, printed{})
		j.close(false)
		// The cut line was dropped, so the new answer is a line of its own.
		j, _, err = openJournal(cut, head, true)
		require.NoError(t, err)
		_, ok, _ := j.lookup("{1}", 0)
		assert.True(t, ok)
		j.close(true)
		assert.NoFileExists(t, cut)
	})
	t.Run("damaged line", func(t *testing.T) {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		lines := strings.SplitAfter(string(data), "\n")
		lines[1] = "garbage\n"
		bad := filepath.Join(dir, "bad.journal")
		require.NoError(t, os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o644))
		_, _, err = openJournal(bad, head, true)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "line 2 is not an answer")
	})
}
