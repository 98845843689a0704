// Package replay runs one candidate batch in one fresh process and says what
// happened: a verdict with a failure signature.
//
// It owns the backends (go: the reduce binary re-executed as a worker; torch:
// a Python interpreter with the embedded reduce_replay.py, which imports the
// embedded reduce_batch.py users vendor; exec: the user's command), their timeouts, process groups and bounded output capture, the
// parsing of a replay's output into a signature.Signature, and matching signatures.
// Where the process runs is its launcher's business: here (the default), or
// as a Slurm job of its own (the slurm launcher: srun, scancel, and a lost
// job retried, never taken for a verdict on the candidate).
//
// A replay never runs in the reducer's own process: after a CUDA device
// assert the context is unusable, and a crash must not take the reducer
// with it. Nothing here decides which candidate to try next; that is
// shrink's job.
package replay
