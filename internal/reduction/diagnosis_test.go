package reduction_test

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/kernels"
)

// keyBatch is a batch for a step of the user's own: doc_key int64 [n]
// (10000 + i) and x float32 [n, 3] (values in (0, 1)), with sample ids.
func keyBatch(n int) *fixtures.Batch {
	key := kernels.MustNew(kernels.Int64, int64(n))
	x := kernels.MustNew(kernels.Float32, int64(n), 3)
	ids := make([]string, n)
	for i := int64(0); i < int64(n); i++ {
		key.StoreInt(i, 10000+i)
		for c := int64(0); c < 3; c++ {
			x.StoreFloat(i*3+c, float64((i*7+c*3)%11+1)/13)
		}
		ids[i] = fmt.Sprintf("doc-%03d", i)
	}
	return &fixtures.Batch{Samples: int64(n), SampleIDs: ids, Tensors: []*fixtures.Entry{
		{Name: "doc_key", BatchDim: fixtures.Dim(0), Tensor: key}, {Name: "x", BatchDim: fixtures.Dim(0), Tensor: x}}}
}

// uniqueKeys is the user's step: duplicate keys raise; so does an x
// outside [0, 1] or not finite (each its own message).
func uniqueKeys(b *fixtures.Batch) signature.Signature {
	key, x := b.Tensor("doc_key").Tensor, b.Tensor("x").Tensor
	seen := map[int64]bool{}
	var dup []int64
	key.Each(func(_ []int64, e int64) {
		k := key.LoadInt(e)
		if seen[k] {
			dup = append(dup, k)
		}
		seen[k] = true
	})
	if len(dup) > 0 {
		return raise(fmt.Sprintf("ValueError: duplicate doc_key %d in the batch", slices.Min(dup)))
	}
	bad := ""
	x.Each(func(_ []int64, e int64) {
		v := x.LoadFloat(e)
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			bad = "FloatingPointError: loss is nan"
		case (v < 0 || v > 1) && bad == "":
			bad = "ValueError: x out of [0, 1]"
		}
	})
	if bad != "" {
		return raise(bad)
	}
	return pass
}

func recordStep(t *testing.T, b *fixtures.Batch, step func(*fixtures.Batch) signature.Signature) string {
	t.Helper()
	sig := step(b)
	require.NotEqual(t, pass, sig, "the batch fails")
	b.Error = &fixtures.Failure{Text: "Traceback (most recent call last):\n  File \"step.py\", line 1, in <module>\n" + sig.Expression + "\n"}
	path := filepath.Join(t.TempDir(), "crash.bin")
	require.NoError(t, fixtures.Write(path, b))
	return path
}

// TestRelationDuplicateKeys: two samples share a key. The element phase's
// dropped elements take a donor sample's values (zeros would make every
// dropped key equal), so the pair is found, as samples, with the relation
// between its two keys, and a boundary batch that breaks it.
func TestRelationDuplicateKeys(t *testing.T) {
	b := keyBatch(64)
	b.Tensor("doc_key").Tensor.StoreInt(50, 10005)
	path := recordStep(t, b, uniqueKeys)
	res, err := reduce(t, b, path, newStep(uniqueKeys), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeSamples, res.Mode, res.ModeReason)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	assert.Equal(t, []int{5, 50}, f.Indices)
	require.NotNil(t, f.Relation)
	assert.Equal(t, "equal", f.Relation.Kind)
	assert.Equal(t, "doc_key[5] == doc_key[50]", f.Relation.Text)
	require.NotNil(t, f.Boundary)
	assert.Equal(t, pass, uniqueKeys(f.Boundary), "the boundary batch breaks the relation")
	assert.NotEqual(t, pass, uniqueKeys(f.Batch))
	require.NotNil(t, f.Without)
	assert.Equal(t, pass, uniqueKeys(f.Without))
	culprit := f.Culprit("")
	assert.NotNil(t, culprit.Relation)
}

// TestNonFinite: a NaN input is named as such, its passing value is
// finite, and the record's JSON says "NaN", not 0.
func TestNonFinite(t *testing.T) {
	b := keyBatch(16)
	b.Tensor("x").Tensor.StoreFloat(9*3+1, math.NaN())
	path := recordStep(t, b, uniqueKeys)
	res, err := reduce(t, b, path, newStep(uniqueKeys), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	assert.Equal(t, []int{9}, f.Indices)
	require.Len(t, f.Elements, 1)
	e := f.Elements[0]
	assert.Equal(t, "NaN", e.ValueText)
	assert.True(t, math.IsNaN(e.Value))
	require.NotNil(t, e.Passing)
	assert.False(t, math.IsNaN(*e.Passing) || math.IsInf(*e.Passing, 0))
	assert.Equal(t, pass, uniqueKeys(f.Boundary))
	rec := readRecord(t, res.Fixtures[0])
	assert.Contains(t, rec, `"value": "NaN"`)
}

// TestRangeBothEnds: an x of 1.5 in a step that wants [0, 1]: the passing
// value is 1, zero passes and the smallest negative float fails, so the
// valid range is [0, 1], and the other end is a neighbour batch.
func TestRangeBothEnds(t *testing.T) {
	b := keyBatch(16)
	b.Tensor("x").Tensor.StoreFloat(3*3+2, 1.5)
	path := recordStep(t, b, uniqueKeys)
	res, err := reduce(t, b, path, newStep(uniqueKeys), reduction.Options{})
	require.NoError(t, err)
	f := res.Findings[0]
	require.Len(t, f.Elements, 1)
	e := f.Elements[0]
	assert.Equal(t, "valid range [0, 1]", e.Rule)
	require.NotNil(t, e.Valid)
	assert.Equal(t, 0.0, *e.Valid.Lo)
	assert.Equal(t, 1.0, *e.Valid.Hi)
	require.NotNil(t, f.OtherEnd)
	assert.Equal(t, pass, uniqueKeys(f.OtherEnd))
	assert.Equal(t, pass, uniqueKeys(f.Boundary))
}

// TestShapeWidth: any sample of width 70 fails where positions go up to
// 64: no value matters, the width does, and the shape search says which
// dim and which sizes, with both batches cut to them.
func TestShapeWidth(t *testing.T) {
	n, width := int64(6), int64(70)
	tok := kernels.MustNew(kernels.Int64, n, width)
	for i := int64(0); i < n*width; i++ {
		tok.StoreInt(i, 1+i%40)
	}
	b := &fixtures.Batch{Samples: n, Tensors: []*fixtures.Entry{{Name: "tokens", BatchDim: fixtures.Dim(0), Tensor: tok}}}
	positions := func(c *fixtures.Batch) signature.Signature {
		if c.Tensor("tokens").Shape[1] > 64 {
			return raise("IndexError: index out of range in self")
		}
		return pass
	}
	path := recordStep(t, b, positions)
	res, err := reduce(t, b, path, newStep(positions), reduction.Options{})
	require.NoError(t, err)
	f := res.Findings[0]
	require.NotNil(t, f.Shape, res.ModeReason)
	assert.Equal(t, &regress.ShapeResult{Tensors: []string{"tokens"}, Dims: []int{1}, LargestPassing: 64, SmallestFailing: 65, Text: f.Shape.Text}, f.Shape)
	assert.Contains(t, f.Shape.Text, "tokens dim 1 of size 65 or more, passes at 64")
	assert.Equal(t, []int64{1, 65}, f.Batch.Tensor("tokens").Shape)
	assert.Equal(t, []int64{1, 64}, f.Boundary.Tensor("tokens").Shape)
	assert.Contains(t, res.ModeReason, "a size decides it")
}

// TestPlantedCulprits is a property test: random batches with a planted
// out-of-range sample and a planted pair of equal keys (sometimes one,
// sometimes both): the culprit sets reported are the planted ones, a
// relation is reported for the pair only, and every batch written
// besides the minimal one passes.
func TestPlantedCulprits(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	for trial := 0; trial < 24; trial++ {
		n := 8 + rng.Intn(120)
		b := keyBatch(n)
		var want [][]int
		plantPair, plantRange := rng.Intn(3) != 0, rng.Intn(3) != 0
		if !plantPair && !plantRange {
			plantRange = true
		}
		perm := rng.Perm(n)
		if plantPair {
			i, j := min(perm[0], perm[1]), max(perm[0], perm[1])
			b.Tensor("doc_key").Tensor.StoreInt(int64(j), 10000+int64(i))
			want = append(want, []int{i, j})
		}
		if plantRange {
			k := perm[2]
			b.Tensor("x").Tensor.StoreFloat(int64(k)*3+int64(rng.Intn(3)), 1+rng.Float64())
			want = append(want, []int{k})
		}
		path := recordStep(t, b, uniqueKeys)
		res, err := reduce(t, b, path, newStep(uniqueKeys), reduction.Options{})
		require.NoError(t, err, "trial %d", trial)
		// The recorded failure is the first check to raise: the pair's.
		require.NotEmpty(t, res.Findings)
		f := res.Findings[0]
		assert.Equal(t, want[0], f.Indices, "trial %d: n %d, %s", trial, n, res.ModeReason)
		assert.Equal(t, plantPair, f.Relation != nil, "trial %d", trial)
		for _, nb := range []*fixtures.Batch{f.Boundary, f.OtherEnd, f.Without} {
			if nb != nil {
				assert.Equal(t, pass, uniqueKeys(nb), "trial %d: a written neighbour fails", trial)
			}
		}
		assert.NotEqual(t, pass, uniqueKeys(f.Batch))
	}
}

func readRecord(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, regress.RecordFile))
	require.NoError(t, err)
	return string(data)
}

// TestFixtureDeterministic: the same reduction with -j 4 writes the same
// fixture every time (the donors of a step's dropped elements depend on
// the batch and the journaled answers, never on which replay finished
// first), and the same as with -j 1.
func TestFixtureDeterministic(t *testing.T) {
	b := keyBatch(40)
	b.Tensor("doc_key").Tensor.StoreInt(30, 10007)
	b.Tensor("x").Tensor.StoreFloat(12*3+1, 2.5)
	path := recordStep(t, b, uniqueKeys)
	names := map[string]int{}
	for i, jobs := range []int{1, 4, 4, 4, 4} {
		res, err := reduce(t, b, path, newStep(uniqueKeys), reduction.Options{Jobs: jobs})
		require.NoError(t, err, "run %d", i)
		names[filepath.Base(res.Fixtures[0])]++
	}
	assert.Len(t, names, 1, "fixtures written: %v", names)
}

// TestReplayBound: one bad target among n samples, the whole job (the
// confirmation, the samples, the neighbours, the elements and the
// boundary with both ends of the range) within ⌈log2 n⌉ + 8 replays.
func TestReplayBound(t *testing.T) {
	for _, n := range []int{256, 4096, 100000} {
		b, path := crossEntropy(t, n, map[int]int64{n * 2 / 3: 4})
		res, err := reduce(t, b, path, newStep(kernelStep), reduction.Options{})
		require.NoError(t, err)
		bound := bits.Len(uint(n-1)) + 8
		assert.LessOrEqual(t, res.Replays, bound, "n = %d: %v", n, res.Phases)
		require.Len(t, res.Findings, 1)
		assert.Equal(t, []int{n * 2 / 3}, res.Findings[0].Indices)
		assert.Equal(t, "valid range [0, 4)", res.Findings[0].Elements[0].Rule)
	}
}

// TestRangeBelow: a target below the range (-3 of 4 classes). The search
// toward zero ends at its far end, 0, so the other end lies beyond it: the
// largest target of the other samples, 3, passes and 4 fails, and the
// range is closed; the batch at that end is a neighbour that passes.
// Without other samples to take it from, the rule says only which end was
// found, never that every value from 0 passes.
func TestRangeBelow(t *testing.T) {
	b, path := crossEntropy(t, 64, map[int]int64{40: -3})
	res, err := reduce(t, b, path, newStep(kernelStep), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	e := f.Elements[0]
	assert.Equal(t, "valid range [0, 4)", e.Rule)
	require.NotNil(t, e.Valid)
	assert.Equal(t, 0.0, *e.Valid.Lo)
	assert.Equal(t, 3.0, *e.Valid.Hi)
	require.NotNil(t, f.OtherEnd)
	assert.Equal(t, pass, kernelStep(f.OtherEnd))

	one, path := crossEntropy(t, 1, map[int]int64{0: -3})
	res, err = reduce(t, one, path, newStep(kernelStep), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	assert.Equal(t, "the valid range starts at 0", res.Findings[0].Elements[0].Rule)
}

// TestReplayBoundWideSamples: one token past the vocabulary inside
// samples of 512 tokens and 16 features: the token is the only value no
// other sample holds, asked alone first, so the whole job stays within
// ⌈log2 n⌉ + 8 replays however many elements a sample has; a bisection
// inside the sample would add log2 of them.
func TestReplayBoundWideSamples(t *testing.T) {
	const width, vocab = 512, 1000
	step := func(b *fixtures.Batch) signature.Signature {
		tok := b.Tensor("tokens").Tensor
		bad := false
		tok.Each(func(_ []int64, e int64) {
			if v := tok.LoadInt(e); v < 0 || v >= vocab {
				bad = true
			}
		})
		if bad {
			return raise("IndexError: index out of range in self")
		}
		return pass
	}
	for _, n := range []int{8, 256} {
		tok := kernels.MustNew(kernels.Int64, int64(n), width)
		feat := kernels.MustNew(kernels.Float32, int64(n), 16)
		for i := int64(0); i < int64(n)*width; i++ {
			tok.StoreInt(i, (i*7919)%vocab)
		}
		for i := int64(0); i < int64(n)*16; i++ {
			feat.StoreFloat(i, float64(i%13)/13)
		}
		culprit := int64(n) * 2 / 3
		tok.StoreInt(culprit*width+300, vocab)
		b := &fixtures.Batch{Samples: int64(n), Tensors: []*fixtures.Entry{
			{Name: "tokens", BatchDim: fixtures.Dim(0), Tensor: tok}, {Name: "features", BatchDim: fixtures.Dim(0), Tensor: feat}}}
		path := recordStep(t, b, step)
		res, err := reduce(t, b, path, newStep(step), reduction.Options{})
		require.NoError(t, err)
		bound := bits.Len(uint(n-1)) + 8
		assert.LessOrEqual(t, res.Replays, bound, "n = %d: %v", n, res.Phases)
		require.Len(t, res.Findings, 1)
		f := res.Findings[0]
		assert.Equal(t, []int{int(culprit)}, f.Indices)
		require.Len(t, f.Elements, 1)
		assert.Equal(t, []int64{culprit, 300}, f.Elements[0].Index)
		assert.Equal(t, "valid range [0, 1000)", f.Elements[0].Rule)
	}
}
