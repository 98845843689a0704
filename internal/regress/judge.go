package regress

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"reduce/fixtures"
	"reduce/internal/signature"
)

// A fixture's tests run its batches in the user's test session (the pytest
// plugin, Python), which reports what each run did; what a run means is
// decided here, by the judge the reduction judged its replays with
// (signature.Judge): `reduce judge DIR` reads a Run and prints its Verdict.
// The Python side parses no traceback and compares no output.

// Run is what one run of a fixture's batch did, as the plugin reports it.
type Run struct {
	// Batch is the fixture's file that ran: batch.bin, or a batch that
	// passes (the boundary, a neighbour).
	Batch string `json:"batch"`
	// Device is where it ran ("cpu", "cuda"); "" for a command of the
	// user's own.
	Device string `json:"device"`
	// Exit is how it ended: code 0, no signal, when it ran to its end; a
	// run in the test session that raised reports code 1.
	Exit signature.ExitInfo `json:"exit"`
	// Stderr is what the run wrote there (a child process's, the user's
	// command's), or the traceback of the exception it raised in the test
	// session as Python prints it.
	Stderr string `json:"stderr"`
	// Outputs are its outputs' summary, when it ran to its end.
	Outputs []OutputSummary `json:"outputs,omitempty"`
	// Values are its outputs' values, for a batch whose record keeps them,
	// where the plugin ran it in the test session (a built-in op's, on the
	// CPU); nil where it did not (a child process's run under a memory
	// limit): then its outputs must be finite.
	Values []OutputValue `json:"values"`
	// Like is the boundary batch's summary where batch.bin is to pass with
	// outputs of the same parts, dtypes and shapes (a fixture whose finding
	// is a range of values); nil when there is none.
	Like []OutputSummary `json:"like,omitempty"`
}

// OutputSummary is one tensor or number of a run's outputs: where it is
// ("" for a bare tensor, "0.loss"), torch's dtype name, its shape, and
// whether it holds no NaN or infinity.
type OutputSummary struct {
	Path   string  `json:"path"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Finite bool    `json:"finite"`
}

// Verdict is the judge's answer about a Run: Outcome, and Why it is not what
// the batch is for (or, for the recorded failure, the failure seen).
type Verdict struct {
	Outcome string `json:"outcome"`
	Why     string `json:"why,omitempty"`
}

// Outcomes of JudgeRun: a closed set.
const (
	// OutcomeRecorded: the run failed as the fixture records.
	OutcomeRecorded = "recorded"
	// OutcomeOther: it failed otherwise, or its outputs are not the ones
	// wanted.
	OutcomeOther = "other"
	// OutcomePass: it ran to its end with the outputs wanted.
	OutcomePass = "pass"
)

// JudgeRun judges run, one run of a batch of f in the user's test session,
// as the reduction judged its replays: batch.bin reproduces the recorded
// failure (signature.Judge at the record's match level, the batch's
// per-sample values volatile, the record's placeholders any text; a run on
// the CPU of a batch reduced on a device, the failure the record says it
// raises on the CPU), fails otherwise, or passes with finite
// outputs, of the boundary batch's parts, dtypes and shapes where run.Like
// gives them; a batch that passes passes, with its recorded outputs (within
// their tolerances) where the record keeps them and the run reports its
// values, else finite ones.
func JudgeRun(f *Fixture, run Run) (Verdict, error) {
	if !slices.Contains(f.Files, run.Batch) || !strings.HasSuffix(run.Batch, ".bin") {
		return Verdict{}, fmt.Errorf("%s: %q is no batch of the fixture (%s)", f.Dir, fixtures.Printable(run.Batch), strings.Join(f.Files[1:], ", "))
	}
	b, err := fixtures.Read(filepath.Join(f.Dir, BatchFile))
	if err != nil {
		return Verdict{}, err
	}
	// The record's signature was redacted when it was written (redact.go):
	// the run's is redacted alike, so that a message that names a path, a
	// host or a token is judged as the record's placeholders say it.
	got := signature.Parse([]byte(run.Stderr), run.Exit)
	newRedactor(&f.Record, &Regression{Batch: b}).people().signature(&got)
	if run.Batch == BatchFile {
		level, err := signature.ParseMatchLevel(f.Record.Match)
		if err != nil {
			return Verdict{}, fmt.Errorf("%s/%s: %w", f.Dir, RecordFile, err)
		}
		judge := signature.Judge{Want: f.Record.Signature, Level: level, Volatile: VolatileValues(b), Placeholders: placeholderRe}
		if cpu := f.Record.CPU; cpu != nil && cpu.Message != "" && run.Device == "cpu" && f.Record.Environment.Device != "cpu" {
			// Reduced on a device, run on the CPU: what the minimal batch
			// raises there, as the reduction recorded it.
			judge.Want = signature.Parse([]byte(cpu.Exception+": "+cpu.Message+"\n"), signature.ExitInfo{Code: 1})
		}
		switch judge.Rule(got).Outcome {
		case signature.Reproduces:
			return Verdict{Outcome: OutcomeRecorded, Why: got.String()}, nil
		case signature.OtherFailure:
			return Verdict{Outcome: OutcomeOther, Why: fmt.Sprintf("%s, where the record has %s (match %s)", got, judge.Want, level)}, nil
		}
		return outputsFine(run.Outputs, run.Like), nil
	}
	if got.Family != signature.FamilyPass {
		return Verdict{Outcome: OutcomeOther, Why: "it fails: " + got.String()}, nil
	}
	var want []OutputValue
	if b := f.Record.Boundary; b != nil && b.File == run.Batch {
		want = b.Outputs
	}
	for _, n := range f.Record.Neighbours {
		if n.File == run.Batch {
			want = n.Outputs
		}
	}
	if want != nil && run.Values != nil {
		if err := CheckOutputs(run.Values, want); err != nil {
			return Verdict{Outcome: OutcomeOther, Why: err.Error()}, nil
		}
		return Verdict{Outcome: OutcomePass}, nil
	}
	return outputsFine(run.Outputs, nil), nil
}

// outputsFine is a pass when every output is finite and, with like, the
// outputs have like's parts, dtypes and shapes.
func outputsFine(got, like []OutputSummary) Verdict {
	name := func(path string) string {
		if path == "" {
			return "the output"
		}
		return fmt.Sprintf("output %q", path)
	}
	for _, o := range got {
		if !o.Finite {
			return Verdict{Outcome: OutcomeOther, Why: fmt.Sprintf("%s (%s%v) is not finite: it holds NaN or an infinity", name(o.Path), o.DType, o.Shape)}
		}
	}
	if like == nil {
		return Verdict{Outcome: OutcomePass}
	}
	byPath := map[string]OutputSummary{}
	for _, o := range got {
		byPath[o.Path] = o
	}
	var diffs []string
	for _, w := range like {
		g, ok := byPath[w.Path]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+name(w.Path))
		case g.DType != w.DType || !slices.Equal(g.Shape, w.Shape):
			diffs = append(diffs, fmt.Sprintf("%s: %s%v, want %s%v", name(w.Path), g.DType, g.Shape, w.DType, w.Shape))
		}
		delete(byPath, w.Path)
	}
	for _, o := range got {
		if _, extra := byPath[o.Path]; extra {
			diffs = append(diffs, "unexpected "+name(o.Path))
		}
	}
	if diffs != nil {
		return Verdict{Outcome: OutcomeOther, Why: "the outputs differ from the boundary batch's: " + strings.Join(diffs, "; ")}
	}
	return Verdict{Outcome: OutcomePass}
}

// VolatileValues are the values of b that a host message may quote
// (signature.Judge.Volatile): its per-sample strings, and the fresh values
// the relation probes give them.
func VolatileValues(b *fixtures.Batch) []string {
	out := []string{"reduce-fresh-1"} // every reduce-fresh-<k> normalizes as this one does
	for _, path := range b.SampleValues() {
		leaf := b.Structure.SampleLeaf(path)
		if leaf == nil {
			continue
		}
		for _, v := range leaf.Values {
			var s string
			if json.Unmarshal(v, &s) == nil && s != "" {
				out = append(out, s)
			}
		}
	}
	return signature.VolatileValues(out)
}
