package reduction

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"reduce/kernels"
	"reduce/shrink"
)

// hugeState is the magnitude past which a recorded weight or optimizer
// value is taken for one an earlier step blew up: trained weights, Adam's
// moments and BatchNorm's statistics stay far below it.
const hugeState = 1e8

// maxStateScan bounds the elements of the recorded state read.
const maxStateScan = 1 << 28

// predates says why the failure's cause lies before the recorded batch,
// "" when nothing says so: the recorded state (the weights, the
// optimizer's moments) already holds non-finite or huge values, so that
// the samples fail only against it and the step that made it so is an
// earlier one.
func (r *run) predates() string {
	state := r.batch.StateTensors()
	if len(state) == 0 {
		return ""
	}
	type finding struct {
		name      string
		nonFinite int64
		numel     int64
		maxAbs    float64
	}
	var bad []finding
	scanned := int64(0)
	for _, e := range r.batch.Tensors {
		if !state[e.Name] || !e.DType.IsFloat() || e.Tensor == nil || scanned > maxStateScan {
			continue
		}
		f := finding{name: e.Name, numel: e.Numel()}
		t := e.Tensor
		t.Each(func(_ []int64, s int64) {
			v := t.LoadFloat(s)
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
				f.nonFinite++
			default:
				f.maxAbs = max(f.maxAbs, math.Abs(v))
			}
		})
		scanned += f.numel
		if f.nonFinite > 0 || f.maxAbs >= hugeState {
			bad = append(bad, f)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	slices.SortStableFunc(bad, func(a, b finding) int {
		switch {
		case (a.nonFinite > 0) != (b.nonFinite > 0):
			if a.nonFinite > 0 {
				return -1
			}
			return 1
		case a.maxAbs > b.maxAbs:
			return -1
		case a.maxAbs < b.maxAbs:
			return 1
		}
		return 0
	})
	var parts []string
	for _, f := range bad[:min(len(bad), 3)] {
		if f.nonFinite > 0 {
			parts = append(parts, fmt.Sprintf("%s holds %d non-finite of %d values", f.name, f.nonFinite, f.numel))
		} else {
			parts = append(parts, fmt.Sprintf("%s reaches |x| = %s", f.name, fmtValue(f.maxAbs, kernels.Float32)))
		}
	}
	if len(bad) > 3 {
		parts = append(parts, fmt.Sprintf("%d tensors more", len(bad)-3))
	}
	return "the recorded state already holds values no healthy step leaves (" + strings.Join(parts, "; ") + ")"
}

// predatesReason is the mode's reason when the cause predates the batch.
func predatesReason(history string) string {
	if history == freshHistory {
		return "the cause predates this batch: its samples fail only against the recorded state, and pass when the step starts from the weights it builds. " +
			"To find the step and the sample that did it, record the steps before this one (their batches, and the state before it went wrong) and reduce those"
	}
	return "the cause predates this batch: " + history + ", and its samples fail only against that state. " +
		"To find the step and the sample that did it, record the steps before this one (their batches, and the state from before the values grew) and reduce those"
}

// outlierFactor is how many times the largest magnitude the other samples
// hold a culprit's value must exceed to be the data's own cause.
const outlierFactor = 100

// freshHistory is the history of samples that pass from the step's own
// weights (freshStatePasses).
const freshHistory = "the samples pass when the step starts from the weights it builds instead of the recorded state"

// freshStatePasses says whether the culprit samples rows, which hold no
// non-finite value, pass when the step starts from the weights it builds
// rather than the recorded state (a FreshState view): then the state is
// the cause, and it returns the history to say so. One replay, asked only
// of a step recorded with a state whose magnitude said nothing
// (predates).
func (r *run) freshStatePasses(ctx context.Context, rows []int64) (string, error) {
	if r.batch.State == nil || r.batch.Step == nil {
		return "", nil
	}
	in := map[int64]bool{}
	for _, x := range rows {
		in[x] = true
	}
	for _, e := range r.batch.Tensors {
		if e.BatchDim == nil || !e.DType.IsFloat() || e.Numel() > maxStateScan {
			continue
		}
		bd, nonFinite, mine, others, seen := *e.BatchDim, false, 0.0, 0.0, false
		e.Each(func(idx []int64, s int64) {
			switch v := e.Tensor.LoadFloat(s); {
			case in[idx[bd]] && (math.IsNaN(v) || math.IsInf(v, 0)):
				nonFinite = true
			case in[idx[bd]]:
				mine = max(mine, math.Abs(v))
			case !math.IsNaN(v) && !math.IsInf(v, 0):
				others, seen = max(others, math.Abs(v)), true
			}
		})
		if nonFinite || (seen && mine > 1 && mine > outlierFactor*others) {
			// A non-finite input, or one orders of magnitude past every
			// other sample's, is the data's, whatever the weights: from
			// the step's own weights it may pass only by luck.
			return "", nil
		}
	}
	r.setPhase(PhaseHistory, 1)
	c := keepRows(rows, len(rows))
	c.FreshState = true
	o, err := r.askTrials(ctx, c)
	if err != nil || o != shrink.Pass {
		return "", err
	}
	return freshHistory, nil
}
