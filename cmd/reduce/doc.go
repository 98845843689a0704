// Reduce shrinks a recorded failing PyTorch batch to the smallest input that
// still triggers the same failure, and writes it as a regression fixture.
//
// Usage:
//
//	reduce --batch crash.bin [flags]
//	reduce inspect [--json] FILE
//	reduce replay [--backend go|torch|exec] [--device DEV] [--json] FILE
//	reduce convert IN -o OUT [--force] [--op NAME] [--attr k=v]... [--batch-dim name=N]... [--ids FILE]
//	reduce recorder [--hooks] > reduce_batch.py
//	reduce fixed DIR...
//	reduce trust [--forget] PATH...
//
// # Output
//
// Progress and errors go to stderr; results go to stdout. Errors are one
// line, `reduce: ...`, naming the file and the field at fault.
//
// # Trust
//
// A batch file is data, and may come from someone else. It runs what it
// names (its step, the class it rebuilds, its interpreter) only when it is
// yours: written by your recorder, committed in your repository, or allowed
// with `reduce trust FILE` (internal/trust); else exit 2 before any replay.
// --entry replays a function you name. inspect shows what the file would
// run and whether it is yours, with control characters escaped.
//
// # Exit codes
//
//	0  done
//	1  internal error
//	2  bad usage or bad input (a malformed file, a wrong flag)
//	3  the original does not reproduce
//	4  interrupted (a partial fixture was written)
//
// This package is the command line only: flags, commands, exit codes and
// output. The main job is internal/reduction's Run: this package maps the
// flags to its Options (and to replay.Options for the backend), its events
// to the progress bar or JSON lines, and its Result to the summary and the
// exit code. What a batch is lives in fixtures and kernels, how a candidate
// is replayed in replay, which candidates to try in shrink.
package main
