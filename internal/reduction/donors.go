package reduction

import (
	"context"
	"slices"

	"reduce/fixtures"
	"reduce/kernels"
	"reduce/shrink"
)

// maxWithout bounds the batch "without the culprits" that a fixture
// keeps: a larger one was replayed (and passed) but is not written.
const maxWithout = 64

// without replays the original batch without the samples of set: the
// question the search for further culprit sets asks first, so that it
// costs no replay of its own. When it passes it gives the donors of the
// element phase (its rows) and, when it has at most maxWithout samples,
// the fixture's neighbour that must keep passing. Rows are nil when it
// does not pass or there is no other sample.
func (r *run) without(ctx context.Context, set []int) ([]int64, *fixtures.Batch, error) {
	var rows []int64
	for i := int64(0); i < r.batch.Samples; i++ {
		if !slices.Contains(set, int(i)) {
			rows = append(rows, i)
		}
	}
	if len(rows) == 0 {
		return nil, nil, nil
	}
	o, err := r.askTrials(ctx, keepRows(rows, len(rows)))
	if err != nil || o != shrink.Pass {
		return nil, nil, err
	}
	if len(rows) > maxWithout {
		r.logf("neighbours: the batch without the culprits passes (%d samples, more than the %d a fixture keeps: not written)", len(rows), maxWithout)
		return rows, nil, nil
	}
	b, err := r.rows(rows)
	if err != nil {
		return nil, nil, err
	}
	return rows, b, nil
}

// donorsFor are the samples whose values a culprit set's dropped
// elements take: the batch without the culprits (wrows) when it passed,
// else, as when those are fewer than the set's samples (two culprits would
// take one donor's values, a relation made), the first other samples in
// order, whose values no replay vouched for: a donor value that fails
// makes its element look needed, never a claim. The choice depends on the
// batch and one journaled answer only, so that a reduction resumed, or
// run with -j > 1, builds the same candidates.
func (r *run) donorsFor(set []int, wrows []int64) []int64 {
	out := slices.Clone(wrows)
	for i := int64(0); i < r.batch.Samples && len(out) < len(set); i++ {
		if !slices.Contains(set, int(i)) && !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

// donorValues is the donorFunc of a culprit set's batch (whose row k is
// the recorded sample set[k]): row k's dropped elements take the values
// of donor k, so that two culprit samples never take one donor's values
// (no relation made); a row past the donors keeps zero.
func (r *run) donorValues(donors []int64) donorFunc {
	if len(donors) == 0 {
		return nil
	}
	return func(ti int, idx []int64) (value, bool) {
		e := r.batch.Tensors[ti]
		bd := *e.BatchDim
		if idx[bd] >= int64(len(donors)) {
			return value{}, false
		}
		at := slices.Clone(idx)
		at[bd] = donors[idx[bd]]
		s, err := e.Tensor.StorageIndex(at)
		if err != nil {
			return value{}, false // a padded dim longer in the culprit
		}
		if e.DType.IsFloat() {
			return value{f: e.Tensor.LoadFloat(s)}, true
		}
		if e.DType == kernels.Bool {
			return value{}, false
		}
		return value{i: e.Tensor.LoadInt(s)}, true
	}
}
