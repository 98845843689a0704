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

// Summary is a Result for a program: the last JSON line of `reduce
// --json` (DESIGN.md, "The CLI"), after the Events.
type Summary struct {
	Event     string              `json:"event"` // "summary"
	Fixture   string              `json:"fixture"`
	Fixtures  []string            `json:"fixtures"`
	Signature signature.Signature `json:"signature"`
	Message   string              `json:"message,omitempty"`
	// Predates says why the cause lies before the recorded batch; the
	// culprits are then witnesses.
	Predates      string               `json:"predates,omitempty"`
	Compiled      *regress.Compiled    `json:"compiled,omitempty"`
	SignatureNote string               `json:"signature_note,omitempty"`
	Mode          Mode                 `json:"mode"`
	ModeReason    string               `json:"mode_reason"`
	Culprits      []regress.Culprit    `json:"culprits"`
	Size          *regress.SizeResult  `json:"size"`
	Shape         *regress.ShapeResult `json:"shape,omitempty"`
	// Window is the cause found in a recorded window's earlier steps; the
	// culprits are then the failing step's batch, a witness.
	Window *regress.WindowCause `json:"window,omitempty"`
	// Ranks is set when the batch was one rank's file of a
	// torch.distributed run: which rank, and the other ranks' files.
	Ranks   *regress.Ranks `json:"ranks,omitempty"`
	Replays int            `json:"replays"`
	// Ahead is the replays made ahead of need (-j N) that no search used:
	// what speculation cost. Replays is the same for every -j.
	Ahead         int                    `json:"ahead"`
	Jobs          int                    `json:"jobs"`
	Resumed       int                    `json:"resumed"`
	Phases        map[Phase]PhaseCount   `json:"phases"`
	OtherFailures []regress.OtherFailure `json:"other_failures"`
	// Launcher is where the replays ran; for Slurm with the jobs
	// submitted, retried and lost.
	Launcher replay.LaunchInfo `json:"launcher"`
	Seconds  float64           `json:"seconds"`
	Partial  bool              `json:"partial"`
}

// Summary is res for a program.
func (res *Result) Summary() Summary {
	s := Summary{Event: "summary", Fixture: res.Fixtures[0], Fixtures: res.Fixtures, Signature: res.Want, Message: res.Message, Predates: res.Predates, Compiled: res.Compiled, SignatureNote: res.WantNote, Mode: res.Mode,
		ModeReason: res.ModeReason, Ranks: res.Ranks, Culprits: []regress.Culprit{}, Size: res.Size, Replays: res.Replays, Ahead: res.Ahead, Jobs: res.Jobs, Resumed: res.Resumed,
		Phases: res.Phases, OtherFailures: res.OtherFailures, Launcher: res.Launch, Seconds: res.Seconds, Partial: res.Partial}
	for i, f := range res.Findings {
		s.Culprits = append(s.Culprits, f.Culprit(res.Fixtures[i]))
		if s.Shape == nil {
			s.Shape = f.Shape
		}
		if s.Window == nil {
			s.Window = f.Window
		}
	}
	return s
}

// WriteText writes res for a person: the failure, the mode, each culprit
// set with its diagnosis, the other failures, the replays; the fixture's
// path is the last line. Ids, names and texts come from the file (maybe
// someone else's): every control character is printed escaped
// (fixtures.PrintableLines), so that none drives the terminal.
func (res *Result) WriteText(w io.Writer) {
	var b strings.Builder
	res.writeText(&b)
	io.WriteString(w, fixtures.PrintableLines(b.String()))
}

func (res *Result) writeText(w io.Writer) {
	if res.Message != "" {
		fmt.Fprintf(w, "failure: %s\n", res.Message)
	}
	fmt.Fprintf(w, "signature: %s\n", res.Want)
	if res.WantNote != "" {
		fmt.Fprintf(w, "  (%s)\n", res.WantNote)
	}
	if r := res.Ranks; r != nil {
		fmt.Fprintf(w, "rank: %d of %d under torch.distributed, whose failure came first; replayed alone\n", r.Rank, r.WorldSize)
	}
	fmt.Fprintf(w, "mode: %s (%s)\n", res.Mode, res.ModeReason)
	if res.Size != nil {
		fmt.Fprintf(w, "size: %s\n", res.Size.Text())
	}
	if res.Predates != "" {
		fmt.Fprintf(w, "cause: %s\n", strings.TrimPrefix(predatesReason(res.Predates), "the cause "))
	}
	if res.Compiled != nil {
		fmt.Fprintf(w, "compile: %s\n", res.Compiled.Words())
	}
	for i, f := range res.Findings {
		if c := f.Window; c != nil {
			fmt.Fprintf(w, "cause: %s\n", c.Words())
			others := ""
			if len(c.Elements()) > 1 {
				others = " with the others that stand out"
			}
			for _, s := range c.Steps {
				for _, e := range s.Elements {
					v := regress.FmtHeld(e.Value)
					if e.ValueText != "" {
						v = e.ValueText
					}
					fmt.Fprintf(w, "  %s%s of step %d's batch = %s stands out (%s; set to %s%s, it passes)\n", regress.TensorLabel(e.Tensor), indexText(e.Index), s.Index, v, e.Rule, regress.FmtHeld(*e.Passing), others)
				}
			}
			fmt.Fprintf(w, "witness: the failing step's batch, %s %s (it passes from the window's start without the cause)\n", regress.Count(int64(len(f.Indices)), "sample"), fewIDs(f.IDs))
			continue
		}
		if res.Predates != "" {
			fmt.Fprintln(w, strings.TrimSpace(fmt.Sprintf("witness: samples %v %s (they fail against the recorded state; no culprit)", f.Indices, strings.Join(f.IDs, " "))))
			continue
		}
		if res.Mode != ModeSize {
			fmt.Fprintln(w, strings.TrimSpace(fmt.Sprintf("culprit: samples %v %s", f.Indices, fixtures.NameIDs(res.IDKind, f.IDs, f.Wrapped))))
		}
		if f.Relation != nil {
			fmt.Fprintf(w, "  relation: %s (equal values fail; either one changed to a value found nowhere in the batch passes)\n", f.Relation.Text)
		}
		for k, e := range f.Elements {
			if f.Relation != nil && k < len(f.Relation.Elements) {
				continue
			}
			fmt.Fprintf(w, "  %s\n", e.Diagnosis())
		}
		if len(f.Shared) > 0 {
			fmt.Fprintf(w, "  every sample of the batch holds %s, and each fails alone\n", strings.Join(f.Shared, " and "))
		}
		switch {
		case f.Shape != nil:
			fmt.Fprintf(w, "  shape: %s\n", f.Shape.Text)
		case f.ContentFree && res.Mode != ModeSize && f.Relation == nil:
			fmt.Fprintf(w, "  no value triggers it: every element neutralized still fails\n")
		}
		if len(res.Findings) > 1 {
			fmt.Fprintf(w, "  fixture: %s\n", res.Fixtures[i])
		}
	}
	for _, o := range res.OtherFailures {
		fmt.Fprintf(w, "other failure (not followed), %s: %s\n", regress.Count(int64(o.Count), "time"), o.Text())
	}
	if l := res.Launch; l.Launcher == replay.LauncherSlurm {
		lost := 0
		for _, n := range l.Unresolved {
			lost += n
		}
		fmt.Fprintf(w, "slurm: %d jobs on %s, %d retried, %d lost %v\n", l.Jobs, strings.Join(l.Nodes, ","), l.Retried, lost, l.Unresolved)
	}
	resumed := ""
	if res.Resumed > 0 {
		resumed = fmt.Sprintf(", %d answers from the journal", res.Resumed)
	}
	state := ""
	if res.Partial {
		state = " (interrupted: partial)"
	}
	ahead := ""
	if res.Ahead > 0 {
		ahead = fmt.Sprintf(", and %d made ahead (-j %d) that no search used", res.Ahead, res.Jobs)
	}
	fmt.Fprintf(w, "replays: %d in %.1fs%s%s%s\n", res.Replays, res.Seconds, resumed, ahead, state)
	fmt.Fprintln(w, res.Fixtures[0])
}
