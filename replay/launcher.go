package replay

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Launcher is where replays run: a closed set, the values of the
// --launcher flag. Every backend runs its replays through its Pool, which
// starts them here or as Slurm jobs; either way the one supervisor watches
// each of them (supervisor.go).
type Launcher string

// Launchers.
const (
	// LauncherLocal runs every replay as a process of this machine (the
	// default).
	LauncherLocal Launcher = "local"
	// LauncherSlurm runs every replay as a Slurm job of its own, through
	// srun: one job, one step, one task (see slurm.go).
	LauncherSlurm Launcher = "slurm"
)

// DefaultRetries is how many times a replay whose Slurm job was lost
// (cancelled from outside, preempted, its node failed, it never started
// within the queue timeout) is submitted again before its verdict is infra.
const DefaultRetries = 2

// DefaultQueueTimeout bounds how long a replay's Slurm job may wait in the
// queue before it counts as lost (srun --immediate).
const DefaultQueueTimeout = 10 * time.Minute

// Launch is where one Command ran, when a launcher other than the local one
// ran it (Result.Launch).
type Launch struct {
	Launcher Launcher
	// JobID and Node are the Slurm job that ran the command (its last
	// attempt) and the node its step ran on; empty when it never started.
	JobID, Node string
	// Jobs are the job ids of every attempt, first to last.
	Jobs []string
	// Attempts counts the jobs submitted: 1, plus one per retry.
	Attempts int
	// Infra says why the command's outcome says nothing about the candidate
	// (one of the Slurm* reasons), "" when it does. A command with Infra
	// set has the verdict infra, "slurm: <reason>", whatever its exit.
	Infra string
	// Detail is the line of srun or slurmstepd that gave Infra.
	Detail string
	// Log holds the lines srun, slurmstepd and the job's wrapper wrote to
	// the command's stderr; they are taken out of Result.Stderr, so that
	// the signature is parsed from the replay's own text, as locally.
	Log []byte
}

// Why a Slurm replay could not be judged (Launch.Infra, the keys of
// LaunchInfo.Unresolved). All but SlurmWrapper are retried.
const (
	SlurmQueueTimeout = "queue_timeout" // not started within the queue timeout
	SlurmNotStarted   = "not_started"   // srun could not get an allocation
	SlurmCancelled    = "cancelled"     // cancelled by someone else (scancel, an admin)
	SlurmNodeFail     = "node_fail"     // its node failed or was set down
	SlurmPreempted    = "preempted"     // preempted by a job of higher priority
	SlurmLost         = "lost"          // srun died or lost the step
	SlurmWrapper      = "wrapper"       // the job's wrapper could not set up the run
)

// LaunchInfo is the provenance of a backend's replays, for the fixture's
// record: where they ran, with which options, on which nodes.
type LaunchInfo struct {
	Launcher Launcher `json:"launcher"`
	// Version is the scheduler's ("slurm-wlm 22.05.8"), "" for local.
	Version string `json:"version,omitempty"`
	// Options are the user's srun options (--slurm-args), split.
	Options []string `json:"options,omitempty"`
	// SharedDir is the directory the candidates went through, "" when they
	// went through the step's standard input.
	SharedDir string `json:"shared_dir,omitempty"`
	// QueueTimeout and Retries are the launcher's limits, in seconds and
	// attempts.
	QueueTimeout float64 `json:"queue_timeout_seconds,omitempty"`
	Retries      int     `json:"retries_allowed,omitempty"`
	// Nodes are the hosts replays ran on, sorted (this host's name for
	// local).
	Nodes []string `json:"nodes"`
	// Jobs counts the Slurm jobs submitted, retries included.
	Jobs int `json:"jobs,omitempty"`
	// Retried counts the jobs submitted again after a lost one.
	Retried int `json:"retried,omitempty"`
	// Unresolved counts the lost jobs by reason (the Slurm* constants),
	// retried ones included; Canceled the jobs reduce cancelled itself
	// (timeouts, Ctrl-C, Close).
	Unresolved map[string]int `json:"unresolved,omitempty"`
	Canceled   int            `json:"canceled,omitempty"`
}

// Provenance is where b's replays ran: the Slurm launcher's LaunchInfo,
// or this host for a backend that runs them locally (and for one that is
// none of New's).
func Provenance(b Backend) LaunchInfo {
	if p, ok := b.(interface{ provenance() LaunchInfo }); ok {
		return p.provenance()
	}
	return localInfo()
}

// localInfo is the provenance of local replays: this host.
func localInfo() LaunchInfo {
	host, _ := os.Hostname()
	return LaunchInfo{Launcher: LauncherLocal, Nodes: []string{host}}
}

// newLauncher builds o's Slurm launcher, or nil for local (the Pool runs
// the Runner itself).
func newLauncher(o *Options) (*slurm, error) {
	switch Launcher(strings.ToLower(strings.TrimSpace(string(o.Launcher)))) {
	case "", LauncherLocal:
		for _, f := range []struct {
			set  bool
			name string
		}{{o.SlurmArgs != "", "--slurm-args"}, {o.SharedDir != "", "--shared-dir"}, {o.QueueTimeout != 0, "--queue-timeout"}} {
			if f.set {
				return nil, fmt.Errorf("replay: %s is for --launcher slurm", f.name)
			}
		}
		return nil, nil
	case LauncherSlurm:
		return newSlurm(o)
	}
	return nil, fmt.Errorf("replay: --launcher %q: want local or slurm", o.Launcher)
}

// remote reports whether the Pool's processes run on another machine,
// which sees none of this one's files: a Command's Files then travel with
// it, and a candidate is built here (Slurm without a shared directory).
func (p *Pool) remote() bool { return p.slurm != nil && p.slurm.sharedDir == "" }

// info is the provenance of the pool's replays so far.
func (p *Pool) info() LaunchInfo {
	if p.slurm != nil {
		return p.slurm.Info()
	}
	return localInfo()
}

// close stops every Slurm job still in flight (their Results say Canceled)
// and returns when none of them is left in the queue; nothing for local
// replays, which their callers wait for.
func (p *Pool) close() error {
	if p.slurm != nil {
		return p.slurm.Close()
	}
	return nil
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
