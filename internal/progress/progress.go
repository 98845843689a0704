// Package progress tells a person at the terminal how the main job goes
// (a bar on stderr, or plain lines) and a program, with --json, what
// happened: one JSON object per line on stdout.
package progress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/shrink"
)

// Reporter tells a person at the terminal how the main job goes, and a
// program, with --json, what happened, one JSON object per line.
//
// Progress goes to stderr: a bar redrawn in place when stderr is a
// terminal (phase, replays done, current and best size, replays per
// second), plain lines otherwise, nothing with --quiet. Results go to
// stdout: with --json the events and the summary, else the human summary
// the main job prints at the end. The two never mix, so `reduce ... |
// tail -1` is the fixture path either way.
type Reporter struct {
	stderr io.Writer
	stdout io.Writer
	json   bool
	quiet  bool
	start  time.Time

	mu      sync.Mutex
	enc     *json.Encoder // into buf, escaped into stdout (Event)
	buf     bytes.Buffer
	bar     *progressbar.ProgressBar
	phase   string
	replays int
	size    int
	best    int
}

// New is a Reporter writing results to stdout and progress to stderr;
// jsonLines is --json, quiet is --quiet.
func New(stdout, stderr io.Writer, jsonLines, quiet bool) *Reporter {
	p := &Reporter{stderr: stderr, stdout: stdout, json: jsonLines, quiet: quiet, start: time.Now()}
	if jsonLines {
		p.enc = json.NewEncoder(&p.buf)
		p.enc.SetEscapeHTML(false)
	}
	if f, ok := stderr.(*os.File); ok && !quiet && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSpinnerType(14),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetElapsedTime(false),
		)
	}
	return p
}

// handle is the reduction's event sink: logs to stderr, phases and
// replays to the bar, and with --json every event but the logs as a line
// on stdout. It may be called from several goroutines at once.
func (p *Reporter) Handle(ev reduction.Event) {
	switch e := ev.(type) {
	case *reduction.Log:
		p.logf("%s", fixtures.Printable(e.Text)) // it may quote the file
		return
	case *reduction.PhaseStarted:
		p.setPhase(string(e.Phase), e.Units)
	case *reduction.Replayed:
		if !e.Resumed {
			p.replayed(e.Size, e.Outcome == shrink.Fail)
		}
	}
	p.Event(ev)
}

// event writes one JSON line on stdout with --json; v is a struct or map
// with an "event" field.
func (p *Reporter) Event(v any) {
	if p.enc == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A file's ids and texts as JSON escapes, the bidi overrides and C1
	// controls included: the same values, nothing a terminal acts on, as
	// inspect --json writes them.
	p.buf.Reset()
	if p.enc.Encode(v) == nil {
		_, _ = p.stdout.Write(fixtures.EscapeJSON(p.buf.Bytes()))
	}
}

// logf writes a line of progress on stderr, above the bar on a terminal.
func (p *Reporter) logf(format string, args ...any) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintf(p.stderr, "reduce: "+format+"\n", args...)
	p.redraw()
}

// setPhase starts a phase over size units.
func (p *Reporter) setPhase(phase string, size int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.size, p.best = phase, size, size
	p.redraw()
}

// replayed counts one replay of a candidate of the given size; failing
// ones of a smaller size become the best so far.
func (p *Reporter) replayed(size int, fails bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.replays++
	if size >= 0 {
		p.size = size
		if fails && size < p.best {
			p.best = size
		}
	}
	if p.bar != nil {
		_ = p.bar.Add(1)
		p.redraw()
	}
}

// redraw updates the bar's description; mu is held.
func (p *Reporter) redraw() {
	if p.bar == nil {
		return
	}
	rate := float64(p.replays) / time.Since(p.start).Seconds()
	p.bar.Describe(fmt.Sprintf("%-9s %4d replays  size %d  best %d  %.1f/s", p.phase, p.replays, p.size, p.best, rate))
}

// close removes the bar; later lines go to stderr as plain lines. It may
// be called more than once.
func (p *Reporter) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
}
