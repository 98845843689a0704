package kernels

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLayoutClasses(t *testing.T) {
	cases := []struct {
		name           string
		t              *Tensor
		contig, cl, c3 bool
		layout         string
		order          []int
	}{
		{"contiguous", iotaTensor(Float32, 2, 3, 4), true, false, false, "contiguous", []int{2, 1, 0}},
		{"scalar", iotaTensor(Float32), true, false, false, "contiguous", nil},
		{"channels_last", channelsLastTensor(Float32, 2, 3, 4, 5), false, true, false, "channels_last", []int{1, 3, 2, 0}},
		{"channels_last with C=1 is both", channelsLastTensor(Float32, 2, 1, 4, 5), true, true, false, "contiguous+channels_last", []int{3, 2, 0}},
		{"channels_last_3d", channelsLast3dTensor(Float32, 2, 3, 2, 2, 2), false, false, true, "channels_last_3d", []int{1, 4, 3, 2, 0}},
		{"5-D is never channels_last", channelsLast3dTensor(Float32, 2, 3, 2, 2, 2), false, false, true, "channels_last_3d", []int{1, 4, 3, 2, 0}},
		{"transposed", permuteView(iotaTensor(Float32, 3, 4), 1, 0), false, false, false, "permuted", []int{0, 1}},
		{"transposed column is contiguous", permuteView(iotaTensor(Float32, 3, 1), 1, 0), true, false, false, "contiguous", []int{1}},
		{"step", sliceView(iotaTensor(Float32, 3, 8), 1, 0, 8, 2), false, false, false, "strided", []int{1, 0}},
		{"row padding + offset", sliceView(iotaTensor(Float32, 3, 8), 1, 1, 5, 1), false, false, false, "strided+offset", []int{1, 0}},
		{"offset", offsetTensor(Float32, 5, 3, 4), true, false, false, "contiguous+offset", []int{1, 0}},
		{"permuted+offset", permuteView(offsetTensor(Float32, 5, 3, 4), 1, 0), false, false, false, "permuted+offset", []int{0, 1}},
		{"expanded", expandView(iotaTensor(Float32, 1, 4), 3, 4), false, false, false, "expanded", []int{1}},
		{"unfold overlaps", unfoldView(iotaTensor(Float32, 2, 10), 1, 4, 2), false, false, false, "overlapping", []int{2, 1, 0}},
		{"interleaved but disjoint is flagged", rawView(Float32, 8, []int64{2, 3}, []int64{3, 2}, 0), false, false, false, "strided+overlapping", []int{1, 0}},
		{"empty is contiguous whatever the strides", rawView(Float32, 0, []int64{3, 0, 2}, []int64{1, 7, 9}, 4), true, false, false, "contiguous+offset", []int{0, 2}},
		{"size-1 dims ignored", rawView(Float32, 6, []int64{2, 1, 3}, []int64{3, 99, 1}, 0), true, false, false, "contiguous", []int{2, 0}},
		{"empty channels_last is checked", rawView(Float32, 0, []int64{2, 0, 4, 5}, []int64{0, 1, 0, 0}, 0), true, true, false, "contiguous+channels_last", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.NoError(t, c.t.Validate())
			assert.Equal(t, c.contig, c.t.IsContiguous(), "IsContiguous")
			assert.Equal(t, c.cl, c.t.IsChannelsLast(), "IsChannelsLast")
			assert.Equal(t, c.c3, c.t.IsChannelsLast3d(), "IsChannelsLast3d")
			assert.Equal(t, c.layout, c.t.Layout().String())
			assert.Equal(t, c.order, c.t.StrideOrder())
		})
	}
}

func TestLayoutString(t *testing.T) {
	assert.Equal(t, "none", Layout(0).String())
	assert.Equal(t, "permuted+strided+expanded+offset", (LayoutOffset | LayoutExpanded | LayoutPermuted | LayoutStrided).String())
	l := LayoutChannelsLast | LayoutOffset
	assert.True(t, l.Has(LayoutOffset))
	assert.True(t, l.Has(LayoutChannelsLast|LayoutOffset))
	assert.False(t, l.Has(LayoutChannelsLast|LayoutStrided))
}
