package shrink

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestSetOps(t *testing.T) {
	a := setFromRanges([]Range{{0, 4}, {8, 10}})
	b := setFromRanges([]Range{{3, 9}})
	tests := []struct {
		name string
		got  set
		want string
	}{
		{"union", union(a, b), "{0-9}"},
		{"minus", minus(a, b), "{0-2,9}"},
		{"minus reversed", minus(b, a), "{4-7}"},
		{"intersect", intersect(a, b), "{3,8}"},
		{"adjacent ranges merge", setFromRanges([]Range{{5, 7}, {0, 5}}), "{0-6}"},
		{"overlapping ranges merge", setFromRanges([]Range{{0, 5}, {2, 3}, {4, 9}}), "{0-8}"},
		{"empty ranges vanish", setFromRanges([]Range{{3, 3}, {1, 2}}), "{1}"},
		{"setOf", setOf(7, 1, 2, 3, 9, 8), "{1-3,7-9}"},
		{"split head", first(a.split(5)), "{0-3,8}"},
		{"split tail", second(a.split(5)), "{9}"},
		{"split at range end", first(a.split(4)), "{0-3}"},
		{"split at 0", first(a.split(0)), "{}"},
		{"split past end", second(a.split(99)), "{}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.got.String())
			assert.Equal(t, len(tt.got.units()), tt.got.len(), "cached size")
		})
	}
}

func first(h, _ set) set  { return h }
func second(_, t set) set { return t }

func TestCandidateAccessors(t *testing.T) {
	c := Candidate{s: setOf(1, 2, 5), n: 8, trial: 2}
	assert.Equal(t, 3, c.Len())
	assert.Equal(t, 8, c.N())
	assert.Equal(t, 2, c.Trial())
	assert.Equal(t, []int{1, 2, 5}, c.Units())
	assert.Equal(t, []Range{{1, 3}, {5, 6}}, c.Ranges())
	assert.Equal(t, []Range{{0, 1}, {3, 5}, {6, 8}}, c.Dropped())
	assert.Equal(t, []int{1, 2, 5}, slices.Collect(c.All()))
	assert.True(t, c.Contains(5))
	assert.False(t, c.Contains(4))
	assert.Equal(t, "{1-2,5}", c.String())
	// Ranges returns a copy: changing it must not change the candidate.
	c.Ranges()[0].Lo = 0
	assert.Equal(t, "{1-2,5}", c.String())
}

// TestSetModel checks every set operation against a map model, and that
// equal sets have equal canonical forms and hashes (the cache relies on
// both).
func TestSetModel(t *testing.T) {
	gen := rapid.SliceOfN(rapid.IntRange(0, 40), 0, 30)
	rapid.Check(t, func(t *rapid.T) {
		ua, ub := gen.Draw(t, "a"), gen.Draw(t, "b")
		a, b := setOf(ua...), setOf(ub...)
		ma, mb := model(ua), model(ub)
		requireModel(t, a, ma)
		requireModel(t, union(a, b), combine(ma, mb, func(x, y bool) bool { return x || y }))
		requireModel(t, minus(a, b), combine(ma, mb, func(x, y bool) bool { return x && !y }))
		requireModel(t, intersect(a, b), combine(ma, mb, func(x, y bool) bool { return x && y }))
		k := rapid.IntRange(0, a.len()).Draw(t, "k")
		h, tl := a.split(k)
		require.Equal(t, k, h.len())
		require.True(t, union(h, tl).equal(a))
		require.True(t, intersect(h, tl).empty())
		if !h.empty() && !tl.empty() {
			require.Less(t, h.lastUnit(), tl.first())
		}
		// Canonical: the same set built another way is equal, hash too.
		again := setFromRanges(append(slices.Clone(minus(a, b).r), intersect(a, b).r...))
		require.True(t, again.equal(a), "%v vs %v", again, a)
		require.Equal(t, a.hash(), again.hash())
		for u := -1; u <= 41; u++ {
			require.Equal(t, ma[u], a.contains(u), "contains(%d)", u)
		}
	})
}

func model(units []int) map[int]bool {
	m := map[int]bool{}
	for _, u := range units {
		m[u] = true
	}
	return m
}

func combine(a, b map[int]bool, f func(x, y bool) bool) map[int]bool {
	m := map[int]bool{}
	for u := 0; u <= 40; u++ {
		if f(a[u], b[u]) {
			m[u] = true
		}
	}
	return m
}

func requireModel(t *rapid.T, s set, m map[int]bool) {
	var want []int
	for u := 0; u <= 40; u++ {
		if m[u] {
			want = append(want, u)
		}
	}
	got := s.units()
	if len(want) == 0 {
		require.Empty(t, got)
	} else {
		require.Equal(t, want, got)
	}
	require.Equal(t, len(want), s.len())
	for i := 1; i < len(s.r); i++ {
		require.Greater(t, s.r[i].Lo, s.r[i-1].Hi, "ranges not canonical: %v", s.r)
	}
}
