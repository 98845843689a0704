package reduction_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/signature"
)

// TestJobsSameFixture: with -j 2 and -j 4, replays that end in random
// orders and a different failure met by some candidates, a reduction
// writes what -j 1 writes, byte for byte, and tells the same replays,
// phases and other failures: what an answer made ahead teaches takes
// effect only when a search uses it, and Result.Ahead counts the others.
func TestJobsSameFixture(t *testing.T) {
	b, path := crossEntropy(t, 256, map[int]int64{173: 4, 40: 4})
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	step := func(c *fixtures.Batch) signature.Signature {
		mu.Lock()
		d := time.Duration(rng.IntN(2000)) * time.Microsecond
		mu.Unlock()
		time.Sleep(d)
		// A small batch holding sample s170, next to a culprit, fails otherwise.
		if c.Samples <= 64 && slices.Contains(c.SampleIDs, "s170") {
			return raise("RuntimeError: s170 is broken")
		}
		return kernelStep(c)
	}
	var base *reduction.Result
	var baseFiles map[string]string
	for _, jobs := range []int{1, 2, 4} {
		out := t.TempDir()
		res, err := reduce(t, b, path, newStep(step), reduction.Options{Jobs: jobs, Out: out})
		require.NoError(t, err, "-j %d", jobs)
		files := outFiles(t, out)
		if base == nil {
			base, baseFiles = res, files
			require.Len(t, res.Findings, 2)
			require.NotEmpty(t, res.OtherFailures, "the test needs another failure met")
			assert.Zero(t, res.Ahead, "-j 1 makes nothing ahead")
			continue
		}
		assert.Equal(t, baseFiles, files, "-j %d: the fixtures", jobs)
		assert.Equal(t, base.Replays, res.Replays, "-j %d", jobs)
		assert.Equal(t, base.Phases, res.Phases, "-j %d", jobs)
		assert.Equal(t, base.OtherFailures, res.OtherFailures, "-j %d", jobs)
		assert.Positive(t, res.Ahead, "-j %d: the searches asked ahead", jobs)
		assert.Equal(t, jobs, res.Jobs)
	}
}

// outFiles are the files a reduction wrote under out, by path, their
// contents with out itself left out; the journal and the lock are the
// run's, not the fixtures'.
func outFiles(t *testing.T, out string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(out, p)
		files[rel] = strings.ReplaceAll(string(data), out, "OUT")
		return err
	}))
	return files
}

// TestConfirmJudgedInOrder: the confirmation's trials run at once with -j
// N, yet each is judged by the failure kept when its turn comes: without a
// recorded failure, the first trial's is kept and a second trial that
// fails otherwise is another failure, not a reproduction.
func TestConfirmJudgedInOrder(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	b.Error = nil
	var mu sync.Mutex
	calls := 0
	step := func(c *fixtures.Batch) signature.Signature {
		mu.Lock()
		calls++
		second := calls == 2
		mu.Unlock()
		if second && c.Samples == 16 {
			return raise("RuntimeError: the second replay breaks")
		}
		return kernelStep(c)
	}
	res, err := reduce(t, b, path, newStep(step), reduction.Options{Confirm: 2})
	require.NoError(t, err)
	assert.Equal(t, "IndexError", res.Want.Exception)
	require.Len(t, res.OtherFailures, 1)
	assert.Equal(t, "RuntimeError", res.OtherFailures[0].Signature.Exception)
}
