package reduction_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/signature"
	"reduce/kernels"
)

// TestRelationAlongLastBatchDim: the keys are [1, N], batched along their
// last dim; two samples share one. Their units differ along the batch dim
// (1), not along dim 0, and the relation is found between them.
func TestRelationAlongLastBatchDim(t *testing.T) {
	b := keyBatch(64)
	key := b.Tensor("doc_key")
	key.Tensor = &kernels.Tensor{DType: key.DType, Shape: []int64{1, 64}, Strides: []int64{64, 1}, Data: key.Data}
	key.BatchDim = fixtures.Dim(1)
	key.Tensor.StoreInt(50, 10005)
	path := recordStep(t, b, uniqueKeys)
	res, err := reduce(t, b, path, newStep(uniqueKeys), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	assert.Equal(t, []int{5, 50}, f.Indices)
	require.NotNil(t, f.Relation, res.ModeReason)
	assert.Equal(t, "doc_key[0, 5] == doc_key[0, 50]", f.Relation.Text)
	require.NotNil(t, f.Boundary)
	assert.Equal(t, pass, uniqueKeys(f.Boundary))
}

// TestRelationFreshValuesInsideRange: the keys index a table that holds
// exactly their range (0, 2, ..., 2n-2 into 2n-1 rows), so a value above
// or below every key is out of range, a failure of its own. The fresh
// values come from the gaps between the keys (the odd numbers), and the
// relation of the duplicate pair is found.
func TestRelationFreshValuesInsideRange(t *testing.T) {
	const n = 32
	b := keyBatch(n)
	key := b.Tensor("doc_key").Tensor
	for i := int64(0); i < n; i++ {
		key.StoreInt(i, 2*i)
	}
	key.StoreInt(20, 2*7)
	lookup := func(c *fixtures.Batch) signature.Signature {
		k := c.Tensor("doc_key").Tensor
		seen := map[int64]bool{}
		bad, dup := false, false
		k.Each(func(_ []int64, e int64) {
			v := k.LoadInt(e)
			bad = bad || v < 0 || v >= 2*n-1
			dup = dup || seen[v]
			seen[v] = true
		})
		switch {
		case bad:
			return raise("IndexError: index out of range in self")
		case dup:
			return raise("ValueError: duplicate doc_key in the batch")
		}
		return pass
	}
	path := recordStep(t, b, lookup)
	res, err := reduce(t, b, path, newStep(lookup), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	assert.Equal(t, []int{7, 20}, f.Indices)
	require.NotNil(t, f.Relation, res.ModeReason)
	assert.Equal(t, "doc_key[7] == doc_key[20]", f.Relation.Text)
	require.NotNil(t, f.Boundary)
	assert.Equal(t, pass, lookup(f.Boundary))
	v := f.Boundary.Tensor("doc_key").Tensor.LoadInt(0)
	assert.True(t, v > 0 && v < 2*n-2 && v%2 == 1, "the fresh key %d lies in a gap of the keys", v)
}

// widthStep fails with IndexError for tokens wider than fail, raises
// another error for widths in (pass, fail], and passes up to pass.
func widthStep(passW, failW int64) step {
	return func(c *fixtures.Batch) signature.Signature {
		switch w := c.Tensor("tokens").Shape[1]; {
		case w > failW:
			return raise("IndexError: index out of range in self")
		case w > passW:
			return raise(fmt.Sprintf("RuntimeError: width %d is not a multiple of 8", w))
		}
		return pass
	}
}

func tokenBatch(n, width int64) *fixtures.Batch {
	tok := kernels.MustNew(kernels.Int64, n, width)
	for i := int64(0); i < n*width; i++ {
		tok.StoreInt(i, 1+i%40)
	}
	return &fixtures.Batch{Samples: n, Tensors: []*fixtures.Entry{{Name: "tokens", BatchDim: fixtures.Dim(0), Tensor: tok}}}
}

// TestShapeNextSizeFailsOtherwise: widths up to 40 pass, widths 41 to 64
// fail with another error, wider ones with the recorded one. The largest
// passing width's successor does not reproduce the failure, so no size
// decides it: no shape result, and the finding's batch still fails as
// recorded.
func TestShapeNextSizeFailsOtherwise(t *testing.T) {
	b := tokenBatch(6, 70)
	s := widthStep(40, 64)
	path := recordStep(t, b, s)
	recorded := signature.Recorded(b.Error.Text)
	res, err := reduce(t, b, path, newStep(s), reduction.Options{})
	require.NoError(t, err)
	require.NotEmpty(t, res.Findings)
	for _, f := range res.Findings {
		assert.Nil(t, f.Shape, "shape: %+v", f.Shape)
		assert.True(t, s(f.Batch).Matches(recorded, signature.MatchStrict), "the finding's batch (tokens %v) fails as recorded", f.Batch.Tensor("tokens").Shape)
	}

	// Monotone widths: the same search finds 64 and 65.
	s = widthStep(64, 64)
	b = tokenBatch(6, 70)
	path = recordStep(t, b, s)
	res, err = reduce(t, b, path, newStep(s), reduction.Options{})
	require.NoError(t, err)
	require.NotNil(t, res.Findings[0].Shape)
	assert.Equal(t, int64(64), res.Findings[0].Shape.LargestPassing)
}

// TestShapeOnlyWidthOnePasses: a step that takes one token per sample:
// every width from 2 fails, so the largest passing width is 1, the lower
// end of the search.
func TestShapeOnlyWidthOnePasses(t *testing.T) {
	b := tokenBatch(4, 8)
	s := widthStep(1, 1)
	path := recordStep(t, b, s)
	res, err := reduce(t, b, path, newStep(s), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	require.NotNil(t, f.Shape, res.ModeReason)
	assert.Equal(t, int64(1), f.Shape.LargestPassing)
	assert.Equal(t, int64(2), f.Shape.SmallestFailing)
	assert.Equal(t, []int64{1, 2}, f.Batch.Tensor("tokens").Shape)
	assert.Equal(t, []int64{1, 1}, f.Boundary.Tensor("tokens").Shape)
	assert.Equal(t, pass, s(f.Boundary))
}

// TestSizeOnlyOnePasses: an out-of-memory failure at 2 samples: the size
// search's lower end, 1, is the largest size that passes, and the batch
// of 1 is the boundary.
func TestSizeOnlyOnePasses(t *testing.T) {
	b, _ := crossEntropy(t, 16, nil)
	oom := "RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 134217728 bytes. Error code 12 (Cannot allocate memory)"
	b.Error = &fixtures.Failure{Text: oom}
	path := filepath.Join(t.TempDir(), "oom.bin")
	require.NoError(t, fixtures.Write(path, b))
	step := func(c *fixtures.Batch) signature.Signature {
		if c.Samples >= 2 {
			return raise(oom)
		}
		return pass
	}
	res, err := reduce(t, b, path, newStep(step), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeSize, res.Mode)
	require.NotNil(t, res.Size)
	assert.Equal(t, int64(1), res.Size.LargestPassing)
	assert.Equal(t, int64(2), res.Size.SmallestFailing)
	require.NotNil(t, res.Findings[0].Boundary)
	assert.Equal(t, int64(1), res.Findings[0].Boundary.Samples)
}
