package kernels

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// ErrOverlap is returned by Replace when the slice to replace shares storage
// with other elements (an expanded or overlapping view), so that no storage
// with t's layout holds the requested values.
var ErrOverlap = errors.New("elements share storage")

// normDim maps a dim to [0, rank), accepting PyTorch's negative dims
// (-1 is the last).
func (t *Tensor) normDim(dim int) (int, error) {
	n := len(t.Shape)
	if dim < -n || dim >= n {
		return 0, fmt.Errorf("%w: dim %d for a tensor of %d dims (expected in [%d, %d])", ErrIndex, dim, n, -n, n-1)
	}
	if dim < 0 {
		dim += n
	}
	return dim, nil
}

// Select returns a tensor with its own storage whose size along dim is
// len(indices) and whose slice k along dim is t's slice indices[k], as
// torch.index_select(t, dim, indices) computes (duplicates and any order are
// allowed; negative indices are not, as in index_select). Negative dims count
// from the end.
//
// Unlike index_select, which returns a contiguous tensor, Select keeps t's
// layout, so that a candidate batch built from a subset of samples reaches
// the same kernels: the dtype; the storage offset (the storage before it is
// copied from t); expanded dims (stride 0, and nothing of them is stored
// twice); the stride order of the dims; and the padding between them. The
// strides come from a chain over the dims in stride order, innermost first:
//
//	stride'[c_0] = stride[c_0]
//	stride'[c_k] = stride'[c_{k-1}]·max(size'[c_{k-1}], 1) + gap[c_k]
//	gap[c_k]     = stride[c_k] − stride[c_{k-1}]·max(size[c_{k-1}], 1)
//
// so every dim inside dim keeps its stride, dim keeps its stride, and the
// dims outside it keep their padding while making room for the new size.
// Selecting along the outermost dim (the batch dim of most tensors) therefore
// keeps every stride exactly. Dims of size 1, whose stride torch ignores,
// keep their stride when it fits the chain (and then move with it) and keep
// it verbatim otherwise. A dim of size 1 that grows (indices [0, 0]) is placed
// where t's memory format puts it: row-major if t.IsContiguous(), else
// channels-last if t is channels-last contiguous, else where its stride
// falls among the other dims, else row-major; it is packed densely on the
// dim inside it (its old stride is no promise of storage, so it does not
// become padding) and the dims above keep their padding.
//
// Overlapping views: strides of dims inside dim are kept, so a per-sample
// window view (unfold) stays one. Where dim itself or a dim outside it
// overlaps its neighbours (sizes [3, 2], strides [1, 1], selected along 0),
// no storage with the original strides can hold the selected values in
// general; such a stride is raised to the smallest that does not overlap the
// dims inside it (plus any padding it had): the nearest non-overlapping
// layout in the same order.
//
// What cannot be kept: a selection of 0 indices gives an empty tensor, which
// torch calls contiguous whatever its strides; one that leaves dim with a
// single index drops it from the contiguity checks (torch ignores size-1
// dims), which can turn a transposed or channels-last tensor contiguous.
//
// The cost is proportional to the storage of the result, not of t: slices
// are moved with one copy() per run that is dense in both tensors, and runs
// of consecutive indices are merged.
func (t *Tensor) Select(dim int, indices []int64) (*Tensor, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	u, elems, err := t.SelectLayout(dim, indices, t.StorageElems())
	if err != nil {
		return nil, err
	}
	es := int64(t.DType.Size())
	d, _ := t.normDim(dim)
	u.Data = make([]byte, elems*es)
	copy(u.Data, t.Data[:min(t.Offset, t.StorageElems())*es])
	if ext := u.Extent(); ext > 0 {
		newCopyPlan(u.Shape, u.Strides, t.Strides, d, indices, int(es)).exec(u.Data, t.Data, t.Offset, t.Offset)
	}
	return u, nil
}

// SelectLayout is Select without the data, for a t whose storage holds
// storage elements (t.Data is not read and may be nil): the tensor Select
// would return, with Data nil, and the number of storage elements it would
// have. Its first min(t.Offset, storage) elements are a copy of t's, the
// elements its view reaches are t's selected ones, and every other element
// is zero. A candidate described to a replay's process (fixtures.View) is
// laid out with it, so that the process builds the tensor Select builds.
func (t *Tensor) SelectLayout(dim int, indices []int64, storage int64) (*Tensor, int64, error) {
	if err := t.validateIn(storage); err != nil {
		return nil, 0, err
	}
	d, err := t.normDim(dim)
	if err != nil {
		return nil, 0, err
	}
	size := t.Shape[d]
	for k, i := range indices {
		if i < 0 || i >= size {
			return nil, 0, fmt.Errorf("%w: index %d (position %d) for dim %d of size %d", ErrIndex, i, k, d, size)
		}
	}
	m := int64(len(indices))
	strides, err := t.restride(d, m)
	if err != nil {
		return nil, 0, err
	}
	shape := append([]int64(nil), t.Shape...)
	shape[d] = m
	if _, err := checkedNumel(shape); err != nil {
		return nil, 0, err // torch: "Storage size calculation overflowed"
	}
	u := &Tensor{DType: t.DType, Shape: shape, Strides: strides, Offset: t.Offset}
	ext, err := extent(shape, strides)
	if err != nil {
		return nil, 0, err
	}
	elems := min(t.Offset, storage)
	if ext > 0 {
		var ok bool
		if elems, ok = addOK(t.Offset, ext); !ok {
			return nil, 0, fmt.Errorf("%w: offset %d + extent %d", ErrOverflow, t.Offset, ext)
		}
	}
	if nbytes, ok := mulOK(elems, int64(t.DType.Size())); !ok || nbytes > math.MaxInt {
		return nil, 0, fmt.Errorf("%w: %d elements of %s", ErrOverflow, elems, t.DType)
	}
	return u, elems, nil
}

// restride computes the strides Select gives t's layout with size m along
// dim; see Select for the rules.
func (t *Tensor) restride(dim int, m int64) ([]int64, error) {
	S, R := t.Shape, t.Strides
	out := append([]int64(nil), R...)
	grown := S[dim] == 1 && m > 1

	// The chain: dims with a positive stride, in stride order; equal strides
	// put the smaller dim inside (a size-1 dim sharing its stride with the
	// dim it was sliced from sits inside it, as torch lays them out), then the
	// later dim. A size-1 dim whose stride falls inside the span of the dims
	// below it does not fit and keeps its stride outside the chain.
	var chain []int
	for e := range S {
		if R[e] > 0 && (S[e] > 1 || e != dim || !grown) {
			chain = append(chain, e)
		}
	}
	less := func(a, b int) bool {
		if R[a] != R[b] {
			return R[a] < R[b]
		}
		if S[a] != S[b] {
			return S[a] < S[b]
		}
		return a > b
	}
	sort.SliceStable(chain, func(i, j int) bool { return less(chain[i], chain[j]) })
	reach := int64(1) // the largest stride·size of the dims of size > 1 so far
	kept := chain[:0]
	for _, e := range chain {
		if S[e] > 1 {
			r, ok := mulOK(R[e], S[e])
			if !ok {
				return nil, fmt.Errorf("%w: stride %d × size %d of dim %d", ErrOverflow, R[e], S[e], e)
			}
			reach = max(reach, r)
		} else if R[e] < reach {
			continue
		}
		kept = append(kept, e)
	}
	chain = kept

	// The gaps, measured on t.
	gaps := make([]int64, len(chain))
	base := int64(1)
	for k, e := range chain {
		gaps[k] = R[e] - base
		var ok bool
		if base, ok = mulOK(R[e], max(S[e], 1)); !ok {
			return nil, fmt.Errorf("%w: stride %d × size %d of dim %d", ErrOverflow, R[e], S[e], e)
		}
	}

	if grown {
		// Dense on the dim inside it (gap 0); the dim above keeps its own
		// gap. A size-1 dim's stride is no promise of storage: honouring it
		// as padding could make the result arbitrarily larger than t.
		pos := t.growPosition(dim, chain, less)
		chain = slices.Insert(chain, pos, dim)
		gaps = slices.Insert(gaps, pos, 0)
	}

	posD := len(chain)
	for k, e := range chain {
		if e == dim {
			posD = k
		}
	}
	base, span := int64(1), int64(1)
	for k, e := range chain {
		size := S[e]
		if e == dim {
			size = m
		}
		r := base + gaps[k] // gaps[k] may be negative (overlap)
		if (gaps[k] > 0) != (r > base) && gaps[k] != 0 {
			if size > 1 {
				return nil, fmt.Errorf("%w: stride of dim %d", ErrOverflow, e)
			}
			// A size-1 dim with a huge stride, necessarily outermost: its
			// stride addresses nothing, keep it.
			r = R[e]
		}
		if k >= posD && r < span {
			r = span
		}
		out[e] = r
		var ok bool
		if base, ok = mulOK(r, max(size, 1)); !ok {
			return nil, fmt.Errorf("%w: stride %d × size %d of dim %d", ErrOverflow, r, size, e)
		}
		w, ok := mulOK(r, max(size-1, 0))
		if ok {
			span, ok = addOK(span, w)
		}
		if !ok {
			return nil, fmt.Errorf("%w: extent of dim %d", ErrOverflow, e)
		}
	}
	return out, nil
}

// growPosition says where in the chain (t's dims in stride order, without
// dim) a size-1 dim that grows goes. A contiguous or channels-last
// contiguous t puts it where its memory format does, so that the flags
// survive. Otherwise its stride decides when it fits between the dims below
// and above it; a stride that fits nowhere (0, or inside another dim's span)
// falls back to row-major.
func (t *Tensor) growPosition(dim int, chain []int, less func(a, b int) bool) int {
	S, R := t.Shape, t.Strides
	var order []int // outermost first; nil is row-major
	switch {
	case t.IsContiguous():
	case len(S) == 4 && t.IsChannelsLast():
		order = []int{0, 2, 3, 1}
	case len(S) == 5 && t.IsChannelsLast3d():
		order = []int{0, 2, 3, 4, 1}
	default:
		if R[dim] > 0 {
			pos, reach := 0, int64(1)
			for k, e := range chain {
				if less(e, dim) {
					pos = k + 1
					if S[e] > 1 {
						reach = max(reach, R[e]*S[e])
					}
				}
			}
			if R[dim] >= reach {
				// Right above the dim of size > 1 below it: the size-1 dims
				// in between carry padding only for the dims above them.
				for pos > 0 && S[chain[pos-1]] <= 1 {
					pos--
				}
				return pos
			}
		}
	}
	rank := func(e int) int {
		if order == nil {
			return e
		}
		return slices.Index(order, e)
	}
	// Just outside the outermost dim that the format puts inside dim.
	pos := 0
	for k, e := range chain {
		if S[e] > 1 && rank(e) > rank(dim) {
			pos = k + 1
		}
	}
	return pos
}

// Replace returns a copy of t, with the same strides, offset and storage
// length, in which slice i along dim holds donor's slice j along dim. donor
// must have t's dtype and rank and t's sizes except along dim; it may be t
// itself (the copy is read from the unmodified t). Negative dims count from
// the end.
//
// When t's slices share storage (an expanded dim, an overlapping view), the
// write is checked by reading everything back, and if the storage cannot hold
// the replaced slice next to the untouched ones, Replace fails with
// ErrOverlap rather than return a tensor whose other slices changed too.
func (t *Tensor) Replace(dim int, i int64, donor *Tensor, j int64) (*Tensor, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := donor.Validate(); err != nil {
		return nil, fmt.Errorf("donor: %w", err)
	}
	d, err := t.normDim(dim)
	if err != nil {
		return nil, err
	}
	if donor.DType != t.DType {
		return nil, fmt.Errorf("%w: donor is %s, tensor is %s", ErrDType, donor.DType, t.DType)
	}
	if len(donor.Shape) != len(t.Shape) {
		return nil, fmt.Errorf("%w: donor has %d dims, tensor %d", ErrShape, len(donor.Shape), len(t.Shape))
	}
	for e := range t.Shape {
		if e != d && donor.Shape[e] != t.Shape[e] {
			return nil, fmt.Errorf("%w: donor shape %v does not match %v outside dim %d", ErrShape, donor.Shape, t.Shape, d)
		}
	}
	if i < 0 || i >= t.Shape[d] {
		return nil, fmt.Errorf("%w: index %d for dim %d of size %d", ErrIndex, i, d, t.Shape[d])
	}
	if j < 0 || j >= donor.Shape[d] {
		return nil, fmt.Errorf("%w: donor index %d for dim %d of size %d", ErrIndex, j, d, donor.Shape[d])
	}
	u := t.Clone()
	slice := append([]int64(nil), t.Shape...)
	slice[d] = 1
	if n, _ := checkedNumel(slice); n == 0 {
		return u, nil
	}
	es := t.DType.Size()
	newCopyPlan(slice, t.Strides, donor.Strides, -1, nil, es).exec(u.Data, donor.Data,
		t.Offset+i*t.Strides[d], donor.Offset+j*donor.Strides[d])
	if t.nests() {
		return u, nil
	}
	// Shared storage: every element must read back as intended. Dims that
	// are expanded in both t and donor repeat one element; they are walked
	// once, which keeps an expanded batch of 2^40 cheap.
	walk := &Tensor{Shape: append([]int64(nil), t.Shape...), Strides: t.Strides, Offset: t.Offset}
	for e := range walk.Shape {
		if e != d && t.Strides[e] == 0 && donor.Strides[e] == 0 {
			walk.Shape[e] = min(walk.Shape[e], 1)
		}
	}
	var bad []int64
	walk.Each(func(idx []int64, e int64) {
		if bad != nil {
			return
		}
		want := t.Data[e*int64(es) : (e+1)*int64(es)]
		if idx[d] == i {
			de := donor.Offset + j*donor.Strides[d]
			for k, x := range idx {
				if k != d {
					de += x * donor.Strides[k]
				}
			}
			want = donor.Data[de*int64(es) : (de+1)*int64(es)]
		}
		if !bytes.Equal(u.Data[e*int64(es):(e+1)*int64(es)], want) {
			bad = append([]int64(nil), idx...)
		}
	})
	if bad != nil {
		return nil, fmt.Errorf("%w: replacing slice %d of dim %d changes element %v, which shares its storage (layout %s)",
			ErrOverlap, i, d, bad, t.Layout())
	}
	return u, nil
}

// SetElements returns a copy of t, same layout and storage, with the element
// at each multi-index set to v, converted as StoreFloat converts. It writes
// storage, as an in-place write in torch would: in an expanded or
// overlapping view every element sharing the written storage changes too
// (check t.Layout() for LayoutExpanded or LayoutOverlapping first when that
// matters).
func (t *Tensor) SetElements(indices [][]int64, v float64) (*Tensor, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	u := t.Clone()
	for _, idx := range indices {
		if err := u.SetFloat(v, idx...); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// Contiguous returns a dense row-major copy of t (ContiguousStrides, offset
// 0, storage exactly Numel elements), what exporters and torch's
// .contiguous() produce. t must be valid; Contiguous panics with the
// validation error otherwise.
func (t *Tensor) Contiguous() *Tensor {
	if err := t.Validate(); err != nil {
		panic(fmt.Sprintf("kernels: Contiguous of an invalid tensor: %v", err))
	}
	n := t.Numel()
	u := &Tensor{
		DType:   t.DType,
		Shape:   append([]int64(nil), t.Shape...),
		Strides: ContiguousStrides(t.Shape),
		Data:    make([]byte, n*int64(t.DType.Size())),
	}
	if n > 0 {
		p := newCopyPlan(u.Shape, u.Strides, t.Strides, -1, nil, t.DType.Size())
		p.tile = !generalOnly // u is dense: no two elements in one place
		p.exec(u.Data, t.Data, 0, t.Offset)
	}
	return u
}
