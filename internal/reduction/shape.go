package reduction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/shrink"
)

// maxShapeGroups bounds the dims the shape search tries.
const maxShapeGroups = 3

// shapeGroup is dims of several tensors that hold one size and are cut
// together (input_ids and attention_mask along the sequence).
type shapeGroup struct {
	tensors, dims []int
	size          int64
	padded        bool
}

// shapeGroups are the non-batch dims of b's batched tensors grouped by
// size, one dim per tensor and group: a padded dim's group first, then the
// largest sizes.
func shapeGroups(b *fixtures.Batch) []shapeGroup {
	bySize := map[int64]*shapeGroup{}
	var groups []*shapeGroup
	for ti, e := range b.Tensors {
		if e.BatchDim == nil {
			continue
		}
		for d, n := range e.Shape {
			if d == *e.BatchDim || n < 2 {
				continue
			}
			g := bySize[n]
			if g == nil {
				g = &shapeGroup{size: n}
				bySize[n] = g
				groups = append(groups, g)
			}
			if slices.Contains(g.tensors, ti) {
				continue
			}
			g.tensors, g.dims = append(g.tensors, ti), append(g.dims, d)
			g.padded = g.padded || (e.Pad != nil && e.Pad.Dim == d)
		}
	}
	slices.SortStableFunc(groups, func(a, b *shapeGroup) int {
		switch {
		case a.padded != b.padded:
			if a.padded {
				return -1
			}
			return 1
		case a.size != b.size:
			if a.size > b.size {
				return -1
			}
			return 1
		}
		return 0
	})
	out := make([]shapeGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	return out
}

// shape searches, for a finding that fails with none of its values
// (base describes its batch), the non-batch dim whose size decides the
// failure: each group of dims in turn is cut to the largest size that
// passes, by bisection. On success the finding's batch is cut to the
// smallest size that fails and its boundary to the largest that passes,
// both replayed, and the result is returned; nil when no dim's size
// decides it.
func (r *run) shape(ctx context.Context, f *Finding, base *candidate, why string) (*regress.ShapeResult, error) {
	if sr, err := r.squeeze(ctx, f, base, why); sr != nil || err != nil {
		return sr, err
	}
	groups := shapeGroups(f.Batch)
	if len(groups) > maxShapeGroups {
		groups = groups[:maxShapeGroups]
	}
	for _, g := range groups {
		if ctx.Err() != nil {
			return nil, nil
		}
		cut := func(size int64) *candidate {
			return base.narrowed(g.tensors, g.dims, size)
		}
		r.setPhase(PhaseShape, int(g.size))
		res, err := r.largestPassing(ctx, 1, g.size-1, func(ctx context.Context, k int64, trial int) (shrink.Outcome, error) {
			return r.ask(ctx, cut(k), trial)
		}, r.shrinkOptions())
		switch {
		case ctx.Err() != nil:
			return nil, nil
		case errors.Is(err, shrink.ErrNoPassing), errors.Is(err, shrink.ErrBudget):
			continue
		case err != nil:
			return nil, fmt.Errorf("shape search: %w", err)
		case res.Incomplete || (res.Value < g.size-1 && res.Next != shrink.Fail):
			continue // the next size fails otherwise: no size decides it
		}
		smallest := res.Value + 1
		failing, err := r.build(cut(smallest))
		if err != nil {
			return nil, err
		}
		if smallest == g.size {
			failing = f.Batch
		}
		passing, err := r.build(cut(res.Value))
		if err != nil {
			return nil, err
		}
		sr := &regress.ShapeResult{Dims: g.dims, LargestPassing: res.Value, SmallestFailing: smallest}
		var names, shapes []string
		for k, ti := range g.tensors {
			e := f.Batch.Tensors[ti]
			sr.Tensors = append(sr.Tensors, e.Name)
			names = append(names, fmt.Sprintf("%s dim %d", e.Name, g.dims[k]))
			pass := slices.Clone(e.Shape)
			pass[g.dims[k]] = res.Value
			shapes = append(shapes, fmt.Sprintf("%s is %s; %s passes", e.Name, shapeN(e.Shape, e.BatchDim), shapeN(pass, e.BatchDim)))
		}
		sr.Text = fmt.Sprintf("%s: fails for %s of size %d or more, passes at %d (bisected: %d and the recorded %d fail), %s",
			strings.Join(shapes, ", "), strings.Join(names, " and "), smallest, res.Value, smallest, g.size, why)
		f.Batch, f.Boundary = failing, passing
		r.logf("shape: %s", sr.Text)
		return sr, nil
	}
	return nil, nil
}

// squeeze probes, for a finding that fails with none of its values, each
// dim of size 1 of a batched tensor (not its batch axis, nor a padded
// dim): the finding's samples, with their recorded values, and that dim
// dropped, replayed. The first that passes is the answer (a label column
// [N, 1] where the step wants [N]): the finding's boundary is that batch.
// The recorded values, not the neutralized ones: a built-in op's neutral
// target (ignore_index in every element) passes only with a NaN mean.
func (r *run) squeeze(ctx context.Context, f *Finding, _ *candidate, why string) (*regress.ShapeResult, error) {
	base := keepRows(rowsOf(f.Indices), len(f.Indices))
	tried := 0
	for ti, e := range f.Batch.Tensors {
		if e.BatchDim == nil {
			continue
		}
		for d, n := range e.Shape {
			if n != 1 || d == *e.BatchDim || (e.Pad != nil && e.Pad.Dim == d) || tried >= maxShapeGroups {
				continue
			}
			tried++
			r.setPhase(PhaseShape, 1)
			c := base.squeezed(ti, d)
			o, err := r.askTrials(ctx, c)
			if err != nil || ctx.Err() != nil || o != shrink.Pass {
				if err != nil {
					return nil, err
				}
				continue
			}
			passing, err := r.build(c)
			if err != nil {
				return nil, err
			}
			bd := *e.BatchDim
			if bd > d {
				bd--
			}
			sr := &regress.ShapeResult{Tensors: []string{e.Name}, Dims: []int{d}, Squeezed: true,
				Text: fmt.Sprintf("%s is %s; %s passes (its dim %d of size 1 dropped), %s", e.Name, shapeN(e.Shape, e.BatchDim),
					shapeN(passing.Tensors[ti].Shape, &bd), d, why)}
			f.Boundary = passing
			r.logf("shape: %s", sr.Text)
			return sr, nil
		}
	}
	return nil, nil
}

// shapeN writes a shape with its batch axis as N: [N, 1].
func shapeN(shape []int64, bd *int) string {
	parts := make([]string, len(shape))
	for d, n := range shape {
		parts[d] = strconv.FormatInt(n, 10)
		if bd != nil && d == *bd {
			parts[d] = "N"
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
