package kernels

import (
	"encoding/binary"
	"sort"
)

// A copyPlan moves the elements of one strided view into another of the same
// shape and dtype, as raw bytes (no conversion). Planning once and running
// per slice keeps Select's cost proportional to what it copies: dims are
// ordered by destination stride, neighbours that are dense in both views are
// merged, and the innermost dense run moves with one copy().
type copyPlan struct {
	dims []copyDim // outermost first; the innermost run is not among them
	// run is the number of elements the innermost level moves at a time:
	// the length of a run dense in both views, or 1.
	run int64
	// gatherRun: the innermost dim is the gather dim and lies dense right
	// outside the run in both views, so consecutive indices extend one copy.
	gatherRun bool
	es        int64
	// tile: the destination has no two elements in one place (so the
	// order of the writes does not matter), and the two innermost levels
	// may be walked in square tiles: a transpose then reads each cache
	// line of the source once per tile instead of once per element.
	tile bool
}

// tileSize is the side of the tiles of a transposing copy, in elements.
const tileSize = 64

type copyDim struct {
	size, dst, src int64 // strides in elements
	// gather, when set, holds the source offset (in elements) of each index
	// of this dim, and src is the source stride it was computed with.
	gather []int64
}

// newCopyPlan plans copying a view of the given shape with strides dst into
// one with strides src (both in elements). If gdim >= 0, index k of dim gdim
// in the destination comes from index gidx[k] of the source. shape must not
// be empty (numel > 0).
func newCopyPlan(shape, dst, src []int64, gdim int, gidx []int64, es int) *copyPlan {
	return newCopyPlanIn(shape, dst, src, gdim, gidx, es, nil)
}

// newCopyPlanIn is newCopyPlan keeping the gather's source offsets in buf
// when it can hold them (a plan per block of indices then leaves no
// garbage).
func newCopyPlanIn(shape, dst, src []int64, gdim int, gidx []int64, es int, buf []int64) *copyPlan {
	var dims []copyDim
	for e, size := range shape {
		c := copyDim{size: size, dst: dst[e], src: src[e]}
		if e == gdim && src[e] != 0 {
			c.gather = buf[:0]
			if cap(buf) < len(gidx) {
				c.gather = make([]int64, len(gidx))
			}
			c.gather = c.gather[:len(gidx)]
			for k, i := range gidx {
				c.gather[k] = i * src[e]
			}
		} else if size == 1 || (c.dst == 0 && c.src == 0) {
			// A dim of size 1 moves nothing; one with both strides 0 moves
			// the same element to the same place again.
			continue
		}
		dims = append(dims, c)
	}
	sort.SliceStable(dims, func(a, b int) bool {
		if dims[a].dst != dims[b].dst {
			return dims[a].dst < dims[b].dst
		}
		return dims[a].src < dims[b].src
	})
	merged := dims[:0]
	for _, c := range dims {
		if n := len(merged); n > 0 {
			p := &merged[n-1]
			if p.gather == nil && c.gather == nil && c.dst == p.dst*p.size && c.src == p.src*p.size {
				p.size *= c.size
				continue
			}
		}
		merged = append(merged, c)
	}
	p := &copyPlan{run: 1, es: int64(es)}
	if len(merged) > 0 && merged[0].gather == nil && merged[0].dst == 1 && merged[0].src == 1 {
		p.run = merged[0].size
		merged = merged[1:]
	}
	if len(merged) > 0 && merged[0].gather != nil && merged[0].dst == p.run && merged[0].src == p.run {
		p.gatherRun = true
	}
	for i, j := 0, len(merged)-1; i < j; i, j = i+1, j-1 {
		merged[i], merged[j] = merged[j], merged[i]
	}
	p.dims = merged
	return p
}

// exec copies with the views starting at storage elements dOff and sOff.
func (p *copyPlan) exec(dst, src []byte, dOff, sOff int64) {
	p.level(dst, src, 0, dOff, sOff)
}

func (p *copyPlan) level(dst, src []byte, lvl int, dOff, sOff int64) {
	es := p.es
	if lvl == len(p.dims) {
		copy(dst[dOff*es:(dOff+p.run)*es], src[sOff*es:(sOff+p.run)*es])
		return
	}
	c := &p.dims[lvl]
	if p.tile && p.run == 1 && lvl == len(p.dims)-2 {
		if in := &p.dims[lvl+1]; c.gather == nil && in.gather == nil && in.src > c.src && c.size > tileSize && in.size > tileSize {
			p.tiles(dst, src, c, in, dOff, sOff)
			return
		}
	}
	if lvl == len(p.dims)-1 {
		switch {
		case p.gatherRun && p.run == 1 && !p.longRuns(c):
			copyElems(dst, src, c, dOff, sOff, es)
			return
		case p.gatherRun:
			for k := int64(0); k < c.size; {
				j := k + 1
				for j < c.size && c.gather[j] == c.gather[j-1]+c.src {
					j++
				}
				n := (j - k) * p.run
				do, so := dOff+k*c.dst, sOff+c.gather[k]
				copy(dst[do*es:(do+n)*es], src[so*es:(so+n)*es])
				k = j
			}
			return
		case p.run == 1:
			copyElems(dst, src, c, dOff, sOff, es)
			return
		}
	}
	for k := int64(0); k < c.size; k++ {
		so := sOff + k*c.src
		if c.gather != nil {
			so = sOff + c.gather[k]
		}
		p.level(dst, src, lvl+1, dOff+k*c.dst, so)
	}
}

// tiles copies the two innermost levels, outer c and inner in, tile by
// tile: each element is copied once, as level copies it.
func (p *copyPlan) tiles(dst, src []byte, c, in *copyDim, dOff, sOff int64) {
	for a := int64(0); a < c.size; a += tileSize {
		for b := int64(0); b < in.size; b += tileSize {
			row := copyDim{size: min(tileSize, in.size-b), dst: in.dst, src: in.src}
			for i := a; i < min(a+tileSize, c.size); i++ {
				copyElems(dst, src, &row, dOff+i*c.dst+b*in.dst, sOff+i*c.src+b*in.src, p.es)
			}
		}
	}
}

// longRuns samples whether consecutive indices of the gather dim c come in
// runs long enough for copy() to beat element moves.
func (p *copyPlan) longRuns(c *copyDim) bool {
	n := min(c.size, 64)
	if n < 2 {
		return false
	}
	same := int64(0)
	for k := int64(1); k < n; k++ {
		if c.gather[k] == c.gather[k-1]+c.src {
			same++
		}
	}
	return same*4 >= (n-1)*3
}

// copyElems is the innermost loop when nothing is dense: one element at a
// time, with a fixed-size load and store instead of a copy() call.
func copyElems(dst, src []byte, c *copyDim, dOff, sOff, es int64) {
	if c.gather != nil {
		gatherElems(dst, src, c.gather, dOff*es, c.dst*es, sOff*es, es)
		return
	}
	d, s := dOff*es, sOff*es
	dstep, sstep := c.dst*es, c.src*es
	le := binary.LittleEndian
	switch es {
	case 1:
		for k := int64(0); k < c.size; k++ {
			dst[d] = src[s]
			d, s = d+dstep, s+sstep
		}
	case 2:
		for k := int64(0); k < c.size; k++ {
			le.PutUint16(dst[d:], le.Uint16(src[s:]))
			d, s = d+dstep, s+sstep
		}
	case 4:
		for k := int64(0); k < c.size; k++ {
			le.PutUint32(dst[d:], le.Uint32(src[s:]))
			d, s = d+dstep, s+sstep
		}
	case 8:
		for k := int64(0); k < c.size; k++ {
			le.PutUint64(dst[d:], le.Uint64(src[s:]))
			d, s = d+dstep, s+sstep
		}
	default:
		for k := int64(0); k < c.size; k++ {
			copy(dst[d:d+es], src[s:s+es])
			d, s = d+dstep, s+sstep
		}
	}
}

// gatherElems moves element k from byte sBase + gather[k]·es to d + k·dstep.
func gatherElems(dst, src []byte, gather []int64, d, dstep, sBase, es int64) {
	le := binary.LittleEndian
	switch es {
	case 1:
		for _, g := range gather {
			dst[d] = src[sBase+g]
			d += dstep
		}
	case 2:
		for _, g := range gather {
			le.PutUint16(dst[d:], le.Uint16(src[sBase+g*2:]))
			d += dstep
		}
	case 4:
		for _, g := range gather {
			le.PutUint32(dst[d:], le.Uint32(src[sBase+g*4:]))
			d += dstep
		}
	case 8:
		for _, g := range gather {
			le.PutUint64(dst[d:], le.Uint64(src[sBase+g*8:]))
			d += dstep
		}
	default:
		for _, g := range gather {
			s := sBase + g*es
			copy(dst[d:d+es], src[s:s+es])
			d += dstep
		}
	}
}
