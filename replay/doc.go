// Package replay runs one candidate batch in one fresh process and says what
// happened: a verdict with a failure signature.
//
// It owns the backends (go: the reduce binary re-executed as a worker; torch:
// a Python interpreter running the embedded package reduce_batch from its
// zip: its worker and fork server (reduce_batch.worker, through the
// launcher reduce_replay.py) and the runtime the pytest plugin shares;
// exec: the user's command), the slots replays run in, the one supervisor of their processes,
// and the verdict: the replay's output and exit handed to the signature
// parser (internal/signature) once. Where the process runs is its launcher's
// business: here (the default), or as a Slurm job of its own (the slurm
// launcher: srun, run here by the Runner, scancel, and a lost job retried,
// never taken for a verdict on the candidate).
//
// # Slots, starters and the supervisor
//
// Every replay first takes a slot from its backend's Pool (-j; slot i's
// environment pins it to GPU i mod len(--gpus)) and holds it until its
// process is gone; there is no other count of running replays. Then a
// starter starts one process in that slot, the leader of a process group of
// its own that dies with the reducer: Runner.Run execs a program
// (startProcess, on a locked OS thread so that the parent-death signal
// holds), or the torch zygote forks its pre-forked child of that slot
// (zygoteChild; the zygote is the child's parent and reaps it). What the
// starter hands over is a proc (its pid, which is its group's id; a channel
// closed once it has exited; reap, which kills what is left of the group
// and says how it ended) and its output (the two streams, read into bounded
// captures; the standard input it is fed). From there on the supervisor
// (Runner.supervise) alone watches it: the timeout and ctx, SIGINT to the
// group, the grace, SIGKILL, giving up after killWait, the output read to
// the end, the per-run directory removed once the process is gone, and
// Result's TimedOut, Canceled, Harness, ExitCode, Signal, CoreDump and
// Duration. A new way to start a process is a new proc, never a second copy
// of that lifecycle. The supervisor never signals a group once its leader
// is known to have exited (a reaped leader's id may name another group),
// never removes a directory a process may still use, and returns only when
// no process of the group is left and the run's files are gone, except for
// a process SIGKILL cannot end (Result.Err says so; the cleanup finishes
// when it dies).
//
// A replay never runs in the reducer's own process: after a CUDA device
// assert the context is unusable, and a crash must not take the reducer
// with it. Nothing here parses a file it did not write, and nothing here
// decides which candidate to try next: that is shrink's job.
package replay
