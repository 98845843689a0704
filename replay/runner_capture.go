package replay

import "strconv"

// capture keeps a bounded copy of one output stream: the first half of its
// limit (the head, where a worker says what it loads and how it starts) and
// the last half (the tail, where the traceback or the device assert is),
// counting the bytes in between without keeping them. Its memory never
// exceeds the limit, whatever the child writes: both halves are allocated
// lazily, growing up to their share, and the tail then turns into a ring.
//
// A capture is written by one goroutine and read once that one is done.
type capture struct {
	headMax, tailMax int
	head             []byte
	tail             []byte // linear until len == tailMax, then a ring
	full             bool   // tail is a ring; pos is its oldest byte
	pos              int
	total            int64
}

// newCapture returns a capture that keeps at most limit bytes (none when
// limit <= 0).
func newCapture(limit int) *capture {
	if limit < 0 {
		limit = 0
	}
	h := limit / 2
	return &capture{headMax: h, tailMax: limit - h}
}

// Write keeps what p adds to the head and the tail; it never fails.
func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := c.headMax - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = growTo(c.head, k, c.headMax)
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 && c.tailMax > 0 {
		c.writeTail(p)
	}
	return n, nil
}

func (c *capture) writeTail(p []byte) {
	if len(p) > c.tailMax {
		p = p[len(p)-c.tailMax:] // only the last tailMax bytes can survive
	}
	if !c.full {
		room := c.tailMax - len(c.tail)
		k := min(room, len(p))
		c.tail = growTo(c.tail, k, c.tailMax)
		c.tail = append(c.tail, p[:k]...)
		p = p[k:]
		if len(c.tail) < c.tailMax {
			return
		}
		c.full, c.pos = true, 0
	}
	// Ring: overwrite the oldest bytes, wrapping at the end.
	k := copy(c.tail[c.pos:], p)
	copy(c.tail, p[k:])
	c.pos = (c.pos + len(p)) % c.tailMax
}

// growTo makes room for n more bytes in b without letting its capacity pass
// limit (len(b)+n <= limit).
func growTo(b []byte, n, limit int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), min(limit, max(2*cap(b), len(b)+n, 4096)))
	copy(nb, b)
	return nb
}

// kept is the number of bytes the capture holds.
func (c *capture) kept() int { return len(c.head) + len(c.tail) }

// truncated reports whether bytes were dropped.
func (c *capture) truncated() bool { return c.total > int64(c.kept()) }

// elidedMarker is what stands for the dropped middle of a stream. It is a
// line of its own so that a line-oriented parser never sees it glued to the
// head's last line or the tail's first.
func elidedMarker(n int64) string {
	return "\n... [" + strconv.FormatInt(n, 10) + " bytes elided] ...\n"
}

// Bytes returns the kept output: everything when nothing was dropped, else
// the head, the elided marker and the tail. It returns nil when the stream
// was empty.
func (c *capture) Bytes() []byte {
	if c.total == 0 {
		return nil
	}
	var marker string
	if c.truncated() {
		marker = elidedMarker(c.total - int64(c.kept()))
	}
	out := make([]byte, 0, c.kept()+len(marker))
	out = append(out, c.head...)
	out = append(out, marker...)
	if c.full {
		out = append(out, c.tail[c.pos:]...)
		out = append(out, c.tail[:c.pos]...)
	} else {
		out = append(out, c.tail...)
	}
	return out
}
