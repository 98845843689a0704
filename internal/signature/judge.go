package signature

import (
	"regexp"
	"strings"
)

// Outcome is what a replay shows about the failure wanted: a closed set.
type Outcome int

// Outcomes of Judge.Rule.
const (
	// Reproduces: the replay failed as wanted.
	Reproduces Outcome = iota + 1
	// OtherFailure: it ended otherwise than wanted and did not pass: a
	// different failure, a timeout, a harness or infrastructure failure.
	OtherFailure
	// Passes: it ran to its end without a failure.
	Passes
)

// String names o as reports print it.
func (o Outcome) String() string {
	switch o {
	case Reproduces:
		return "reproduces"
	case OtherFailure:
		return "another failure"
	case Passes:
		return "passes"
	}
	return "unknown"
}

// Judge decides whether replays reproduce one failure. It is the one
// judgement of a replay: the reduction judges every candidate with it,
// `reduce replay` a file, the regression writer the failure it reports;
// nothing else compares signatures.
type Judge struct {
	// Want is the failure wanted: a recording's, a replay's that a
	// reduction kept, a pass (a fixture's boundary batch, which must keep
	// passing), or none (the zero Signature: the batch recorded no failure,
	// and any failure is the one wanted).
	Want Signature
	// Level is how closely a replay must agree with Want (MatchStrict when
	// "").
	Level MatchLevel
	// Recorded says that Want is a recording's own text, not yet a
	// replay's: a recording that names no assert, or only the file that
	// reported one, is then reproduced by a replay's device assert that it
	// allows (refines), with a note, so that the replay's assert can stand
	// for it.
	Recorded bool
	// Volatile are values of the batch (per-sample strings, the fresh
	// values a probe gives them) that a host message may quote: in Want
	// and the replay's message alike such a value is one mark, so that a
	// check that names the offending value ("duplicate clip_id 'c-7f3a'")
	// is one failure whichever sample or probe value it names. Made by
	// VolatileValues.
	Volatile []string
	// Placeholders, where Want's texts were redacted (a fixture's record:
	// internal/regress), match the placeholders the redaction wrote
	// ("<host>", "<user>"): in Want's expression each stands for any text
	// of the replay's, which names the host or the user it ran as.
	Placeholders *regexp.Regexp
}

// Ruling is a Judge's answer about one replay.
type Ruling struct {
	Outcome Outcome
	// Note says why a replay reproduces a recording that names no assert
	// (or only its file): its assert is one the recording allows. "" for
	// every other ruling.
	Note string
}

// Rule judges got, a replay's signature. It is the one rule every replay
// is judged by: got reproduces Want at Level, or refines a recorded Want
// (refines: a device assert the recording allows, with a note), or, with no
// Want, is a failure (Failing); else it passes or is another failure.
//
// At MatchStrict it compares what the two failures are, not how a build
// printed them:
//
//   - Both name a known check (Class): the same class (oom.device and
//     oom.host are one: an OOM reproduces an OOM whatever allocator ran
//     out), whatever the build, device or era printed them: a THNN CPU
//     assert, a THCUNN, ATen, HIP or Inductor device assert and a 2.x CPU
//     IndexError of nll_loss are one failure; two different classes never
//     match. Two host messages of one class that name different halves of
//     the check (one_hot's "non-negative" and "smaller than num_classes"
//     on the CPU, where CUDA has one assert for both) are different
//     failures.
//   - One names a known check and the other only the file that reported
//     it (File, see Classes): the check must be one that file raises.
//   - Otherwise (a device assert of unknown kind, an exception no rule
//     knows, the signals): Matches, by the texts. A device assert of
//     unknown kind thus reproduces only another of unknown kind; it never
//     matches a named assert, since it might be any of them.
//
// At MatchFamily: the same family, or what strict accepts. At MatchAny:
// Matches. A Want that is no failure (a pass, a timeout) is reproduced by
// the same family at every level.
func (j Judge) Rule(got Signature) Ruling {
	want, level := maskVolatile(j.Want, j.Volatile), j.Level
	got = maskVolatile(got, j.Volatile)
	if j.Placeholders != nil && redactedMatch(want.Expression, got.Expression, j.Placeholders) {
		got.Expression = want.Expression
	}
	if level == "" {
		level = MatchStrict
	}
	same := false
	switch {
	case want.Family == "":
		same = Failing(got) // nothing recorded: any failure is the one
	case !Failing(want) || level == MatchAny:
		same = got.Matches(want, level)
	case level == MatchFamily && got.Family == want.Family:
		same = true
	case !Failing(got):
	default:
		gc, wc := got.Classes(), want.Classes()
		switch {
		case len(gc) == 1 && len(wc) == 1 && got.Class() != "" && want.Class() != "":
			same = sameClass(gc[0], wc[0]) && !otherSide(got, want)
		case got.Class() != "" && len(wc) > 0:
			same = anyClassIn(gc, wc)
		case want.Class() != "" && len(gc) > 0:
			same = anyClassIn(wc, gc)
		case len(gc) > 0 && len(wc) > 0:
			// Two texts that name only files: the same asserts possible.
			same = sameSet(gc, wc)
		case len(gc) > 0 || len(wc) > 0:
			// A known check or a file against an unknown kind: no.
		default:
			same = got.Matches(want, MatchStrict)
		}
	}
	switch {
	case same:
		return Ruling{Outcome: Reproduces}
	case j.Recorded && refines(got, want):
		return Ruling{Outcome: Reproduces, Note: "the recording " + want.Partial() + ": the replay's assert is one it allows"}
	case got.Family == FamilyPass:
		return Ruling{Outcome: Passes}
	}
	return Ruling{Outcome: OtherFailure}
}

// redactedMatch reports whether got is want with each placeholder of want
// (a match of placeholders) standing for any text: the parts between them
// equal, in order. false when want holds no placeholder.
func redactedMatch(want, got string, placeholders *regexp.Regexp) bool {
	spans := placeholders.FindAllStringIndex(want, -1)
	if len(spans) == 0 || want == got {
		return false
	}
	var b strings.Builder
	b.WriteString("^(?s)")
	at := 0
	for _, sp := range spans {
		b.WriteString(regexp.QuoteMeta(want[at:sp[0]]))
		b.WriteString(".*?")
		at = sp[1]
	}
	b.WriteString(regexp.QuoteMeta(want[at:]) + "$")
	re, err := regexp.Compile(b.String())
	return err == nil && re.MatchString(got)
}
