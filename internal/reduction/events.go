package reduction

import (
	"reduce/internal/signature"
	"reduce/shrink"
)

// Phase names a part of a reduction, in Events, Result.Phases and the
// record's replay counts.
type Phase string

const (
	PhaseConfirm    Phase = "confirm"    // replaying the original
	PhaseSamples    Phase = "samples"    // dropping samples
	PhaseNeutralize Phase = "neutralize" // replacing samples by a benign one
	PhaseSize       Phase = "size"       // bisecting the batch size
	PhaseElements   Phase = "elements"   // neutralizing elements of the kept samples
	PhaseBoundary   Phase = "boundary"   // the nearest passing value of each element
	PhaseRange      Phase = "range"      // the valid range's other end, past the passing value
	PhaseShape      Phase = "shape"      // the size of a non-batch dim that decides the failure
	PhaseRelation   Phase = "relation"   // equal values in several samples
	PhaseNeighbours Phase = "neighbours" // the batch without the culprits
	PhaseHistory    Phase = "history"    // the culprits replayed without the recorded state
	PhaseCompile    Phase = "compile"    // the minimal batch of a compiled step replayed eager
	// PhaseWindow replays the failing step's batch without a recorded
	// window's earlier steps, then drops whole steps; PhaseWindowSamples
	// drops the samples of the steps kept.
	PhaseWindow        Phase = "window"
	PhaseWindowSamples Phase = "window samples"
)

// Mode is how the samples were reduced: a closed set.
type Mode string

const (
	// ModeSamples drops samples (the usual case).
	ModeSamples Mode = "samples"
	// ModeNeutralize keeps the batch size and replaces samples by copies
	// of a benign one: the failure needs a number of samples, but only
	// some of them for their values.
	ModeNeutralize Mode = "neutralize"
	// ModeSize bisects the batch size: an out-of-memory failure, or one
	// that needs no value at all.
	ModeSize Mode = "size"
	// ModeWindow searches a recorded window of earlier steps: the failing
	// step's batch passes without them, and is kept whole as a witness.
	ModeWindow Mode = "window"
)

// Event is what Options.Events receives: *Start, *PhaseStarted, *Replayed,
// *Confirmed, *CulpritFound or *Log. Every type but Log has an "event"
// field and JSON tags: encoded as they are, they are the --json lines.
type Event interface{ isEvent() }

// Start opens a reduction.
type Start struct {
	Event    string               `json:"event"` // "start"
	Batch    string               `json:"batch"`
	Samples  int64                `json:"samples"`
	Op       string               `json:"op"`
	Backend  string               `json:"backend"`
	Match    string               `json:"match"`
	Recorded *signature.Signature `json:"recorded"`
	Resumed  bool                 `json:"resumed"`
}

// PhaseStarted opens a phase over Units units (samples, elements, ...).
type PhaseStarted struct {
	Event string `json:"event"` // "phase"
	Phase Phase  `json:"phase"`
	Units int    `json:"units"`
}

// Replayed is one candidate answered by a replay, or by the journal of an
// earlier run (Resumed; Seconds is then 0).
type Replayed struct {
	Event     string              `json:"event"` // "replay"
	Phase     Phase               `json:"phase"`
	Key       string              `json:"key"`
	Size      int                 `json:"size"`
	Outcome   shrink.Outcome      `json:"outcome"`
	Signature signature.Signature `json:"signature"`
	Seconds   float64             `json:"seconds,omitempty"`
	Resumed   bool                `json:"resumed,omitempty"`
	// Where it ran, for a launcher other than the local one.
	Launcher string `json:"launcher,omitempty"`
	JobID    string `json:"job_id,omitempty"`
	Node     string `json:"node,omitempty"`
	Requeued int    `json:"requeued,omitempty"`
}

// Confirmed ends the confirmation: Reproduced of Replays replays failed as
// Signature. Note says why Signature is not the recorded one (the
// recording named no assert: the first replay's is kept), or what a
// Signature that names no assert matches; empty when there is nothing to
// say.
type Confirmed struct {
	Event      string              `json:"event"` // "confirm"
	Replays    int                 `json:"replays"`
	Reproduced int                 `json:"reproduced"`
	Signature  signature.Signature `json:"signature"`
	Note       string              `json:"note,omitempty"`
}

// CulpritFound is a culprit set of samples (positions in the original
// batch) before its elements are reduced.
type CulpritFound struct {
	Event   string   `json:"event"` // "culprit"
	Indices []int    `json:"indices"`
	IDs     []string `json:"ids"`
}

// Log is a line for a person (progress on stderr); it is not a JSON event.
type Log struct{ Text string }

func (*Start) isEvent()        {}
func (*PhaseStarted) isEvent() {}
func (*Replayed) isEvent()     {}
func (*Confirmed) isEvent()    {}
func (*CulpritFound) isEvent() {}
func (*Log) isEvent()          {}
