package reduction

import (
	"context"
	"slices"

	"reduce/fixtures"
	"reduce/kernels"
	"reduce/shrink"
)

// maxWithout bounds the samples of the batch "without the culprits" that
// a fixture keeps: the first ones of the original batch that are not
// culprits.
const maxWithout = 32

// without replays the original batch without the samples of set (at most
// maxWithout of the others) and returns its rows and batch when it
// passes: the fixture's neighbour that must keep passing, and the donors
// of the element phase. Rows are nil when it does not pass or there is
// no other sample.
func (r *run) without(ctx context.Context, set []int) ([]int64, *fixtures.Batch, error) {
	var rows []int64
	for i := int64(0); i < r.batch.Samples && len(rows) < maxWithout; i++ {
		if !slices.Contains(set, int(i)) {
			rows = append(rows, i)
		}
	}
	if len(rows) == 0 {
		return nil, nil, nil
	}
	o, err := r.ask(ctx, &candidate{rows: rows, size: len(rows)}, 0)
	if err != nil || o != shrink.Pass {
		return nil, nil, err
	}
	b, err := r.batch.Select(rows)
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
