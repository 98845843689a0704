package replay

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// naiveKeep is what a capture must return for stream s: all of it up to
// limit bytes, else its first and last halves around the marker.
func naiveKeep(s []byte, limit int) []byte {
	if len(s) == 0 {
		return nil
	}
	limit = max(limit, 0)
	if len(s) <= limit {
		return s
	}
	h := limit / 2
	out := append([]byte{}, s[:h]...)
	out = append(out, elidedMarker(int64(len(s)-limit))...)
	return append(out, s[len(s)-(limit-h):]...)
}

func TestRunnerCaptureMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for iter := range 2000 {
		limit := []int{-1, 0, 1, 2, 3, 7, 64, 100, 4096, 10000}[r.IntN(10)]
		n := r.IntN(3 * max(limit, 16))
		if iter%50 == 0 {
			n = 40000
		}
		s := junk(uint64(iter), n)
		c := newCapture(limit)
		for rest := s; len(rest) > 0; {
			k := min(len(rest), 1+r.IntN(2*max(limit, 8)))
			if got, err := c.Write(rest[:k]); got != k || err != nil {
				t.Fatalf("Write: %d, %v", got, err)
			}
			rest = rest[k:]
		}
		want := naiveKeep(s, limit)
		if got := c.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("limit %d, %d bytes: got %d bytes %.60q, want %d bytes %.60q", limit, n, len(got), got, len(want), want)
		}
		if c.total != int64(n) || c.truncated() != (n > max(limit, 0)) {
			t.Fatalf("limit %d, %d bytes: total %d truncated %v", limit, n, c.total, c.truncated())
		}
		if cap(c.head) > c.headMax || cap(c.tail) > c.tailMax {
			t.Fatalf("limit %d: buffers %d+%d over %d+%d", limit, cap(c.head), cap(c.tail), c.headMax, c.tailMax)
		}
	}
}

func TestRunnerCaptureBounded(t *testing.T) {
	c := newCapture(1 << 20)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	// AllocsPerRun runs f twice (a warm-up, then the one counted): 200 MiB.
	allocs := testing.AllocsPerRun(1, func() {
		for range 1600 {
			c.Write(chunk)
		}
	})
	if cap(c.head)+cap(c.tail) > 1<<20 {
		t.Errorf("buffers %d + %d bytes, over the 1 MiB limit", cap(c.head), cap(c.tail))
	}
	if allocs > 40 {
		t.Errorf("%v allocations for 100 MiB", allocs)
	}
	if c.total != 200<<20 {
		t.Fatalf("total %d", c.total)
	}
	if got := c.Bytes(); !bytes.Contains(got, []byte("\n... [208666624 bytes elided] ...\n")) {
		t.Errorf("marker: %.80q", got[1<<19-10:])
	}
}
