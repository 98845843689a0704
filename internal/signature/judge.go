package signature

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
}

// Ruling is a Judge's answer about one replay.
type Ruling struct {
	Outcome Outcome
	// Note says why a replay reproduces a recording that names no assert
	// (or only its file): its assert is one the recording allows. "" for
	// every other ruling.
	Note string
}

// Rule judges got, a replay's signature: it reproduces Want at Level (see
// reproduces), or refines a recorded Want, or, with no Want, is a failure
// (Failing); else it passes or is another failure.
func (j Judge) Rule(got Signature) Ruling {
	level := j.Level
	if level == "" {
		level = MatchStrict
	}
	switch {
	case j.Want.Family == "":
		if Failing(got) {
			return Ruling{Outcome: Reproduces}
		}
	case reproduces(got, j.Want, level):
		return Ruling{Outcome: Reproduces}
	case j.Recorded && refines(got, j.Want):
		return Ruling{Outcome: Reproduces, Note: "the recording " + j.Want.Partial() + ": the replay's assert is one it allows"}
	}
	if got.Family == FamilyPass {
		return Ruling{Outcome: Passes}
	}
	return Ruling{Outcome: OtherFailure}
}
