package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"reduce/fixtures"
)

// Launchers, the values of Options.Launcher (the --launcher flag).
const (
	// LauncherLocal runs every replay as a process of this machine (the
	// default).
	LauncherLocal = "local"
	// LauncherSlurm runs every replay as a Slurm job of its own, through
	// srun: one job, one step, one task (see the slurm launcher).
	LauncherSlurm = "slurm"
)

// DefaultRetries is how many times a replay whose Slurm job was lost
// (cancelled from outside, preempted, its node failed, it never started
// within the queue timeout) is submitted again before its verdict is infra.
const DefaultRetries = 2

// DefaultQueueTimeout bounds how long a replay's Slurm job may wait in the
// queue before it counts as lost (srun --immediate).
const DefaultQueueTimeout = 10 * time.Minute

// A Launcher starts the processes of a Pool: here (Runner.Run itself), or
// somewhere else with the Runner still owning the local end (the process
// group, the timeout's bookkeeping, the bounded capture, the cleanup).
// Every backend runs its replays through its Pool, so a launcher serves the
// three of them alike.
type Launcher interface {
	// Name is LauncherLocal or LauncherSlurm.
	Name() string
	// Run runs c as r.Run would, wherever the launcher runs things, and
	// returns only when nothing it started for c is left, here or on the
	// cluster. Result.Launch says where it ran.
	Run(ctx context.Context, r *Runner, c Command) Result
	// Info is the provenance of the replays run so far.
	Info() LaunchInfo
	// Close stops every run still in flight (their Results say Canceled)
	// and returns when none of them is left anywhere.
	Close() error
}

// Launch is where one Command ran, when a launcher other than the local one
// ran it (Result.Launch).
type Launch struct {
	// Launcher is the launcher's Name.
	Launcher string
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
	// Launcher is LauncherLocal or LauncherSlurm.
	Launcher string `json:"launcher"`
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

// Provenance is where b's replays ran: b's launcher's LaunchInfo, or this
// host for a backend that runs them locally.
func Provenance(b Backend) LaunchInfo {
	if l, ok := b.(interface{ Launcher() Launcher }); ok {
		return l.Launcher().Info()
	}
	host, _ := os.Hostname()
	return LaunchInfo{Launcher: LauncherLocal, Nodes: []string{host}}
}

// newLauncher builds o's launcher: nil for local (the Pool runs the Runner
// itself).
func newLauncher(o *Options) (Launcher, error) {
	switch strings.ToLower(strings.TrimSpace(o.Launcher)) {
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

// launched is a backend whose replays go through a launcher other than the
// local one: closing it closes the launcher too, and Provenance asks the
// launcher.
type launched struct {
	Backend
	l Launcher
}

func (b *launched) Launcher() Launcher { return b.l }

// Views, SourceDir and ReplayView are the backend's, when it is a Viewer.
func (b *launched) Views() bool {
	v, ok := b.Backend.(Viewer)
	return ok && v.Views()
}

func (b *launched) SourceDir() string {
	if v, ok := b.Backend.(Viewer); ok {
		return v.SourceDir()
	}
	return ""
}

func (b *launched) ReplayView(ctx context.Context, src *fixtures.Source, view *fixtures.View) (Verdict, error) {
	v, ok := b.Backend.(Viewer)
	if !ok || !v.Views() {
		return Verdict{Backend: b.Kind()}, fmt.Errorf("replay: the %s backend on this launcher takes candidates built, not views", b.Kind())
	}
	return v.ReplayView(ctx, src, view)
}

// Close closes the backend first (no new replays), then the launcher
// (cancels what is still in flight and waits until it is gone).
func (b *launched) Close() error {
	return errors.Join(b.Backend.Close(), b.l.Close())
}

// remote reports whether the Pool's processes run on another machine,
// which sees none of this one's files: a Command's Files then travel with
// it (the slurm launcher without a shared directory).
func (p *Pool) remote() bool {
	s, ok := p.Launcher.(*slurm)
	return ok && s.sharedDir == ""
}

// sourceDir is where a view's source must lie for the pool's processes to
// read it: the shared directory on Slurm, "" (anywhere) locally.
func (p *Pool) sourceDir() string {
	if s, ok := p.Launcher.(*slurm); ok {
		return s.sharedDir
	}
	return ""
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
