package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"reduce/internal/reduction"
)

func TestReporterPlain(t *testing.T) {
	var out, errw bytes.Buffer
	p := newReporter(&out, &errw, true, false)
	p.handle(&reduction.PhaseStarted{Event: "phase", Phase: reduction.PhaseSamples, Units: 8})
	p.replayed(4, true)
	p.handle(&reduction.Log{Text: "samples: culprit set [2]"})
	p.close()
	// Not a terminal: plain lines, no bar, and JSON events on stdout.
	assert.Equal(t, "reduce: samples: culprit set [2]\n", errw.String())
	assert.Equal(t, `{"event":"phase","phase":"samples","units":8}`+"\n", out.String())

	out.Reset()
	errw.Reset()
	q := newReporter(&out, &errw, false, true)
	q.handle(&reduction.Log{Text: "hidden"})
	q.event(map[string]any{"event": "x"})
	assert.Empty(t, errw.String())
	assert.Empty(t, out.String())
}
