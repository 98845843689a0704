// Package reduction is reduce's main job as a library: given a recorded
// failing batch and a replay backend, Run confirms the failure, shrinks
// the samples (dropping them, neutralizing them, or bisecting the batch
// size), then the elements inside the kept samples, isolates each
// triggering element's boundary, and writes a regression fixture per
// finding.
//
//	crash.bin ─► confirm ─► samples | neutralize | size ─► elements ─► boundary ─► fixtures
//
// It owns the modes (one file each: confirm.go, samples.go, neutralize.go,
// size.go, elements.go, boundary.go), the candidates' descriptions
// (candidate.go: the recorded samples kept, in order, and the elements set
// to other values) and the journal (journal.go), the one cache of answers:
// every candidate, whatever the phase that asks, is looked up there by its
// description and trial, and a replay's answer is stored there, in memory
// and on disk, so that --resume maps every answer back to its trial.
//
// What to try next is shrink's business; how a candidate runs is the
// backend's (replay): this package never starts a process. It never reads
// flags either: cmd/reduce maps them to Options, Events to the progress
// bar or JSON lines, and the Result to the summary and the exit code.
package reduction
