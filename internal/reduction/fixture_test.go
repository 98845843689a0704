package reduction_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
)

// TestLooserMatchFixtureExpectsItsOwnClass: at --match family the minimal
// batch of a step reproduced with another class than the recording's
// (the whole batch raised RuntimeError, the culprit alone IndexError); its
// fixture's test, which runs the minimal batch on the CPU, must expect the
// class that batch raised, not the recording's.
func TestLooserMatchFixtureExpectsItsOwnClass(t *testing.T) {
	b := labelBatch(8)
	b.Step = &fixtures.Step{Module: "train", Qualname: "step"}
	b.Tensor("label").Tensor.StoreInt(5, 9)
	step := func(b *fixtures.Batch) signature.Signature {
		label := b.Tensor("label").Tensor
		for i := int64(0); i < b.Samples; i++ {
			if label.LoadInt(i) == 9 {
				if b.Samples > 2 {
					return raise("RuntimeError: Target 9 is out of bounds.")
				}
				return raise("IndexError: Target 9 is out of bounds.")
			}
		}
		return pass
	}
	path := recordStep(t, b, step)
	be := newStep(step)
	be.settings.Step = "train:step"
	res, err := reduce(t, b, path, be, reduction.Options{Match: signature.MatchFamily})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	assert.Equal(t, []int{5}, res.Findings[0].Indices)
	data, err := os.ReadFile(filepath.Join(res.Fixtures[0], "fixture.json"))
	require.NoError(t, err)
	var rec regress.Record
	require.NoError(t, json.Unmarshal(data, &rec))
	require.NotNil(t, rec.CPU)
	assert.Equal(t, "IndexError", rec.CPU.Exception)
	assert.Equal(t, "IndexError", rec.Signature.Exception)
}

// TestCollectorWhereThePluginIs: where the package is installed (its
// plugin collects the fixtures) nothing of Python is written into Out,
// and Plugin is asked only once there are fixtures to collect; where it
// is not, the conftest.py and the package's zip it checks and imports;
// with the plugin, a conftest.py of reduce's of another version is
// rewritten (it would collect the fixtures a second time), and the
// current one kept.
func TestCollectorWhereThePluginIs(t *testing.T) {
	b, path := crossEntropy(t, 8, map[int]int64{3: 4})
	asked := 0
	installed := func(v bool) func() bool { return func() bool { asked++; return v } }
	conftest := func(out string) string { return filepath.Join(out, regress.CollectorFile) }
	zip := func(out string) string { return filepath.Join(out, regress.VendoredDir, replay.ZipName) }

	out := t.TempDir()
	_, err := reduce(t, b, path, newStep(kernelStep), reduction.Options{Out: out, Plugin: installed(true)})
	require.NoError(t, err)
	assert.Equal(t, 1, asked)
	assert.NoFileExists(t, conftest(out))
	assert.NoDirExists(t, filepath.Join(out, regress.VendoredDir))

	out = t.TempDir()
	_, err = reduce(t, b, path, newStep(kernelStep), reduction.Options{Out: out, Plugin: installed(false)})
	require.NoError(t, err)
	data, err := os.ReadFile(conftest(out))
	require.NoError(t, err)
	assert.Equal(t, string(replay.CollectorModule), string(data))
	data, err = os.ReadFile(zip(out))
	require.NoError(t, err)
	assert.Equal(t, replay.PackageZip(), data)

	// An older reduce's collector and zip, with the plugin installed: the
	// collector rewritten, the older zip gone.
	require.NoError(t, os.WriteFile(conftest(out), []byte(regress.CollectorMark+"0.1.0: old\n"), 0o644))
	older := filepath.Join(out, regress.VendoredDir, "reduce_batch-0.1.0.zip")
	require.NoError(t, os.WriteFile(older, []byte("an older package"), 0o644))
	_, err = reduce(t, b, path, newStep(kernelStep), reduction.Options{Out: out, Plugin: installed(true)})
	require.NoError(t, err)
	data, err = os.ReadFile(conftest(out))
	require.NoError(t, err)
	assert.Equal(t, string(replay.CollectorModule), string(data))
	assert.NoFileExists(t, older)
	assert.FileExists(t, zip(out))
}
