package kernels

import (
	"sort"
	"strings"
)

// Layout is a set of flags describing how a tensor's elements sit in its
// storage. Several may hold at once ("permuted+offset"). Contiguous and the
// channels-last flags follow PyTorch's definitions exactly; the others are
// reduce's own vocabulary for the layout classes a candidate must keep.
type Layout uint16

// The layout flags.
const (
	// LayoutContiguous: torch's is_contiguous() (IsContiguous).
	LayoutContiguous Layout = 1 << iota
	// LayoutChannelsLast: a 4-D tensor for which torch's
	// is_contiguous(memory_format=torch.channels_last) holds (IsChannelsLast).
	LayoutChannelsLast
	// LayoutChannelsLast3d: a 5-D tensor for which
	// is_contiguous(memory_format=torch.channels_last_3d) holds.
	LayoutChannelsLast3d
	// LayoutPermuted: the dims, sorted by stride, are not in row-major order
	// (a transpose or permute) and the tensor is not channels-last contiguous,
	// which is a permutation with a name of its own.
	LayoutPermuted
	// LayoutStrided: the elements are not densely packed: the innermost
	// stride exceeds 1 or some dim's stride exceeds the span of the dims
	// inside it, so there is padding between rows (x[:, ::2], a view into a
	// wider buffer). A window view (unfold) that covers its storage is not
	// strided.
	LayoutStrided
	// LayoutExpanded: some dim of size > 1 has stride 0 (expand, broadcast).
	LayoutExpanded
	// LayoutOverlapping: the dims of size > 1 and non-zero stride, sorted by
	// stride, do not nest (each stride at least the span of the dims inside
	// it). Every view in which two indices reach one storage element through
	// non-zero strides (unfold, as_strided windows) is flagged; so are a few
	// interleaved layouts that happen to be disjoint (sizes [2, 3], strides
	// [3, 2]): telling those apart costs a search this flag does not make.
	LayoutOverlapping
	// LayoutOffset: the storage offset is not zero.
	LayoutOffset
)

var layoutNames = []struct {
	f    Layout
	name string
}{
	{LayoutContiguous, "contiguous"},
	{LayoutChannelsLast, "channels_last"},
	{LayoutChannelsLast3d, "channels_last_3d"},
	{LayoutPermuted, "permuted"},
	{LayoutStrided, "strided"},
	{LayoutExpanded, "expanded"},
	{LayoutOverlapping, "overlapping"},
	{LayoutOffset, "offset"},
}

// Has reports whether every flag of f is set in l.
func (l Layout) Has(f Layout) bool { return l&f == f }

// String joins the flag names with "+" in a fixed order, as in
// "contiguous", "channels_last", "permuted+offset". A set with no flag, which
// Tensor.Layout never returns, prints as "none".
func (l Layout) String() string {
	var parts []string
	for _, n := range layoutNames {
		if l&n.f != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// IsContiguous is torch's Tensor.is_contiguous() (c10 TensorImpl
// compute_contiguous): an empty tensor is contiguous; otherwise, walking the
// dims from the last, every dim of size other than 1 must have the stride of
// a dense row-major packing of the dims after it. Dims of size 1 are ignored,
// whatever their stride. The storage offset plays no part.
func (t *Tensor) IsContiguous() bool {
	for _, s := range t.Shape {
		if s == 0 {
			return true
		}
	}
	z := int64(1)
	for d := len(t.Shape) - 1; d >= 0; d-- {
		if t.Shape[d] != 1 {
			if t.Strides[d] != z {
				return false
			}
			z *= t.Shape[d]
		}
	}
	return true
}

// Dim orders, from innermost to outermost, of torch's channels-last checks.
var (
	channelsLast2dOrder = []int{1, 3, 2, 0}
	channelsLast3dOrder = []int{1, 4, 3, 2, 0}
)

// denseIn is c10's compute_channels_last_contiguous_{2d,3d}: the dims, in the
// given order, must be densely packed, skipping dims of size 1. Unlike
// compute_contiguous there is no shortcut for empty tensors: a dim of size 0
// is checked and multiplies the expected stride by 0.
func (t *Tensor) denseIn(order []int) bool {
	expected := int64(1)
	for _, d := range order {
		if t.Shape[d] != 1 {
			if t.Strides[d] != expected {
				return false
			}
			expected *= t.Shape[d]
		}
	}
	return true
}

// IsChannelsLast is torch's is_contiguous(memory_format=torch.channels_last):
// a 4-D (N, C, H, W) tensor whose dims, from the innermost C, W, H to N, are
// densely packed (size-1 dims skipped). It is false for every other rank, as
// in torch 1.13.
func (t *Tensor) IsChannelsLast() bool {
	return len(t.Shape) == 4 && len(t.Strides) == 4 && t.denseIn(channelsLast2dOrder)
}

// IsChannelsLast3d is torch's is_contiguous(memory_format=torch.channels_last_3d):
// the 5-D (N, C, D, H, W) analogue of IsChannelsLast, innermost C, W, H, D, N.
func (t *Tensor) IsChannelsLast3d() bool {
	return len(t.Shape) == 5 && len(t.Strides) == 5 && t.denseIn(channelsLast3dOrder)
}

// StrideOrder lists the dims that address memory, those of size > 1 and
// non-zero stride, from the innermost (smallest stride) to the outermost.
// Equal strides, which only overlapping views have, are ordered by dim, the
// later dim inner, as in a row-major tensor. Two tensors with the same
// StrideOrder have the same layout class up to padding.
func (t *Tensor) StrideOrder() []int {
	var ds []int
	for d := range t.Shape {
		if t.Shape[d] > 1 && t.Strides[d] > 0 {
			ds = append(ds, d)
		}
	}
	sort.SliceStable(ds, func(a, b int) bool {
		da, db := ds[a], ds[b]
		if t.Strides[da] != t.Strides[db] {
			return t.Strides[da] < t.Strides[db]
		}
		return da > db
	})
	return ds
}

// Layout classifies t. An empty tensor reaches no element, so only the flags
// torch computes from strides alone (contiguous, channels-last) and Offset
// are reported for it. t must be valid.
func (t *Tensor) Layout() Layout {
	var l Layout
	if t.IsContiguous() {
		l |= LayoutContiguous
	}
	if t.IsChannelsLast() {
		l |= LayoutChannelsLast
	}
	if t.IsChannelsLast3d() {
		l |= LayoutChannelsLast3d
	}
	if t.Offset != 0 {
		l |= LayoutOffset
	}
	if t.Numel() == 0 {
		return l
	}
	for d := range t.Shape {
		if t.Shape[d] > 1 && t.Strides[d] == 0 {
			l |= LayoutExpanded
		}
	}
	order := t.StrideOrder()
	named := l&(LayoutContiguous|LayoutChannelsLast|LayoutChannelsLast3d) != 0
	span := int64(1) // 1 + the largest offset the dims inside reach
	for k, d := range order {
		if k > 0 && !named && order[k-1] < d {
			l |= LayoutPermuted
		}
		if t.Strides[d] > span {
			l |= LayoutStrided // padding after the block of the dims inside
		} else if t.Strides[d] < span {
			l |= LayoutOverlapping
		}
		span += (t.Shape[d] - 1) * t.Strides[d]
	}
	return l
}

// nests reports whether no two indices of t reach one storage element:
// there is no expanded dim and the addressing dims nest. It is the test
// that lets Replace skip its read-back check.
func (t *Tensor) nests() bool {
	l := t.Layout()
	return l&(LayoutExpanded|LayoutOverlapping) == 0
}
