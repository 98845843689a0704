package shrink

import "math/bits"

// The searches are written as immutable state machines: next says which
// candidate the search wants answered, after returns the state that
// follows an outcome, and never modifies the receiver. Being values, a
// state can be advanced on hypothetical outcomes, which is all the
// scheduler needs to speculate (engine.speculate) without knowing anything
// about the search.
//
// Every machine treats Unresolved exactly like Pass: "not known to fail".
// No machine ever keeps a candidate that was not answered Fail.
type machine interface {
	// next returns the candidate to test, or false when the search is over.
	next() (set, bool)
	// after returns the state after the candidate of next got outcome o.
	after(o Outcome) machine
}

// hwang is the group size of Hwang's generalized binary splitting for m
// items of which about d are positive: 2^⌊log2((m-d+1)/d)⌋, or 1 when
// m <= 2d-2 (then testing items one by one is cheapest). d may be an
// estimate, hence a float.
func hwang(m int, d float64) int {
	if d < 1 {
		d = 1
	}
	if float64(m) <= 2*d-2 {
		return 1
	}
	q := int((float64(m) - d + 1) / d)
	if q < 1 {
		return 1
	}
	return 1 << (bits.Len(uint(q)) - 1)
}

// minimizer reduces a failing candidate k to a minimal failing subset.
//
// It is group testing where the positives are the units that are needed:
// removing a group X from k and answering Fail proves X unneeded (k
// shrinks); answering Pass proves X holds a needed unit, which is then
// found by bisecting X (the half removed first; Fail drops that half,
// Pass keeps the other half in k and goes on into the removed one). This
// is binary splitting for one culprit and, because the rest of k stays
// kept while a group is bisected, it is also the "fix one half, bisect the
// other" search for conjunctive sets: after a needed unit is found the
// units still unclassified are tested as one group, which for one culprit
// is the single test "the culprit alone fails".
//
// Invariants: k has been answered Fail (or is the confirmed original);
// unknown ⊆ k; k \ unknown are the units found needed; x ⊆ unknown is a
// group known to hold a needed unit (removing it did not fail), empty when
// none is being bisected.
type minimizer struct {
	k, unknown, x set
	needed        int
	// prepared from the above by prepare:
	g    set // the group removed by the next test
	cand set // k \ g
}

// newMinimizer starts from the failing candidate k with x ⊆ k a group
// that holds a needed unit (for the original, x = k: something is needed
// unless even the empty candidate fails, which the final 1-minimality
// check would find).
func newMinimizer(k, x set) minimizer {
	m := minimizer{k: k, unknown: k, x: x}
	m = m.found()
	return m.prepare()
}

// found classifies a bisected group of one unit as needed.
func (m minimizer) found() minimizer {
	if m.x.len() == 1 {
		m.needed++
		m.unknown = minus(m.unknown, m.x)
		m.x = set{}
	}
	return m
}

// groupSize is the size of the next group of unclassified units to
// remove. While few needed units are known the next group is all of them
// ("is anything else needed?"), which costs one test for a single culprit
// or a pair; once the set proves large (needed > 2), groups follow Hwang's
// rule with the units found so far as the estimate of those left, so that
// a candidate in which every unit is needed costs O(n) tests, not
// O(n log n).
func (m minimizer) groupSize() int {
	u := m.unknown.len()
	if m.needed < 3 {
		return u
	}
	return hwang(u, float64(m.needed-2))
}

func (m minimizer) prepare() minimizer {
	switch {
	case !m.x.empty():
		m.g, _ = m.x.split(m.x.len() / 2)
	case !m.unknown.empty():
		m.g, _ = m.unknown.split(m.groupSize())
	default:
		m.g, m.cand = set{}, set{}
		return m
	}
	m.cand = minus(m.k, m.g)
	return m
}

func (m minimizer) next() (set, bool) { return m.cand, !m.g.empty() }

func (m minimizer) best() (set, bool) { return m.k, true }

func (m minimizer) after(o Outcome) machine {
	n := m
	if o == Fail {
		// m.g is not needed: drop it.
		n.k = m.cand
		n.unknown = minus(m.unknown, m.g)
		if !m.x.empty() {
			n.x = minus(m.x, m.g)
		}
	} else {
		// m.g holds a needed unit: bisect it. (When bisecting, the other
		// half of x stays in k, unclassified.)
		n.x = m.g
	}
	return n.found().prepare()
}

// narrower finds one needed unit in x by halving, for units that cost by
// their size (Options.Halve): its candidate is the second half of x alone,
// never the rest of k, so that candidates halve with each answer wherever
// the unit sits. Fail verifies the half (k and x become it); Pass or
// Unresolved moves x to the first half, which is then believed to hold the
// unit but not verified. For units that fail alone this asks what
// minimizer asks, less the rest of k, so it gets the same answers and the
// same unit: the rest of k is units that passed with everything else kept.
// A unit x narrows to that no Fail verified is tested alone; when it passes,
// the failure needs several units together, and the search goes on as
// minimizer from the last candidate answered Fail (k, with kx the group of
// it that holds a needed unit).
//
// While no Fail has come (every half passed: the culprit sits first), the
// halving that leaves one unit on its first side asks what minimizer
// asks: k without that unit, whose Pass is also the caller's next question
// (every unit but the culprit), answered on the way.
type narrower struct {
	k, kx, x set
	g, cand  set
	failed   bool // a Fail has come
	whole    bool // cand is k without g (the case above)
}

func newNarrower(k, x set) machine { return narrower{k: k, kx: x, x: x}.prepare() }

func (nw narrower) prepare() narrower {
	nw.whole = false
	switch {
	case (nw.x.len() == 2 || nw.x.len() == 3) && !nw.failed:
		nw.g, _ = nw.x.split(1)
		nw.cand, nw.whole = minus(nw.k, nw.g), true
	case nw.x.len() > 1:
		nw.g, _ = nw.x.split(nw.x.len() / 2)
		nw.cand = minus(nw.x, nw.g)
	case nw.x.len() == 1 && !nw.x.equal(nw.k):
		nw.g, nw.cand = set{}, nw.x
	default:
		nw.g, nw.cand = set{}, set{}
	}
	return nw
}

func (nw narrower) next() (set, bool) { return nw.cand, !nw.cand.empty() }

func (nw narrower) best() (set, bool) { return nw.k, true }

func (nw narrower) after(o Outcome) machine {
	n := nw
	switch {
	case o == Fail:
		n.k, n.kx, n.x, n.failed = nw.cand, nw.cand, minus(nw.x, nw.g), true
	case nw.x.len() == 1:
		// The unit alone does not fail: it needs others.
		return newMinimizer(nw.k, nw.kx)
	case nw.whole:
		// k without g passed: g is needed, verified.
		n.x, n.kx = nw.g, nw.g
	default:
		n.x = nw.g
	}
	return n.prepare()
}

// keeper is a search that keeps a candidate the oracle answered Fail:
// best says which, and whether it has one yet.
type keeper interface {
	machine
	best() (set, bool)
}

// kept is the candidate a finished search keeps.
func kept(m machine) set {
	s, _ := m.(keeper).best()
	return s
}

// scanner looks for a further culprit set among the units u of the
// original minus the culprit sets found so far. It tests the candidate
// e ∪ t, where e is believed not to fail (it starts as the part of u
// covered by accepted Pass answers, see unitRun.scanPlan, so it costs
// nothing) and t is the next group of the pool s: a Fail is a verified
// failing candidate whose needed units are expected in t (handed to a
// minimizer, which verifies everything it keeps); otherwise t joins e. When the pool is used up
// without a Fail, the last candidate tested was all of u: no further
// culprit set exists.
//
// Groups follow Hwang's rule with d, the estimated number of culprits in
// the pool: hits/explored culprits per explored unit, times the pool's
// size, but never more than hits. Passing groups are explored units too,
// so the estimate falls as the pool empties without a Fail, and the last
// groups of an exhausted pool are large rather than many. d <= 1 makes
// the group the whole pool: the test is then all of u ("does anything
// else fail?").
type scanner struct {
	e, s     set
	hits     float64
	explored int
	hit      bool
	t        set
	cand     set
}

func newScanner(e, s set, hits float64, explored int) scanner {
	return scanner{e: e, s: s, hits: hits, explored: max(explored, 1)}.prepare()
}

func (sc scanner) estimate() float64 {
	return min(sc.hits, sc.hits*float64(sc.s.len())/float64(sc.explored))
}

func (sc scanner) prepare() scanner {
	if sc.hit || sc.s.empty() {
		return sc
	}
	g := sc.s.len()
	if d := sc.estimate(); d > 1 {
		g = hwang(sc.s.len(), d)
	}
	_, sc.t = sc.s.split(sc.s.len() - g)
	sc.cand = union(sc.e, sc.t)
	return sc
}

func (sc scanner) next() (set, bool) { return sc.cand, !sc.hit && !sc.s.empty() }

func (sc scanner) best() (set, bool) { return sc.cand, sc.hit }

func (sc scanner) after(o Outcome) machine {
	n := sc
	if o == Fail {
		n.hit = true
		return n
	}
	n.e = sc.cand
	n.s = minus(sc.s, sc.t)
	n.explored += sc.t.len()
	return n.prepare()
}

// ddmin is Zeller and Hildebrandt's ddmin, testing complements before
// subsets at each granularity ("reduce to complement" first), with the
// engine's cache in front of it. At granularity 2 the subsets are the
// complements, so they are not asked for twice. c has been answered Fail.
type ddmin struct {
	c        set
	n, i     int // granularity; index of the next test: complements 0..n-1, then subsets
	finished bool
	sub      set
	cand     set
}

func newDDMin(c set) ddmin { return ddmin{c: c, n: 2}.prepare() }

func (d ddmin) limit() int {
	if d.n == 2 {
		return 2
	}
	return 2 * d.n
}

// subset j of n of c: the units of rank [j*len/n, (j+1)*len/n).
func subset(c set, n, j int) set {
	l := c.len()
	lo, hi := j*l/n, (j+1)*l/n
	_, t := c.split(lo)
	h, _ := t.split(hi - lo)
	return h
}

func (d ddmin) prepare() ddmin {
	if d.finished || d.c.len() < 2 {
		d.finished = true
		return d
	}
	d.sub = subset(d.c, d.n, d.i%d.n)
	if d.i < d.n {
		d.cand = minus(d.c, d.sub)
	} else {
		d.cand = d.sub
	}
	return d
}

func (d ddmin) next() (set, bool) { return d.cand, !d.finished }

func (d ddmin) best() (set, bool) { return d.c, true }

func (d ddmin) after(o Outcome) machine {
	n := d
	if o == Fail {
		n.c = d.cand
		if d.i < d.n {
			n.n = max(d.n-1, 2)
		} else {
			n.n = 2
		}
		n.n = min(n.n, max(n.c.len(), 2))
		n.i = 0
		return n.prepare()
	}
	n.i++
	if n.i >= d.limit() {
		if d.n >= d.c.len() {
			n.finished = true
			return n
		}
		n.n = min(2*d.n, d.c.len())
		n.i = 0
	}
	return n.prepare()
}

// minCheck makes r 1-minimal: it tests r without each of its units in
// turn, and whenever one fails drops that unit and starts over. The
// answers are actual oracle answers (or exact cache hits); the only
// candidate ever taken without a test is the empty one, when emptyOK: an
// accepted Pass has been seen, and by monotonicity the empty candidate,
// its subset, passes too. That is the precondition test(∅) = Pass of
// ddmin, checked rather than assumed.
type minCheck struct {
	r       set
	i       int
	emptyOK bool
	cand    set
	done    bool
}

func newMinCheck(r set, emptyOK bool) minCheck { return minCheck{r: r, emptyOK: emptyOK}.prepare() }

func (mc minCheck) prepare() minCheck {
	for ; mc.i < mc.r.len(); mc.i++ {
		h, t := mc.r.split(mc.i)
		_, rest := t.split(1)
		mc.cand = union(h, rest)
		if mc.cand.empty() && mc.emptyOK {
			continue
		}
		return mc
	}
	mc.done = true
	return mc
}

func (mc minCheck) next() (set, bool) { return mc.cand, !mc.done }

func (mc minCheck) best() (set, bool) { return mc.r, true }

func (mc minCheck) after(o Outcome) machine {
	n := mc
	if o == Fail {
		n.r = mc.cand
		n.i = 0
	} else {
		n.i++
	}
	return n.prepare()
}
