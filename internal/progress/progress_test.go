package progress

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"reduce/internal/reduction"
)

func TestReporterPlain(t *testing.T) {
	var out, errw bytes.Buffer
	p := New(&out, &errw, true, false)
	p.Handle(&reduction.PhaseStarted{Event: "phase", Phase: reduction.PhaseSamples, Units: 8})
	p.replayed(4, true)
	p.Handle(&reduction.Log{Text: "samples: culprit set [2]"})
	p.Close()
	// Not a terminal: plain lines, no bar, and JSON events on stdout.
	assert.Equal(t, "reduce: samples: culprit set [2]\n", errw.String())
	assert.Equal(t, `{"event":"phase","phase":"samples","units":8}`+"\n", out.String())

	out.Reset()
	errw.Reset()
	q := New(&out, &errw, false, true)
	q.Handle(&reduction.Log{Text: "hidden"})
	q.Event(map[string]any{"event": "x"})
	assert.Empty(t, errw.String())
	assert.Empty(t, out.String())
}
