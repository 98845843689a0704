package replay

import (
	"bytes"

	"reduce/internal/signature"
)

// ReturnedLine is the line a worker (the go worker, the torch worker)
// prints on its stdout once the candidate's op or step has returned, after
// its report. A worker that exits 0 without it ended before the step did
// (a step that calls os._exit(0) halfway, sys.exit(0) in the step): a
// harness fault, not a pass. A command of the user's (the exec backend,
// cold or run warm by the zygote) is judged by its exit status alone, as
// the interpreter would end it: os._exit(0) is its own choice of status.
const ReturnedLine = "reduce-returned"

// returned reports whether stdout holds ReturnedLine as a line of its own.
func returned(stdout []byte) bool {
	for i := 0; ; {
		j := bytes.Index(stdout[i:], []byte(ReturnedLine))
		if j < 0 {
			return false
		}
		at, end := i+j, i+j+len(ReturnedLine)
		if (at == 0 || stdout[at-1] == '\n') && (end == len(stdout) || stdout[end] == '\n' || stdout[end] == '\r') {
			return true
		}
		i = end
	}
}

// workerFault says how a worker's end was its own fault rather than the
// candidate's, or "": a worker that exited 0 before the step returned (no
// ReturnedLine), or the go worker killed by its own runtime (exit status
// 2: a Go panic or fatal error, "fatal error: runtime: out of memory"),
// which a candidate's op never causes (its failures are exit 1 or SIGABRT).
// A worker killed by SIGKILL (the kernel's OOM killer) is infra already
// (signature.Parse). worker is false for the user's command (exec).
func workerFault(kind Kind, worker bool, res Result) string {
	if !worker || !res.Started || res.Err != nil || res.TimedOut || res.Canceled || res.Harness || res.Signal != 0 {
		return ""
	}
	switch {
	case res.ExitCode == 0 && !returned(res.Stdout):
		return "worker fault: exited 0 before the step returned"
	case kind == KindGo && res.ExitCode == 2:
		if d := signature.GoRuntimeDeath(res.Stderr); d != "" {
			return "worker fault: the go worker died: " + d
		}
		return "worker fault: the go worker died (exit status 2)"
	}
	return ""
}
