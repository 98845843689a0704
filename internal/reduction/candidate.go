package reduction

import (
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"reduce/fixtures"
	"reduce/kernels"
)

// candidate is a batch made from the recorded one, as the backend replays
// it: a fixtures.View (which recorded samples it keeps, in its order; the
// elements of them it sets to other values; the dims it cuts; the
// per-sample values it changes). Every phase describes its candidates this
// way (samples, neutralize and size by rows, elements and boundary by
// edits of a culprit set's elements, shape by a cut of a finding's batch,
// relation by its values), and the journal keys answers by the
// description, so the same batch asked for by two phases is replayed once.
// An edit stays in units until the candidate is replayed (view): the key
// names its elements by unit, and one answered already costs no packing.
type candidate struct {
	// View's Rows are positions in the recorded batch along its batch
	// axis, in the candidate's order; repeats are allowed (neutralize
	// fills a batch with copies of a benign sample). nil keeps every
	// sample, as recorded. Set is empty: edit holds the elements set.
	fixtures.View
	// edit, when set, changes elements of its space's batch, whose rows
	// are View.Rows.
	edit *edit
	// size is what progress reports of the candidate (samples, or
	// elements kept); it is not part of the description.
	size int
}

// keepRows is the candidate that keeps rows r (nil: every sample).
// wholeSamples are c's rows when c is recorded samples as they are (no
// element set, no dim cut or dropped, no value changed, the recorded
// state kept), else nil: what its answer says of those samples.
func (c *candidate) wholeSamples() []int64 {
	if c.edit != nil || c.Narrow != nil || c.Squeeze != nil || c.Values != nil || c.FreshState || c.Eager || len(c.Set) > 0 || (c.Steps != nil && !noEarlierSteps(c.Steps)) {
		return nil
	}
	return c.Rows
}

// noEarlierSteps says whether steps keep no sample of a window's earlier
// steps: the failing step's batch alone, from the window's start.
func noEarlierSteps(steps [][]int64) bool {
	for _, rows := range steps {
		if rows == nil || len(rows) > 0 {
			return false
		}
	}
	return steps != nil
}

func keepRows(r []int64, size int) *candidate {
	return &candidate{View: fixtures.View{Rows: r}, size: size}
}

// narrowed is base with the first size positions of dim dims[k] of each
// tensor tensors[k] kept (a padded dim's lengths clipped to it), layout
// kept: the shape search's candidates.
func (base *candidate) narrowed(tensors, dims []int, size int64) *candidate {
	c := *base
	c.Narrow, c.size = &fixtures.Narrowing{Tensors: tensors, Dims: dims, Size: size}, int(size)
	return &c
}

// squeezed is base with dim of tensor ti, of size 1, dropped: the shape
// search's probe of a column that the step may want without its dim.
func (base *candidate) squeezed(ti, dim int) *candidate {
	c := *base
	c.Squeeze = &fixtures.Squeezing{Tensor: ti, Dim: dim}
	return &c
}

// withValues is base with the per-sample value at path of its sample k set
// to set[k]: the relation search's candidates.
func (base *candidate) withValues(path string, set map[int]json.RawMessage) *candidate {
	c := *base
	c.Values = &fixtures.SampleValues{Path: path, Set: set}
	return &c
}

// edit sets elements of a unit space's batch: the searched units not in
// keep take their neutral value, and those in set the value given.
type edit struct {
	space *unitSpace
	keep  []int // searched units kept, sorted
	set   map[int]value
}

// value is what an element is set to: an integer or a float, as its
// tensor's dtype holds.
type value struct {
	i int64
	f float64
}

// unit is one element the element phase may change.
type unit struct {
	tensor  int     // in the batch's tensors
	storage int64   // its storage element in the rows' batch
	index   []int64 // its index in the rows' batch
	id      int64   // its number in the space, for descriptions
	float   bool
	neutral value // what it becomes when dropped
}

// unitSpace is the elements the element phase searches in the batch of
// some rows: of every batched tensor that is neither bool nor expanded nor
// overlapping, tensor by tensor, in the row-major order of their index,
// those in the searched rows (all of them when searched is nil). A unit's
// id counts every such element before it, searched or not, so that the
// description of an edit names elements whatever the rows searched.
type unitSpace struct {
	rows  []int64
	sub   *fixtures.Batch // the rows' batch
	units []unit
	// donors are the recorded samples whose values the rows' dropped
	// elements take (row k donor k), nil when none: part of every
	// description of an edit.
	donors []int64
}

// donorFunc gives the value a dropped element of tensor ti at idx (an
// index of the rows' batch) takes from a donor sample, if there is one.
type donorFunc func(ti int, idx []int64) (value, bool)

// newUnitSpace numbers the elements of sub, the batch of rows, that lie
// in the searched positions along the batch axis (all when nil). It stops
// past limit units (the caller reports the samples without elements).
//
// A dropped element takes its neutral value: the op's (a target's
// ignore_index), else, for a step of the user's own, the value a donor
// sample (one known to pass) holds at the same place, else zero. Zero is
// not neutral for a step: it is a relation (every dropped key equal to
// every other), a length of nothing, a divisor.
func newUnitSpace(rows []int64, sub *fixtures.Batch, searched []int64, limit int, donor donorFunc) *unitSpace {
	sp := &unitSpace{rows: rows, sub: sub}
	in := map[int64]bool{}
	for _, x := range searched {
		in[x] = true
	}
	op, _ := kernels.Lookup(sub.Op) // nil for a step of the user's own
	var base int64
	for ti, e := range sub.Tensors {
		if e.BatchDim == nil || e.DType == kernels.Bool || e.Layout().Has(kernels.LayoutExpanded) || e.Layout().Has(kernels.LayoutOverlapping) {
			continue
		}
		isFloat := e.DType.IsFloat()
		var opNeutral *value
		if op != nil {
			v, _ := op.Neutral(e.Name, sub.Attrs)
			opNeutral = &value{i: v}
			if isFloat {
				opNeutral = &value{}
			}
		}
		bd := *e.BatchDim
		e.Each(func(idx []int64, s int64) {
			if searched != nil && !in[idx[bd]] {
				return
			}
			if len(sp.units) > limit {
				return
			}
			u := unit{tensor: ti, storage: s, index: slices.Clone(idx), id: base + linear(idx, e.Shape), float: isFloat}
			switch {
			case opNeutral != nil:
				u.neutral = *opNeutral
			case donor != nil:
				u.neutral, _ = donor(ti, idx)
			}
			var v value
			if isFloat {
				v.f = e.Tensor.LoadFloat(s)
			} else {
				v.i = e.Tensor.LoadInt(s)
			}
			if v == u.neutral {
				return // dropping it changes nothing: not a unit to search
			}
			sp.units = append(sp.units, u)
		})
		base += e.Numel()
	}
	return sp
}

// linear is idx's position in the row-major order of shape.
func linear(idx, shape []int64) int64 {
	var n int64
	for d, x := range idx {
		n = n*shape[d] + x
	}
	return n
}

// original is the value unit u holds in the rows' batch.
func (sp *unitSpace) original(u int) value {
	un := sp.units[u]
	t := sp.sub.Tensors[un.tensor].Tensor
	if un.float {
		return value{f: t.LoadFloat(un.storage)}
	}
	return value{i: t.LoadInt(un.storage)}
}

// same reports whether unit u holds the same value under a and b.
func (sp *unitSpace) same(u int, a, b value) bool {
	if sp.units[u].float {
		return a.f == b.f
	}
	return a.i == b.i
}

// key is the description of a candidate as text: its rows as shrink
// writes candidates ({0-3,7}; a run of one repeated sample as 5x100),
// then for an edit its donors (donors{...}) when it has any, the ids of
// the neutralized units and the units set, id=value; then a cut,
// narrow{tensor:dim,...}=size, and values set, values{"path",k=value,...}.
// A unit set to its original value is no edit, and one set to its neutral
// value is neutralized, so that a boundary probe at either is the element
// search's candidate; an element already at its neutral value is no unit.
func (c *candidate) key(samples int64) string {
	var b strings.Builder
	writeRows(&b, c.Rows, samples)
	if c.edit != nil {
		c.edit.writeKey(&b)
	}
	if n := c.Narrow; n != nil {
		b.WriteString(" narrow{")
		for k, ti := range n.Tensors {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(ti) + ":" + strconv.Itoa(n.Dims[k]))
		}
		b.WriteString("}=" + strconv.FormatInt(n.Size, 10))
	}
	if q := c.Squeeze; q != nil {
		b.WriteString(" squeeze{" + strconv.Itoa(q.Tensor) + ":" + strconv.Itoa(q.Dim) + "}")
	}
	if v := c.Values; v != nil {
		b.WriteString(" values{" + strconv.Quote(v.Path))
		for _, k := range slices.Sorted(maps.Keys(v.Set)) {
			b.WriteString("," + strconv.Itoa(k) + "=" + string(v.Set[k]))
		}
		b.WriteString("}")
	}
	if c.FreshState {
		b.WriteString(" fresh_state")
	}
	if c.Eager {
		b.WriteString(" eager")
	}
	if c.Steps != nil {
		// The window's steps: each one's rows, "*" for all, {} for none.
		b.WriteString(" steps{")
		for k, rows := range c.Steps {
			if k > 0 {
				b.WriteByte(';')
			}
			if rows == nil {
				b.WriteByte('*')
			} else {
				writeRanges(&b, rows)
			}
		}
		b.WriteString("}")
	}
	for _, set := range c.Set {
		// Elements set by a view of its own (the window's elements probe).
		b.WriteString(" set{" + strconv.Itoa(set.Tensor) + ":" + hex.EncodeToString(set.At) + "=" + hex.EncodeToString(set.Bits) + "}")
	}
	return b.String()
}

// writeKey writes the edit's part of its candidate's key.
func (e *edit) writeKey(b *strings.Builder) {
	sp := e.space
	if sp.donors != nil {
		b.WriteString(" donors")
		writeRanges(b, sp.donors)
	}
	var neutral []int64
	type setTo struct {
		id int64
		v  string
	}
	var set []setTo
	e.changes(func(u int, v value, isNeutral bool) {
		switch {
		case isNeutral:
			neutral = append(neutral, sp.units[u].id)
		case sp.same(u, v, sp.original(u)):
		case sp.same(u, v, sp.units[u].neutral):
			neutral = append(neutral, sp.units[u].id)
		case sp.units[u].float:
			set = append(set, setTo{sp.units[u].id, strconv.FormatFloat(v.f, 'g', -1, 64)})
		default:
			set = append(set, setTo{sp.units[u].id, strconv.FormatInt(v.i, 10)})
		}
	})
	if len(neutral) == 0 && len(set) == 0 {
		return
	}
	b.WriteString(" neutral")
	writeRanges(b, neutral)
	for _, s := range set {
		b.WriteString(" " + strconv.FormatInt(s.id, 10) + "=" + s.v)
	}
}

// writeRows writes rows (nil: 0 to samples-1) as {a-b,c,dxk}.
func writeRows(b *strings.Builder, rows []int64, samples int64) {
	switch {
	case rows != nil:
		writeRanges(b, rows)
	case samples == 1:
		b.WriteString("{0}")
	default:
		b.WriteString("{0-" + strconv.FormatInt(samples-1, 10) + "}")
	}
}

// writeRanges writes a sequence as runs: a-b for consecutive ascending
// values, vxk for a value repeated k times, v alone otherwise.
func writeRanges(b *strings.Builder, seq []int64) {
	b.WriteByte('{')
	for i := 0; i < len(seq); {
		if i > 0 {
			b.WriteByte(',')
		}
		j := i
		for j+1 < len(seq) && seq[j+1] == seq[i] {
			j++
		}
		if j > i {
			b.WriteString(strconv.FormatInt(seq[i], 10) + "x" + strconv.Itoa(j-i+1))
			i = j + 1
			continue
		}
		for j+1 < len(seq) && seq[j+1] == seq[j]+1 {
			j++
		}
		b.WriteString(strconv.FormatInt(seq[i], 10))
		if j > i {
			b.WriteString("-" + strconv.FormatInt(seq[j], 10))
		}
		i = j + 1
	}
	b.WriteByte('}')
}

// changes calls fn, in unit order, for every searched unit the edit
// changes, with the value it takes: its neutral value (isNeutral) for a
// unit not kept, the value set for a unit set. It is what both the
// description and the batch are made from; keep is sorted, so it is
// walked, not looked up.
func (e *edit) changes(fn func(u int, v value, isNeutral bool)) {
	k := 0
	for u, un := range e.space.units {
		for k < len(e.keep) && e.keep[k] < u {
			k++
		}
		if v, isSet := e.set[u]; isSet {
			fn(u, v, false)
		} else if k == len(e.keep) || e.keep[k] != u {
			fn(u, un.neutral, true)
		}
	}
}

// build makes the candidate's batch from the recorded one, for a fixture:
// its view applied (fixtures.Batch.Apply), as the go worker applies it to
// the mapped file.
func (c *candidate) build(orig *fixtures.Batch) (*fixtures.Batch, error) {
	return orig.Apply(c.view())
}

// view is the candidate as a replay's process takes it (fixtures.View):
// for an edit, the elements it changes packed with their bytes, per
// tensor.
func (c *candidate) view() *fixtures.View {
	if c.edit == nil {
		return &c.View
	}
	sp := c.edit.space
	v := c.View
	sets := map[int]*fixtures.ElementSet{}
	c.edit.changes(func(u int, x value, _ bool) {
		un := sp.units[u]
		e := sp.sub.Tensors[un.tensor]
		set := sets[un.tensor]
		if set == nil {
			set = &fixtures.ElementSet{Tensor: un.tensor}
			sets[un.tensor] = set
		}
		set.AddValue(linear(un.index, e.Shape), e.DType, un.float, x.i, x.f)
	})
	for _, ti := range slices.Sorted(maps.Keys(sets)) {
		v.Set = append(v.Set, *sets[ti])
	}
	return &v
}

// rowsOf are the positions of a shrink candidate's units.
func rowsOf(units []int) []int64 {
	out := make([]int64, len(units))
	for i, x := range units {
		out[i] = int64(x)
	}
	return out
}

// prefix is the first k samples.
func prefix(k int64) []int64 {
	out := make([]int64, k)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

// repeat is v, n times.
func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
