package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/signature"
	"reduce/shrink"
)

func TestJournal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", ".reduce-x.journal")
	head := journalHeader{Source: "abc", Backend: "go", Match: "strict", Want: signature.Signature{Family: signature.FamilyHostCheck}}
	j, _, err := openJournal(path, head, false)
	require.NoError(t, err)
	fail := signature.Signature{Family: signature.FamilyHostCheck, Expression: "IndexError: Target N is out of bounds."}
	j.record("samples:{0-3}#0", shrink.Fail, fail)
	j.record("samples:{0-1}#0", shrink.Pass, signature.Signature{Family: signature.FamilyPass})
	// Answers of this run are found again, and are not counted as resumed.
	e, ok, fromFile := j.lookup("samples:{0-3}#0")
	require.True(t, ok)
	assert.False(t, fromFile)
	assert.Equal(t, shrink.Fail, e.Outcome)
	assert.Equal(t, 0, j.Resumed())
	j.close(false)

	t.Run("resume", func(t *testing.T) {
		j, _, err := openJournal(path, head, true)
		require.NoError(t, err)
		defer j.close(false)
		e, ok, fromFile := j.lookup("samples:{0-3}#0")
		require.True(t, ok)
		assert.True(t, fromFile)
		assert.Equal(t, fail, e.Signature)
		_, _, fromFile = j.lookup("samples:{0-3}#0")
		assert.False(t, fromFile, "counted once")
		_, ok, _ = j.lookup("samples:{2-3}#0")
		assert.False(t, ok)
		assert.Equal(t, 1, j.Resumed())
	})
	t.Run("another reduction", func(t *testing.T) {
		other := head
		other.Match = "family"
		_, _, err := openJournal(path, other, true)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "written for another reduction")
		assert.Equal(t, ExitUsage, exitCode(err))
	})
	t.Run("missing", func(t *testing.T) {
		_, _, err := openJournal(filepath.Join(dir, "none"), head, true)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no journal at")
	})
	t.Run("last line cut short", func(t *testing.T) {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		cut := filepath.Join(dir, "cut.journal")
		require.NoError(t, os.WriteFile(cut, append(data, []byte(`{"key":"samples:{1}#0","outc`)...), 0o644))
		j, _, err := openJournal(cut, head, true)
		require.NoError(t, err)
		j.record("samples:{1}#0", shrink.Pass, signature.Signature{Family: signature.FamilyPass})
		j.close(false)
		// The cut line was dropped, so the new answer is a line of its own.
		j, _, err = openJournal(cut, head, true)
		require.NoError(t, err)
		_, ok, _ := j.lookup("samples:{1}#0")
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

func TestReporterPlain(t *testing.T) {
	var out, errw bytes.Buffer
	p := newReporter(&out, &errw, true, false)
	p.setPhase("samples", 8)
	p.replayed(4, true)
	p.logf("samples: culprit set %v", []int{2})
	p.close()
	// Not a terminal: plain lines, no bar, and JSON events on stdout.
	assert.Equal(t, "reduce: samples: culprit set [2]\n", errw.String())
	assert.Equal(t, `{"event":"phase","phase":"samples","units":8}`+"\n", out.String())

	out.Reset()
	errw.Reset()
	q := newReporter(&out, &errw, false, true)
	q.logf("hidden")
	q.event(map[string]any{"event": "x"})
	assert.Empty(t, errw.String())
	assert.Empty(t, out.String())
}
