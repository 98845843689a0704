package shrink

import (
	"iter"
	"strconv"
	"strings"
)

// Range is the half-open interval [Lo, Hi) of unit indices. It is the
// serialized form of candidates (in CacheEntry and Step) because the
// candidates the search builds are unions of a few ranges, whatever n is.
type Range struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

// set is an immutable set of unit indices stored as sorted, disjoint,
// non-adjacent, non-empty ranges. Because adjacent ranges are always merged,
// the representation is canonical: two sets are equal iff their range
// slices are equal, which is what makes hashing a candidate cost
// O(#ranges) instead of O(#units).
//
// A set is never modified after construction; operations return new sets,
// so sets may be shared freely between the driver, the cache, the step log
// and speculative states.
type set struct {
	r []Range
	n int // number of units
}

// span returns the set [lo, hi).
func span(lo, hi int) set {
	if hi <= lo {
		return set{}
	}
	return set{r: []Range{{lo, hi}}, n: hi - lo}
}

// builder appends ranges in increasing order, merging adjacent ones.
type builder struct {
	r []Range
	n int
}

func (b *builder) add(lo, hi int) {
	if hi <= lo {
		return
	}
	if k := len(b.r); k > 0 && b.r[k-1].Hi >= lo {
		if hi > b.r[k-1].Hi {
			b.n += hi - b.r[k-1].Hi
			b.r[k-1].Hi = hi
		}
		return
	}
	b.r = append(b.r, Range{lo, hi})
	b.n += hi - lo
}

func (b *builder) set() set { return set{r: b.r, n: b.n} }

// setFromRanges canonicalizes arbitrary ranges (any order, overlaps allowed).
func setFromRanges(rs []Range) set {
	sorted := append([]Range(nil), rs...)
	// Insertion sort: callers pass few ranges, and sort would add an import
	// for nothing.
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && sorted[j].Lo < sorted[j-1].Lo; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	var b builder
	for _, x := range sorted {
		b.add(x.Lo, x.Hi)
	}
	return b.set()
}

// setOf builds a set from unit indices in any order.
func setOf(units ...int) set {
	rs := make([]Range, len(units))
	for i, u := range units {
		rs[i] = Range{u, u + 1}
	}
	return setFromRanges(rs)
}

func (s set) len() int      { return s.n }
func (s set) empty() bool   { return s.n == 0 }
func (s set) first() int    { return s.r[0].Lo }
func (s set) ranges() int   { return len(s.r) }
func (s set) lastUnit() int { return s.r[len(s.r)-1].Hi - 1 }

func (s set) equal(t set) bool {
	if s.n != t.n || len(s.r) != len(t.r) {
		return false
	}
	for i := range s.r {
		if s.r[i] != t.r[i] {
			return false
		}
	}
	return true
}

func (s set) contains(u int) bool {
	lo, hi := 0, len(s.r)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch {
		case u < s.r[m].Lo:
			hi = m
		case u >= s.r[m].Hi:
			lo = m + 1
		default:
			return true
		}
	}
	return false
}

// union returns s ∪ t.
func union(s, t set) set {
	if s.empty() {
		return t
	}
	if t.empty() {
		return s
	}
	b := builder{r: make([]Range, 0, len(s.r)+len(t.r))}
	i, j := 0, 0
	for i < len(s.r) || j < len(t.r) {
		if j == len(t.r) || (i < len(s.r) && s.r[i].Lo <= t.r[j].Lo) {
			b.add(s.r[i].Lo, s.r[i].Hi)
			i++
		} else {
			b.add(t.r[j].Lo, t.r[j].Hi)
			j++
		}
	}
	return b.set()
}

// minus returns s \ t.
func minus(s, t set) set {
	if s.empty() || t.empty() {
		return s
	}
	b := builder{r: make([]Range, 0, len(s.r)+len(t.r))}
	j := 0
	for _, x := range s.r {
		lo := x.Lo
		for j < len(t.r) && t.r[j].Hi <= lo {
			j++
		}
		k := j
		for k < len(t.r) && t.r[k].Lo < x.Hi {
			b.add(lo, t.r[k].Lo)
			if t.r[k].Hi > lo {
				lo = t.r[k].Hi
			}
			if t.r[k].Hi >= x.Hi {
				break
			}
			k++
		}
		b.add(lo, x.Hi)
	}
	return b.set()
}

// intersect returns s ∩ t.
func intersect(s, t set) set {
	if s.empty() || t.empty() {
		return set{}
	}
	b := builder{r: make([]Range, 0, min(len(s.r), len(t.r))+1)}
	i, j := 0, 0
	for i < len(s.r) && j < len(t.r) {
		lo := max(s.r[i].Lo, t.r[j].Lo)
		hi := min(s.r[i].Hi, t.r[j].Hi)
		b.add(lo, hi)
		if s.r[i].Hi < t.r[j].Hi {
			i++
		} else {
			j++
		}
	}
	return b.set()
}

// split returns the first k units of s (by rank) and the rest.
func (s set) split(k int) (head, tail set) {
	if k <= 0 {
		return set{}, s
	}
	if k >= s.n {
		return s, set{}
	}
	k0 := k
	for i, x := range s.r {
		w := x.Hi - x.Lo
		if k < w {
			h := make([]Range, i+1)
			copy(h, s.r[:i])
			h[i] = Range{x.Lo, x.Lo + k}
			t := make([]Range, len(s.r)-i)
			t[0] = Range{x.Lo + k, x.Hi}
			copy(t[1:], s.r[i+1:])
			return set{r: h, n: k0}, set{r: t, n: s.n - k0}
		}
		if k == w {
			return set{r: s.r[: i+1 : i+1], n: k0}, set{r: s.r[i+1:], n: s.n - k0}
		}
		k -= w
	}
	panic("shrink: split past the end of a set")
}

// hash is a cheap hash of the canonical form: O(#ranges).
func (s set) hash() uint64 {
	h := uint64(0x9e3779b97f4a7c15) ^ uint64(s.n)
	for _, x := range s.r {
		h = mix(h ^ uint64(x.Lo))
		h = mix(h ^ uint64(x.Hi))
	}
	return h
}

// mix is the splitmix64 finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func (s set) units() []int {
	out := make([]int, 0, s.n)
	for _, x := range s.r {
		for u := x.Lo; u < x.Hi; u++ {
			out = append(out, u)
		}
	}
	return out
}

func (s set) all() iter.Seq[int] {
	return func(yield func(int) bool) {
		for _, x := range s.r {
			for u := x.Lo; u < x.Hi; u++ {
				if !yield(u) {
					return
				}
			}
		}
	}
}

// copyRanges returns a copy of the ranges, so callers can't alter the set.
func (s set) copyRanges() []Range { return append([]Range(nil), s.r...) }

// String formats a set compactly, as in "{0-3,7}", for logs and golden files.
func (s set) String() string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, x := range s.r {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(x.Lo))
		if x.Hi-x.Lo > 1 {
			sb.WriteByte('-')
			sb.WriteString(strconv.Itoa(x.Hi - 1))
		}
	}
	sb.WriteByte('}')
	return sb.String()
}

// Candidate is the set of units the oracle must keep, out of the units
// 0..N()-1. At the sample level "kept" means the sample stays in the
// batch; at the element level it means the element keeps its recorded
// value and every element of Dropped() is replaced by the caller's benign
// value. The engine does not know the difference.
//
// A Candidate is immutable and cheap to copy.
type Candidate struct {
	s     set
	n     int
	trial int
}

// Len is the number of kept units.
func (c Candidate) Len() int { return c.s.n }

// N is the number of units of the run (the size of the original).
func (c Candidate) N() int { return c.n }

// Trial is the 0-based index of this replay of the candidate when
// Options.Trials > 1, so an oracle can vary a seed per trial.
func (c Candidate) Trial() int { return c.trial }

// Ranges returns the kept units as sorted, disjoint, non-adjacent ranges
// (a copy).
func (c Candidate) Ranges() []Range { return c.s.copyRanges() }

// Dropped returns the units that are not kept, as sorted ranges: what the
// caller neutralizes at the element level.
func (c Candidate) Dropped() []Range { return minus(span(0, c.n), c.s).copyRanges() }

// Units returns the kept unit indices in increasing order (O(Len)).
func (c Candidate) Units() []int { return c.s.units() }

// All iterates over the kept unit indices in increasing order.
func (c Candidate) All() iter.Seq[int] { return c.s.all() }

// Contains reports whether unit u is kept (O(log #ranges)).
func (c Candidate) Contains(u int) bool { return c.s.contains(u) }

// String formats the kept units compactly, e.g. "{0-3,7}".
func (c Candidate) String() string { return c.s.String() }
