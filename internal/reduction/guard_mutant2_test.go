package reduction_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/signature"
)

// A lock file left by a run that was killed (a longer pid in it) is taken
// over: the pid a second run names is the holder's alone.
func TestOutLockLeftByKilledRun(t *testing.T) {
	b, path := crossEntropy(t, 8, map[int]int64{5: 4})
	out := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(out, ".reduce.lock"), []byte("4000000000000000\n"), 0o644))
	err := whileRunning(t, b, path, out, func() error {
		_, err := reduce(t, b, path, newStep(kernelStep), reduction.Options{Out: out})
		return err
	})
	require.ErrorIs(t, err, reduction.ErrUsage)
	assert.Contains(t, err.Error(), fmt.Sprintf("is in use by reduce (pid %d): ", os.Getpid()))
}

// The recorded file written over in place with its size and modification
// time put back (a copy tool that keeps times) still stops the run: its
// change time says it was written.
func TestSourceTimesPutBackStops(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	fi, err := os.Stat(path)
	require.NoError(t, err)
	calls := 0
	be := newStep(func(c *fixtures.Batch) signature.Signature {
		if calls++; calls == 4 {
			flipLastByte(t, path)
			require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
			now, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, fi.Size(), now.Size())
			require.True(t, fi.ModTime().Equal(now.ModTime()))
		}
		return kernelStep(c)
	})
	out := t.TempDir()
	_, err = reduce(t, b, path, be, reduction.Options{Out: out})
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+" was written over while it was being reduced")
	assert.Empty(t, fixtureDirs(t, out))
}

// Replays that break in the harness now and then, never maxInfraRun in a
// row, do not stop the run: a good answer starts the count again.
func TestInfraNotInARowGoesOn(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	calls, infra := 0, 0
	be := newStep(func(c *fixtures.Batch) signature.Signature {
		if calls++; calls > 2 && calls%3 != 0 {
			infra++
			return signature.Signature{Family: signature.FamilyInfra, Expression: "harness failure"}
		}
		return kernelStep(c)
	})
	_, err := reduce(t, b, path, be, reduction.Options{})
	require.NoError(t, err)
	assert.Greater(t, infra, 5, "more answers broke than maxInfraRun, two at most in a row")
}
