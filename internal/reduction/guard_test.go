package reduction_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/signature"
)

// fixtureDirs are the directories a run wrote under out.
func fixtureDirs(t *testing.T, out string) []string {
	t.Helper()
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

// whileRunning calls fn while a reduction of b into out is held in its
// first replay, and returns fn's error once that reduction has ended well.
func whileRunning(t *testing.T, b *fixtures.Batch, path, out string, fn func() error) error {
	t.Helper()
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := newStep(func(c *fixtures.Batch) signature.Signature {
		once.Do(func() { close(inside); <-release })
		return kernelStep(c)
	})
	done := make(chan error, 1)
	go func() {
		_, err := reduce(t, b, path, first, reduction.Options{Out: out})
		done <- err
	}()
	<-inside
	err := fn()
	close(release)
	require.NoError(t, <-done)
	return err
}

// flipLastByte writes the file's last byte over, in place: its inode,
// size and name kept.
func flipLastByte(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{data[len(data)-1] ^ 1}, int64(len(data)-1))
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// A second run on the --out a first one holds stops before any replay,
// naming the first's pid; once the first ends, --out is free again and
// holds no lock file.
func TestOutIsLocked(t *testing.T) {
	b, path := crossEntropy(t, 8, map[int]int64{5: 4})
	out := t.TempDir()
	second := newStep(kernelStep)
	err := whileRunning(t, b, path, out, func() error {
		_, err := reduce(t, b, path, second, reduction.Options{Out: out})
		return err
	})
	require.ErrorIs(t, err, reduction.ErrUsage)
	assert.Contains(t, err.Error(), fmt.Sprintf("--out %s is in use by reduce (pid %d)", out, os.Getpid()))
	assert.Zero(t, second.total, "the second run replayed nothing")
	assert.NoFileExists(t, filepath.Join(out, ".reduce.lock"))
	_, err = reduce(t, b, path, newStep(kernelStep), reduction.Options{Out: out, MaxFindings: 1})
	require.NoError(t, err, "--out is free once the first run ended")
}

// Every --out that cannot be written is the same bad usage, whether it
// exists or not.
func TestOutNotWritableIsUsage(t *testing.T) {
	b, path := crossEntropy(t, 4, map[int]int64{1: 4})
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, out := range []string{"/proc", "/proc/reduce-out", filepath.Join(file, "out")} {
		be := newStep(kernelStep)
		_, err := reduce(t, b, path, be, reduction.Options{Out: out})
		require.ErrorIs(t, err, reduction.ErrUsage, out)
		assert.Contains(t, err.Error(), "--out "+out+": ")
		assert.Contains(t, err.Error(), "give a directory reduce can create and write")
		assert.Zero(t, be.total)
	}
}

// The recorded file written over in place during the run stops it: no
// fixture is built on answers about another batch, and the answer given
// after the change is not journaled.
func TestSourceWrittenOverStops(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	out := t.TempDir()
	calls := 0
	be := newStep(func(c *fixtures.Batch) signature.Signature {
		if calls++; calls == 4 {
			flipLastByte(t, path)
		}
		return kernelStep(c)
	})
	_, err := reduce(t, b, path, be, reduction.Options{Out: out})
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+" was written over while it was being reduced")
	assert.False(t, errors.Is(err, reduction.ErrUsage) || errors.Is(err, reduction.ErrNoRepro))
	assert.Empty(t, fixtureDirs(t, out), "no fixture")
	journals, _ := filepath.Glob(filepath.Join(out, ".reduce-*.journal"))
	require.Len(t, journals, 1, "the answers before the change are kept for --resume")
	data, err := os.ReadFile(journals[0])
	require.NoError(t, err)
	assert.Equal(t, 3+1, strings.Count(string(data), "\n"), "the header and the 3 answers before the change")
}

// A file renamed over the recorded one changes nothing the replays read:
// the run goes on.
func TestSourceRenamedOverGoesOn(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	calls := 0
	be := newStep(func(c *fixtures.Batch) signature.Signature {
		if calls++; calls == 4 {
			other := path + ".new"
			require.NoError(t, os.WriteFile(other, []byte("another file"), 0o644))
			require.NoError(t, os.Rename(other, path))
		}
		return kernelStep(c)
	})
	res, err := reduce(t, b, path, be, reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{11}, res.Findings[0].Indices)
}

// Replays that break in the harness, one after another, stop the run.
func TestInfraRunStops(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	out := t.TempDir()
	calls := 0
	be := newStep(func(c *fixtures.Batch) signature.Signature {
		if calls++; calls <= 2 {
			return kernelStep(c) // the confirmation
		}
		return signature.Signature{Family: signature.FamilyInfra, Expression: "harness failure"}
	})
	_, err := reduce(t, b, path, be, reduction.Options{Out: out})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "5 replays in a row broke in the harness")
	assert.Equal(t, 2+5, be.total)
	assert.Empty(t, fixtureDirs(t, out))
}

// A change of the recorded file's metadata alone (chmod: its ctime, with
// its size, mtime and bytes kept) is no write: the run goes on.
func TestSourceChmodGoesOn(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	calls := 0
	be := newStep(func(c *fixtures.Batch) signature.Signature {
		if calls++; calls == 4 {
			require.NoError(t, os.Chmod(path, 0o444))
		}
		return kernelStep(c)
	})
	res, err := reduce(t, b, path, be, reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{11}, res.Findings[0].Indices)
}

// With -j N, N replays may break in the harness at one moment: the run
// stops at maxInfraRun+N-1 in a row, not before.
func TestInfraRunScalesWithJobs(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	calls := 0
	var mu sync.Mutex
	be := newStep(func(c *fixtures.Batch) signature.Signature {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls <= 2 {
			return kernelStep(c)
		}
		return signature.Signature{Family: signature.FamilyInfra, Expression: "harness failure"}
	})
	_, err := reduce(t, b, path, be, reduction.Options{Jobs: 3})
	require.Error(t, err)
	m := regexp.MustCompile(`(\d+) replays in a row broke in the harness`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, err.Error())
	n, _ := strconv.Atoi(m[1])
	assert.GreaterOrEqual(t, n, 7, "5 in a row, plus the 2 more that 3 jobs may break at one moment")
	assert.GreaterOrEqual(t, be.total, 2+7)
}
