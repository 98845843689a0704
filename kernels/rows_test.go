package kernels

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// lossRowCases adds the losses on inputs large enough for their row-by-row
// paths to work in blocks (nll_loss's 16,384 positions, a probability
// target's blocks of outer indices, binary_cross_entropy's 262,144
// elements) and across goroutines: the class dim last and not last (N, C,
// d1, ...), every layout of opGen.tensor (transposed, permuted,
// channels_last, offset, gapped, expanded), each float dtype, weights,
// ignore_index, label smoothing, probability targets, every reduction.
func lossRowCases(g *opGen) {
	shapes := [][]int64{{20000, 3}, {3, 40000}, {2, 5, 9000}, {3, 4, 70, 80}, {40000}, {1, 3, 20000}, {2, 3, 2, 3, 900}}
	for _, sh := range shapes {
		c := sh[0]
		tshape := []int64(nil)
		if len(sh) > 1 {
			c = sh[1]
			tshape = append([]int64{sh[0]}, sh[2:]...)
		}
		for _, dt := range []DType{Float32, Float64, BFloat16} {
			red := []string{"none", "mean", "sum"}[g.rng.Intn(3)]
			in := g.tensor(dt, sh, true, g.randn)
			// Targets with ignore_index (1) and, at the end, one out of
			// range half of the time.
			tg := g.tensor(Int64, tshape, true, g.classValue(c, 1, 0))
			bad := g.tensor(Int64, tshape, false, g.classValue(c, 1, 0))
			last := make([]int64, len(tshape))
			for d := range last {
				last[d] = tshape[d] - 1
			}
			bad.StoreInt(storageIndex(bad, last), c)
			w := g.tensor(dt, []int64{c}, false, func() float64 { return 0.1 + g.rng.Float64() })
			pt := g.tensor(dt, sh, true, g.rng.Float64)
			// Probability targets in every reduction: a sum's rounding
			// can hide an element's.
			for _, red := range []string{"none", "mean", "sum"} {
				g.add("cross_entropy", map[string]*Tensor{"input": in, "target": pt}, map[string]any{"reduction": red})
				g.add("cross_entropy", map[string]*Tensor{"input": in, "target": pt, "weight": w}, map[string]any{"reduction": red, "label_smoothing": 0.2})
			}
			for _, t := range []*Tensor{tg, bad} {
				g.add("cross_entropy", map[string]*Tensor{"input": in, "target": t}, map[string]any{"reduction": red})
				g.add("cross_entropy", map[string]*Tensor{"input": in, "target": t, "weight": w}, map[string]any{"reduction": red, "ignore_index": int64(1)})
				g.add("cross_entropy", map[string]*Tensor{"input": in, "target": t, "weight": w}, map[string]any{"reduction": red, "label_smoothing": 0.3})
				g.add("cross_entropy", map[string]*Tensor{"input": in, "target": t}, map[string]any{"reduction": red, "label_smoothing": 0.1, "ignore_index": int64(1)})
				g.add("nll_loss", map[string]*Tensor{"input": in, "target": t, "weight": w}, map[string]any{"reduction": red, "ignore_index": int64(1)})
			}
			if dt != BFloat16 {
				edge := func() float64 { return []float64{0, 1, g.rng.Float64(), 1e-40}[g.rng.Intn(4)] }
				pr := g.tensor(dt, sh, true, edge)
				g.add("binary_cross_entropy", map[string]*Tensor{"input": pr, "target": pt}, map[string]any{"reduction": red})
				g.add("binary_cross_entropy", map[string]*Tensor{"input": pr, "target": pt, "weight": w}, map[string]any{"reduction": red})
			}
		}
	}
}

// indexRowCases adds embedding, index_select and gather with more indices
// than index_select reads at a time (65,536), valid and with one bad index
// near the end.
func indexRowCases(g *opGen) {
	for _, bad := range []bool{false, true} {
		tab := g.tensor(Float32, []int64{300, 5}, false, g.randn)
		tok := g.tensor(Int64, []int64{400, 350}, false, g.indexValue(300, 0, false))
		ix := g.tensor(Int64, []int64{150000}, false, g.indexValue(300, 0, false))
		gi := g.tensor(Int64, []int64{500, 200}, false, g.indexValue(300, 0, false))
		if bad {
			tok.StoreInt(storageIndex(tok, []int64{399, 300}), 300)
			ix.StoreInt(storageIndex(ix, []int64{140000}), -1)
			gi.StoreInt(storageIndex(gi, []int64{499, 3}), 300)
		}
		g.add("embedding", map[string]*Tensor{"input": tok, "weight": tab}, nil)
		g.add("index_select", map[string]*Tensor{"input": tab, "index": ix}, map[string]any{"dim": int64(0)})
		g.add("index_select", map[string]*Tensor{"input": g.tensor(Float64, []int64{4, 300}, false, g.randn), "index": ix}, map[string]any{"dim": int64(1)})
		src := g.tensor(Float32, []int64{500, 300}, false, g.randn)
		g.add("gather", map[string]*Tensor{"input": src, "index": gi}, map[string]any{"dim": int64(1)})
		g.add("gather", map[string]*Tensor{"input": src, "index": g.tensor(Int64, []int64{300, 300}, false, g.indexValue(500, 0, false))},
			map[string]any{"dim": int64(0)})
	}
}

// TestLossRows runs lossRowCases and indexRowCases, in both modes, through
// the fast paths (cross_entropy's log-softmax computed a row at a time and
// never built, the losses summed block by block, the indices read in place
// a block at a time) and through the general paths (the whole log-softmax
// built element by element, as before the row paths): outputs, notes and
// failures must be identical, bit for bit. In CPU mode the fast paths must
// also give the same bits on contiguous copies of the inputs, since they
// read each layout in place.
func TestLossRows(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // split rows across goroutines
	g := &opGen{rng: rand.New(rand.NewSource(21))}
	lossRowCases(g)
	indexRowCases(g)
	for _, c := range g.cases {
		op, err := Lookup(c.Op)
		require.NoError(t, err)
		for _, mode := range []Mode{ModeCPU, ModeCUDA} {
			fast := checkFastPath(t, op, c, mode)
			if mode != ModeCPU {
				continue
			}
			dense := map[string]*Tensor{}
			for n, x := range c.Tensors {
				dense[n] = x.Contiguous()
			}
			copied, err := op.Run(mode, dense, c.GoAttrs)
			require.NoError(t, err)
			msg := fmt.Sprintf("case %d (%s) on contiguous copies: %s", c.ID, c.Op, c.describe())
			require.Equal(t, failureText(fast.Failure), failureText(copied.Failure), msg)
			for n, o := range fast.Outputs {
				require.Equal(t, copied.Outputs[n].Contiguous().Data, o.Contiguous().Data, msg)
			}
		}
	}
}
