package reduction

import (
	"fmt"
	"io"
	"strings"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
)

// Check is one replay of a batch file judged against what the file says
// the replay must show (`reduce replay`): its recorded failure (one that
// names no assert is reproduced by an assert it allows, as the
// confirmation would keep it), a pass for a fixture's boundary or
// neighbour batch (regress.MetaExpect), any failure for a batch that
// records none. Its JSON form is `reduce replay --json`.
type Check struct {
	File      string               `json:"file"`
	Backend   string               `json:"backend"`
	Device    string               `json:"device"`
	Signature signature.Signature  `json:"signature"`
	Recorded  *signature.Signature `json:"recorded"`
	Match     string               `json:"match"`
	// Reproduces: it failed as recorded; for a batch that must pass
	// (Expect "pass": a fixture's boundary or neighbour), it passed.
	Reproduces bool `json:"reproduces"`
	// Note says why a replay reproduces a recording that names no assert.
	Note     string             `json:"note,omitempty"`
	Expect   string             `json:"expect,omitempty"`
	Exit     signature.ExitInfo `json:"exit"`
	Seconds  float64            `json:"seconds"`
	Stderr   string             `json:"stderr"`
	Launcher string             `json:"launcher,omitempty"`
	JobID    string             `json:"job_id,omitempty"`
	Node     string             `json:"node,omitempty"`
}

// CheckReplay judges v, a replay of the batch b read from path, at level.
func CheckReplay(path string, b *fixtures.Batch, v replay.Verdict, level signature.MatchLevel) Check {
	c := Check{
		File: path, Backend: string(v.Backend), Device: v.Device, Signature: v.Signature, Match: string(level),
		Exit: v.Exit, Seconds: v.Duration.Seconds(), Stderr: string(v.Result.Stderr),
	}
	if v.Launcher != replay.LauncherLocal {
		c.Launcher, c.JobID, c.Node = string(v.Launcher), v.JobID, v.Node
	}
	judge := signature.Judge{Level: level, Volatile: regress.VolatileValues(b)}
	switch {
	case b.Meta[regress.MetaExpect] == regress.ExpectPass:
		c.Expect = regress.ExpectPass
		judge.Want = signature.Signature{Family: signature.FamilyPass}
	case b.Error != nil:
		rec := signature.Recorded(b.Error.Text)
		c.Recorded = &rec
		judge.Want, judge.Recorded = rec, true
	}
	ruling := judge.Rule(v.Signature)
	c.Reproduces, c.Note = ruling.Outcome == signature.Reproduces, ruling.Note
	return c
}

// WriteText writes c for a person: where it replayed, the signatures, the
// verdict; control characters escaped, as Result.WriteText escapes them.
func (c Check) WriteText(w io.Writer) {
	var b strings.Builder
	c.writeText(&b)
	io.WriteString(w, fixtures.PrintableLines(b.String()))
}

func (c Check) writeText(w io.Writer) {
	fmt.Fprintf(w, "%s: replayed with %s on %s in %.3fs", c.File, c.Backend, c.Device, c.Seconds)
	if c.JobID != "" {
		fmt.Fprintf(w, " (slurm job %s on %s)", c.JobID, c.Node)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "signature: %s\n", c.Signature)
	if c.Recorded != nil {
		fmt.Fprintf(w, "recorded:  %s\n", *c.Recorded)
	}
	verdict := "reproduces"
	if c.Note != "" {
		verdict += " (" + c.Note + ")"
	}
	expectPass := c.Expect == regress.ExpectPass
	switch {
	case expectPass && c.Reproduces:
		verdict = "passes, as expected (a fixture's passing batch)"
	case expectPass:
		verdict = "fails, and it should pass (a fixture's passing batch)"
	case !c.Reproduces:
		verdict = "does not reproduce"
	}
	fmt.Fprintf(w, "verdict:   %s (match %s)\n", verdict, c.Match)
}

// Err is nil when the replay showed what it must, else an error of kind
// ErrNoRepro that says what it got and what to try.
func (c Check) Err() error {
	switch {
	case c.Reproduces:
		return nil
	case c.Expect == regress.ExpectPass:
		return errorf(ErrNoRepro, "%s should pass (a fixture's boundary or neighbour batch) but got %s", c.File, c.Signature)
	case c.Recorded == nil:
		return errorf(ErrNoRepro, "%s records no failure, and its replay did not fail: got %s (try another --backend or --device)", c.File, c.Signature)
	}
	return errorf(ErrNoRepro, "%s does not reproduce its recorded failure: got %s (try --match family, another --backend or --device; or the bug was fixed since it was recorded)", c.File, c.Signature)
}
