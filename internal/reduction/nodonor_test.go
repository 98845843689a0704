package reduction_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/kernels"
)

// labelBatch is a step's batch of n samples: label int64 [n] (all -100,
// ignore_index) and x float32 [n, 2].
func labelBatch(n int) *fixtures.Batch {
	label := kernels.MustNew(kernels.Int64, int64(n))
	x := kernels.MustNew(kernels.Float32, int64(n), 2)
	ids := make([]string, n)
	for i := int64(0); i < int64(n); i++ {
		label.StoreInt(i, -100)
		x.StoreFloat(2*i, 0.5+float64(i))
		x.StoreFloat(2*i+1, -0.25)
		ids[i] = fmt.Sprintf("utt-%d", i)
	}
	return &fixtures.Batch{Samples: int64(n), SampleIDs: ids, Tensors: []*fixtures.Entry{
		{Name: "label", BatchDim: fixtures.Dim(0), Tensor: label}, {Name: "x", BatchDim: fixtures.Dim(0), Tensor: x}}}
}

// maskedMean is the user's step: a mean loss over the labels that are
// not -100 is 0/0 when there is none (their finiteness check raises); a
// label past 4 or below -100 is out of bounds, -99 to -1 too.
func maskedMean(b *fixtures.Batch) signature.Signature {
	label := b.Tensor("label").Tensor
	counted := 0
	var bad *int64
	label.Each(func(_ []int64, e int64) {
		v := label.LoadInt(e)
		switch {
		case v == -100:
		case v < 0 || v > 4:
			bad = &v
		default:
			counted++
		}
	})
	switch {
	case bad != nil:
		return raise(fmt.Sprintf("IndexError: Target %d is out of bounds.", *bad))
	case counted == 0:
		return raise("FloatingPointError: loss is nan")
	}
	return pass
}

// TestNoDonorPasses: every label is -100, so every sample fails alone and
// no sample passes without the culprit: the other samples' values, taken
// as donors, change nothing. The element is found against zeros (a
// class), its passing value is 0, the finding says that every sample
// holds the value, and no further culprit set is searched.
func TestNoDonorPasses(t *testing.T) {
	b := labelBatch(6)
	path := recordStep(t, b, maskedMean)
	res, err := reduce(t, b, path, newStep(maskedMean), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeSamples, res.Mode, res.ModeReason)
	require.Len(t, res.Findings, 1, "any one sample is the answer")
	f := res.Findings[0]
	require.Len(t, f.Indices, 1)
	assert.False(t, f.ContentFree, "a value triggers it")
	assert.True(t, f.Canonical)
	require.Len(t, f.Elements, 1)
	e := f.Elements[0]
	assert.Equal(t, "label", e.Tensor)
	assert.Equal(t, -100.0, e.Value)
	require.NotNil(t, e.Passing)
	assert.Equal(t, 0.0, *e.Passing)
	assert.Equal(t, []string{"label = -100"}, f.Shared)
	assert.Equal(t, pass, maskedMean(f.Boundary), "the boundary batch passes")
	var text bytes.Buffer
	res.WriteText(&text)
	assert.Contains(t, text.String(), "every sample of the batch holds label = -100, and each fails alone")
	assert.LessOrEqual(t, res.Replays, 24)
}

// batchNorm is the user's step with BatchNorm in training: a batch of one
// sample raises whatever its values; an x with 3 columns is a shape error.
func batchNorm(b *fixtures.Batch) signature.Signature {
	if b.Tensor("x").Tensor.Shape[1] != 2 {
		return raise("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
	}
	if b.Samples < 2 {
		return raise(fmt.Sprintf("ValueError: Expected more than 1 value per channel when training, got input size torch.Size([%d, 2])", b.Samples))
	}
	return pass
}

// TestGrowBatchOfOne: a batch that fails whatever its values is grown to
// the smallest size that passes, with copies of its sample, or, where
// copies fail at every size (a loss over distinct labels), with its other
// samples in turn; the passing batch is the fixture's boundary.
func TestGrowBatchOfOne(t *testing.T) {
	// A loss that needs 4 samples, recorded on a batch of 3; distinct: and
	// of 2 labels at least.
	contrastive := func(distinct bool) step {
		return func(b *fixtures.Batch) signature.Signature {
			seen := map[int64]bool{}
			lab := b.Tensor("label").Tensor
			for i := range b.Samples {
				seen[lab.LoadInt(i)] = true
			}
			if b.Samples < 4 || (distinct && len(seen) < 2) {
				return raise(fmt.Sprintf("ValueError: contrastive loss needs 4 samples of 2 labels, got %d of %d", b.Samples, len(seen)))
			}
			return pass
		}
	}
	for _, tc := range []struct {
		name   string
		n      int
		step   step
		want   int64
		reason string
	}{
		{"batchnorm", 1, batchNorm, 2, "a batch of 2 copies of it passes"},
		{"contrastive", 3, contrastive(false), 4, "a batch of 4 copies of it passes"},
		{"distinct", 3, contrastive(true), 4, "a batch of 4 with the batch's other samples passes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := labelBatch(tc.n)
			for i := range tc.n {
				b.Tensor("label").Tensor.StoreInt(int64(i), int64(i%4))
			}
			path := recordStep(t, b, tc.step)
			res, err := reduce(t, b, path, newStep(tc.step), reduction.Options{})
			require.NoError(t, err)
			assert.Equal(t, reduction.ModeSize, res.Mode, res.ModeReason)
			assert.Contains(t, res.ModeReason, tc.reason)
			require.NotNil(t, res.Size)
			assert.Equal(t, int64(1), res.Size.SmallestFailing)
			assert.Equal(t, tc.want, res.Size.SmallestPassing)
			require.Len(t, res.Findings, 1)
			f := res.Findings[0]
			require.NotNil(t, f.Boundary)
			assert.Equal(t, tc.want, f.Boundary.Samples)
			assert.Equal(t, pass, tc.step(f.Boundary))
			assert.NotEqual(t, pass, tc.step(f.Batch))
			assert.Contains(t, res.Size.Text(), fmt.Sprintf("fails with a batch of 1 sample; %d pass", tc.want))
		})
	}
}

// TestQuotedValueRelation: a step that quotes the duplicate key in its
// message ("duplicate clip_id 'c-7'"): the relation probe's fresh value
// gives the same message with another value, which is the same failure,
// and the relation is found.
func TestQuotedValueRelation(t *testing.T) {
	b := keyBatch(16)
	ids := make([]string, 16)
	for i := range ids {
		ids[i] = fmt.Sprintf("c-%02x", 0x30+i)
	}
	ids[11] = ids[3]
	b.Structure = sampleStrings(t, b, "clip_id", ids)
	step := func(b *fixtures.Batch) signature.Signature {
		leaf := b.Structure.SampleLeaf("clip_id")
		seen := map[string]bool{}
		for _, v := range leaf.Values {
			if seen[string(v)] {
				return raise(fmt.Sprintf("ValueError: duplicate clip_id '%s' in batch", unquote(v)))
			}
			seen[string(v)] = true
		}
		return pass
	}
	path := recordStep(t, b, step)
	res, err := reduce(t, b, path, newStep(step), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	assert.Equal(t, []int{3, 11}, f.Indices)
	require.NotNil(t, f.Relation, res.ModeReason)
	assert.Equal(t, "clip_id[3] == clip_id[11]", f.Relation.Text)
	assert.Empty(t, res.OtherFailures, "the probe's message quotes another value: the same failure")
}

// sampleStrings is b's structure as a dict of its tensors and a per-sample
// list of strings named name.
func sampleStrings(t *testing.T, b *fixtures.Batch, name string, values []string) *fixtures.Node {
	t.Helper()
	key := func(s string) json.RawMessage { v, _ := json.Marshal(s); return v }
	n := &fixtures.Node{Kind: fixtures.NodeDict}
	for _, e := range b.Tensors {
		n.Keys = append(n.Keys, key(e.Name))
		n.Items = append(n.Items, &fixtures.Node{Kind: fixtures.NodeTensor, Name: e.Name})
	}
	leaf := &fixtures.Node{Kind: fixtures.NodeSamples}
	for _, v := range values {
		leaf.Values = append(leaf.Values, key(v))
	}
	n.Keys = append(n.Keys, key(name))
	n.Items = append(n.Items, leaf)
	return n
}

func unquote(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) != nil {
		return string(v)
	}
	return s
}

// TestPredates: a step recorded with its state, whose weights an earlier
// step made huge or non-finite: the samples fail only against that state.
// reduce says that the cause predates the batch, names the state tensor,
// and stops at the first witness (no element search, no further set).
func TestPredates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value float64
		says  string
	}{
		{"huge", 3e18, "state.model.weight reaches |x| = 3e+18"},
		{"nan", math.NaN(), "state.model.weight holds 1 non-finite of 4 values"},
		{"healthy", 0.5, ""},
		// Not huge, yet the samples pass from the step's own weights
		// (0.25 here): the one replay without the recorded state says so.
		{"fresh", 1e6, "pass when the step starts from the weights it builds"},
		// The same weights, and a sample whose value is orders of
		// magnitude past every other's: the data's, probed or not.
		{"outlier", 1e6, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := labelBatch(8)
			b.Structure = &fixtures.Node{Kind: fixtures.NodeDict, Keys: []json.RawMessage{json.RawMessage(`"label"`), json.RawMessage(`"x"`)},
				Items: []*fixtures.Node{{Kind: fixtures.NodeTensor, Name: "label"}, {Kind: fixtures.NodeTensor, Name: "x"}}}
			w := kernels.MustNew(kernels.Float32, 4)
			for i := int64(0); i < 4; i++ {
				w.StoreFloat(i, 0.25)
			}
			w.StoreFloat(2, tc.value)
			b.Tensors = append(b.Tensors, &fixtures.Entry{Name: "state.model.weight", Tensor: w})
			b.State = &fixtures.Node{Kind: fixtures.NodeDict, Keys: []json.RawMessage{json.RawMessage(`"model"`)},
				Items: []*fixtures.Node{{Kind: fixtures.NodeTensor, Name: "state.model.weight"}}}
			x := b.Tensor("x").Tensor
			x.StoreFloat(6, 40) // samples 3 and 5 overflow against the weights
			x.StoreFloat(10, 40)
			limit := 1e19
			if tc.name == "fresh" || tc.name == "outlier" {
				limit = 1e7
				b.Step = &fixtures.Step{Module: "train", Qualname: "step"}
			}
			if tc.name == "outlier" {
				x.StoreFloat(6, 4e4) // sample 3: a reading in the wrong unit
				x.StoreFloat(10, 0.5)
			}
			step := func(b *fixtures.Batch) signature.Signature {
				w := b.Tensor("state.model.weight").Tensor.LoadFloat(2)
				if b.Meta[fixtures.ReplayStateKey] == fixtures.ReplayStateFresh {
					w = 0.25 // the step's own weights
				}
				x := b.Tensor("x").Tensor
				for i := int64(0); i < b.Samples; i++ {
					if v := x.LoadFloat(2*i) * w; math.IsNaN(v) || math.Abs(v) > limit {
						return raise("FloatingPointError: loss is inf")
					}
				}
				if tc.name == "healthy" && b.Samples > 0 && x.LoadFloat(0) > 30 && w < 1 {
					return raise("FloatingPointError: loss is inf") // healthy: a value of the batch
				}
				return pass
			}
			if tc.name == "healthy" {
				x.StoreFloat(0, 40)
			}
			path := recordStep(t, b, step)
			res, err := reduce(t, b, path, newStep(step), reduction.Options{})
			require.NoError(t, err)
			if tc.says == "" {
				assert.Empty(t, res.Predates, "healthy weights say nothing")
				if tc.name == "outlier" {
					require.Len(t, res.Findings, 1)
					assert.Equal(t, []int{3}, res.Findings[0].Indices)
					assert.Zero(t, res.Phases[reduction.PhaseHistory].Replays, "no probe of the state: the value is the data's")
				}
				return
			}
			assert.Contains(t, res.Predates, tc.says, "%v", res.Phases)
			require.Len(t, res.Findings, 1)
			assert.Empty(t, res.Findings[0].Elements, "a witness: no element searched")
			var text bytes.Buffer
			res.WriteText(&text)
			assert.Contains(t, text.String(), "cause: predates this batch")
			assert.Contains(t, text.String(), "witness: samples")
			assert.NotContains(t, text.String(), "culprit:")
		})
	}
}

// TestShapeNamed: a label column [N, 1] where the step wants [N], whatever
// its values: the shape search drops the dim of size 1, replays, and names
// the tensor, the recorded shape and the one that passes; the passing
// batch is the boundary.
func TestShapeNamed(t *testing.T) {
	b := labelBatch(6)
	col := b.Tensor("label")
	col.Tensor = &kernels.Tensor{DType: kernels.Int64, Shape: []int64{6, 1}, Strides: []int64{1, 1}, Data: col.Tensor.Data}
	for i := int64(0); i < 6; i++ {
		col.Tensor.StoreInt(i, i%3)
	}
	step := func(b *fixtures.Batch) signature.Signature {
		if len(b.Tensor("label").Shape) != 1 {
			return raise("RuntimeError: 0D or 1D target tensor expected, multi-target not supported")
		}
		return pass
	}
	path := recordStep(t, b, step)
	res, err := reduce(t, b, path, newStep(step), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	require.NotNil(t, f.Shape, res.ModeReason)
	assert.True(t, f.Shape.Squeezed)
	assert.Equal(t, []string{"label"}, f.Shape.Tensors)
	assert.Equal(t, []int{1}, f.Shape.Dims)
	assert.Contains(t, f.Shape.Text, "label is [N, 1]; [N] passes")
	require.NotNil(t, f.Boundary)
	assert.Equal(t, []int64{1}, f.Boundary.Tensor("label").Shape)
	assert.Equal(t, pass, step(f.Boundary))
	assert.NotEqual(t, pass, step(f.Batch))
}

// TestDeviceClassRecorded: a step's batch recorded on the CPU (an
// embedding's IndexError) reduced on a GPU, where the same check is a
// device-side assert: the fixture's test runs on that device, so its record
// expects the replay's class (torch.AcceleratorError), and keeps the
// recording's beside it.
func TestDeviceClassRecorded(t *testing.T) {
	stderr, err := os.ReadFile("../signature/testdata/stderr/cuda_embedding_vectorized_gather_torch211.txt")
	require.NoError(t, err)
	text := string(stderr)
	text = text[strings.Index(text, "-- stderr --\n")+len("-- stderr --\n"):]
	device := signature.Parse([]byte(text), signature.ExitInfo{Code: 1})
	require.Equal(t, signature.FamilyDeviceAssert, device.Family)
	b := labelBatch(8)
	b.Tensor("label").Tensor.StoreInt(5, 7)
	step := func(b *fixtures.Batch) signature.Signature {
		l := b.Tensor("label").Tensor
		for i := int64(0); i < b.Samples; i++ {
			if l.LoadInt(i) == 7 {
				return device
			}
		}
		return pass
	}
	b.Error = &fixtures.Failure{Text: "Traceback (most recent call last):\n  File \"step.py\", line 1, in step\nIndexError: index out of range in self\n"}
	path := filepath.Join(t.TempDir(), "crash.bin")
	require.NoError(t, fixtures.Write(path, b))
	be := newStep(step)
	be.settings.Device = "cuda"
	res, err := reduce(t, b, path, be, reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 1)
	assert.Equal(t, []int{5}, res.Findings[0].Indices)
	var rec regress.Record
	require.NoError(t, json.Unmarshal([]byte(readRecord(t, res.Fixtures[0])), &rec))
	assert.Equal(t, "torch.AcceleratorError", rec.Signature.Exception, "the class the test sees on the device")
	require.NotNil(t, rec.Recorded)
	assert.Equal(t, "IndexError", rec.Recorded.Exception)
}

// TestPlantedKinds: random batches of the three kinds a donor cannot
// explain: every label -100 (no sample passes without the culprit), a
// batch smaller than the step takes (grown with copies), a duplicate id
// that the step's message quotes (in any quoting). Each is found, said,
// and every batch written besides the minimal one passes.
func TestPlantedKinds(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	for trial := 0; trial < 30; trial++ {
		var (
			b    *fixtures.Batch
			step func(*fixtures.Batch) signature.Signature
			kind = trial % 3
		)
		switch kind {
		case 0: // every label ignored
			b, step = labelBatch(1+rng.Intn(40)), maskedMean
		case 1: // too few samples
			k := int64(2 + rng.Intn(20))
			b = labelBatch(1 + rng.Intn(int(k-1)))
			for i := range b.Samples {
				b.Tensor("label").Tensor.StoreInt(i, 1)
			}
			step = func(c *fixtures.Batch) signature.Signature {
				if c.Samples < k {
					return raise(fmt.Sprintf("ValueError: need %d samples, got %d", k, c.Samples))
				}
				return pass
			}
		case 2: // a quoted duplicate id
			n := 4 + rng.Intn(60)
			b = labelBatch(n)
			for i := range b.Samples {
				b.Tensor("label").Tensor.StoreInt(i, 1)
			}
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("c-%04x", rng.Intn(1<<16))
			}
			perm := rng.Perm(n)
			ids[perm[1]] = ids[perm[0]]
			b.Structure = sampleStrings(t, b, "clip_id", ids)
			quote := []string{"'%s'", `"%s"`, "%s"}[rng.Intn(3)]
			step = func(c *fixtures.Batch) signature.Signature {
				seen := map[string]bool{}
				for _, v := range c.Structure.SampleLeaf("clip_id").Values {
					if seen[string(v)] {
						return raise("ValueError: duplicate clip_id " + fmt.Sprintf(quote, unquote(v)) + " in batch")
					}
					seen[string(v)] = true
				}
				return pass
			}
		}
		path := recordStep(t, b, step)
		res, err := reduce(t, b, path, newStep(step), reduction.Options{})
		require.NoError(t, err, "trial %d", trial)
		require.Len(t, res.Findings, 1, "trial %d (kind %d): %s", trial, kind, res.ModeReason)
		f := res.Findings[0]
		switch kind {
		case 0:
			require.Len(t, f.Elements, 1, "trial %d", trial)
			assert.Equal(t, -100.0, f.Elements[0].Value)
			if assert.NotNil(t, f.Elements[0].Passing, "trial %d", trial) {
				assert.Equal(t, pass, maskedMean(f.Boundary))
			}
			if b.Samples > 1 { // one sample has no other to pass without it
				assert.Equal(t, []string{"label = -100"}, f.Shared, "trial %d: n %d", trial, b.Samples)
			}
		case 1:
			require.NotNil(t, res.Size, "trial %d: %s", trial, res.ModeReason)
			assert.Equal(t, reduction.ModeSize, res.Mode)
			assert.Equal(t, int64(1), res.Size.SmallestFailing)
			assert.Equal(t, f.Boundary.Samples, res.Size.SmallestPassing, "trial %d", trial)
			assert.Equal(t, pass, step(f.Boundary))
			if f.Boundary.Samples > 1 {
				smaller, err := f.Boundary.Select(prefixRows(f.Boundary.Samples - 1))
				require.NoError(t, err)
				assert.NotEqual(t, pass, step(smaller), "trial %d: one sample fewer fails", trial)
			}
		case 2:
			require.NotNil(t, f.Relation, "trial %d: %s", trial, res.ModeReason)
			assert.Len(t, f.Indices, 2)
			assert.Empty(t, res.OtherFailures, "trial %d: the probe's value is the same failure", trial)
		}
		for _, nb := range []*fixtures.Batch{f.Boundary, f.OtherEnd, f.Without} {
			if nb != nil {
				assert.Equal(t, pass, step(nb), "trial %d: a written neighbour fails", trial)
			}
		}
		assert.NotEqual(t, pass, step(f.Batch), "trial %d", trial)
	}
}

func prefixRows(n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}
