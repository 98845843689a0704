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
