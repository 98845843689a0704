package kernels

// Test helpers that build the views torch builds (permute, slicing with a
// step, expand, unfold, channels_last), sharing storage with their base as
// torch's views do. They are test-only: the package itself never needs to
// make views.

// iotaTensor is a contiguous tensor whose storage element e holds a value
// derived from e that the dtype represents exactly and that differs between
// neighbours (bool alternates).
func iotaTensor(dt DType, shape ...int64) *Tensor {
	t := MustNew(dt, shape...)
	fillDistinct(t)
	return t
}

func fillDistinct(t *Tensor) {
	n := t.StorageElems()
	for e := int64(0); e < n; e++ {
		t.StoreInt(e, distinctValue(t.DType, e))
	}
}

func distinctValue(dt DType, e int64) int64 {
	switch dt {
	case Bool:
		return e % 2
	case Uint8, Int8:
		return e%97 + 1
	case Float16, BFloat16:
		return e%199 - 99 // exact in bfloat16's 8-bit mantissa
	default:
		return e*7 + 3
	}
}

func shareView(t *Tensor, shape, strides []int64, offset int64) *Tensor {
	return &Tensor{DType: t.DType, Shape: shape, Strides: strides, Offset: offset, Data: t.Data}
}

// permuteView is torch's permute: result dim k is t's dim perm[k].
func permuteView(t *Tensor, perm ...int) *Tensor {
	sh := make([]int64, len(perm))
	st := make([]int64, len(perm))
	for k, p := range perm {
		sh[k], st[k] = t.Shape[p], t.Strides[p]
	}
	return shareView(t, sh, st, t.Offset)
}

// sliceView is t[..., start:stop:step, ...] along dim.
func sliceView(t *Tensor, dim int, start, stop, step int64) *Tensor {
	sh := append([]int64(nil), t.Shape...)
	st := append([]int64(nil), t.Strides...)
	sh[dim] = (stop - start + step - 1) / step
	st[dim] *= step
	return shareView(t, sh, st, t.Offset+start*t.Strides[dim])
}

// expandView is torch's expand: dims of size 1 grow with stride 0.
func expandView(t *Tensor, shape ...int64) *Tensor {
	st := append([]int64(nil), t.Strides...)
	for d := range shape {
		if t.Shape[d] == 1 && shape[d] != 1 {
			st[d] = 0
		}
	}
	return shareView(t, append([]int64(nil), shape...), st, t.Offset)
}

// unfoldView is torch's unfold(dim, size, step): windows along dim, the
// window index a new last dim.
func unfoldView(t *Tensor, dim int, size, step int64) *Tensor {
	sh := append([]int64(nil), t.Shape...)
	st := append([]int64(nil), t.Strides...)
	sh[dim] = (t.Shape[dim]-size)/step + 1
	st[dim] *= step
	return shareView(t, append(sh, size), append(st, t.Strides[dim]), t.Offset)
}

// channelsLastTensor is torch.empty(n, c, h, w, memory_format=torch.channels_last)
// filled like iotaTensor: an NHWC tensor permuted to NCHW.
func channelsLastTensor(dt DType, n, c, h, w int64) *Tensor {
	return permuteView(iotaTensor(dt, n, h, w, c), 0, 3, 1, 2)
}

// channelsLast3dTensor is the 5-D (N, C, D, H, W) analogue.
func channelsLast3dTensor(dt DType, n, c, d, h, w int64) *Tensor {
	return permuteView(iotaTensor(dt, n, d, h, w, c), 0, 4, 1, 2, 3)
}

// offsetTensor is base[off:].view(shape) of a 1-D base with room to spare.
func offsetTensor(dt DType, off int64, shape ...int64) *Tensor {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	base := iotaTensor(dt, off+n+3)
	return shareView(base, append([]int64(nil), shape...), ContiguousStrides(shape), off)
}

type namedView struct {
	name string
	t    *Tensor
}

// layoutZoo returns one tensor of every layout class, of dtype dt, each with
// at least 3 entries along dim 0.
func layoutZoo(dt DType) []namedView {
	return []namedView{
		{"contiguous", iotaTensor(dt, 5, 3, 4)},
		{"channels_last", channelsLastTensor(dt, 4, 3, 2, 5)},
		{"channels_last_3d", channelsLast3dTensor(dt, 3, 2, 2, 3, 2)},
		{"transposed", permuteView(iotaTensor(dt, 6, 5), 1, 0)},
		{"permuted", permuteView(iotaTensor(dt, 3, 5, 4), 1, 2, 0)},
		{"strided step", sliceView(iotaTensor(dt, 5, 8), 1, 0, 8, 2)},
		{"row padding", sliceView(iotaTensor(dt, 5, 10), 1, 2, 7, 1)},
		{"expanded rows", expandView(iotaTensor(dt, 1, 4), 5, 4)},
		{"expanded cols", expandView(iotaTensor(dt, 5, 1), 5, 4)},
		{"offset", offsetTensor(dt, 5, 5, 7)},
		{"permuted offset", permuteView(offsetTensor(dt, 3, 4, 6), 1, 0)},
		{"channels_last sliced", sliceView(channelsLastTensor(dt, 4, 3, 2, 6), 3, 1, 6, 2)},
		{"unfolded windows", unfoldView(iotaTensor(dt, 4, 10), 1, 4, 2)},
		{"size-1 inner dims", iotaTensor(dt, 4, 1, 3, 1)},
	}
}
