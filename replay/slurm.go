package replay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The slurm launcher (--launcher slurm).
//
// Every replay is a Slurm job of its own: `srun --job-name=reduce-<id>
// --quiet --ntasks=1 --nodes=1 [--immediate=Q] <--slurm-args> sh -c
// <wrapper> ...`, one job, one step, one task. A job per replay rather than
// steps inside one salloc: a job's name is known before it is submitted,
// so `scancel --name` reaches it exactly, also while it is still queued;
// nothing outlives the replay (no allocation to release when reduce is
// killed); and each replay asks for its own resources (--gres=gpu:1), so
// -j N replays spread over whatever nodes the partition has. The price is a
// scheduling round-trip per replay (about 40 ms on an idle cluster), small
// next to a torch replay's second.
//
// The Runner still runs the local end: srun is the process it starts, in a
// process group of its own, its output captured and bounded, and the one
// supervisor watches the job through it (slurmJob: its interrupt, kill and
// reap are scancel's and squeue's). The launcher adds what the cluster
// needs:
//
//   - The candidate reaches the node without a shared file system: the
//     Command's Files travel on srun's standard input, which Slurm forwards
//     to the task, and the wrapper (slurmWrapper, POSIX sh) writes them
//     into a fresh per-run directory on the node, replaces {rundir} in the
//     arguments and the working directory, runs the command, and removes
//     the directory. A go worker, which reads its candidate on stdin, gets
//     it the same way. With --shared-dir the Runner makes the per-run
//     directory there instead, and the node sees it at the same path.
//   - The wrapper names the job and node it runs on ("reduce-slurm:
//     job=N node=H", its first stderr line). That line and srun's and
//     slurmstepd's own are taken out of the replay's stderr (into
//     Launch.Log): the signature is parsed from the same text as locally.
//   - The timeout runs from the job's start, not its submission: queue
//     time is bounded by --queue-timeout (srun --immediate) instead. When
//     it expires, or on Ctrl-C (ctx done) or Close, the supervisor ends the
//     job as it ends any process: the step gets SIGINT (scancel
//     --signal=INT), so that Python prints where it hung, and after the
//     grace the job is cancelled (scancel); srun exits when the job ends.
//     A run returns only once its job is out of the queue (squeue), and
//     Close once no job of this launcher is, so none is left when reduce
//     exits.
//   - A job lost to the cluster (cancelled from outside, preempted, its
//     node failed, never started within the queue timeout, srun could not
//     allocate) says nothing about the candidate: it is submitted again, up
//     to Retries times, and then its verdict is infra ("slurm: <reason>"),
//     never a reproduction. Launch and LaunchInfo count them.
type slurm struct {
	srun, squeue, scancel string
	userArgs              []string
	sharedDir             string
	queueTimeout          time.Duration
	retries               int
	grace                 time.Duration
	version               string
	prefix                string // of every job name: reduce-<pid>-<random>
	seq                   atomic.Uint64

	mu         sync.Mutex
	closed     bool
	closing    chan struct{}
	runs       sync.WaitGroup
	nodes      map[string]bool
	jobs       int
	retried    int
	canceled   int
	unresolved map[string]int
}

// slurmTool bounds how long a call of squeue or scancel may take.
var slurmTool = 30 * time.Second

// slurmGone bounds how long a run or Close waits for a cancelled job to
// leave the queue (Slurm's KillWait, 30 s by default, and the epilog come
// before that).
var slurmGone = 90 * time.Second

// refusedSlurmArgs are srun options the launcher sets itself.
var refusedSlurmArgs = map[string]string{
	"-J": "the launcher names every job", "--job-name": "the launcher names every job",
	"-I": "use --queue-timeout", "--immediate": "use --queue-timeout",
	"--pty": "replays are not interactive",
	"-n":    "one task per replay", "--ntasks": "one task per replay",
	"-i": "the candidate travels on the step's standard input", "--input": "the candidate travels on the step's standard input",
}

func newSlurm(o *Options) (*slurm, error) {
	s := &slurm{
		queueTimeout: o.QueueTimeout, retries: o.Retries, grace: o.Grace,
		closing: make(chan struct{}), nodes: map[string]bool{}, unresolved: map[string]int{},
	}
	switch {
	case s.queueTimeout == 0:
		s.queueTimeout = DefaultQueueTimeout
	case s.queueTimeout < 0:
		s.queueTimeout = 0
	}
	switch {
	case s.retries == 0:
		s.retries = DefaultRetries
	case s.retries < 0:
		s.retries = 0
	}
	switch {
	case s.grace == 0:
		s.grace = DefaultGrace
	case s.grace < 0:
		s.grace = 0
	}
	if len(o.GPUs) > 0 {
		return nil, errors.New("replay: --gpus picks devices of this machine; with --launcher slurm ask Slurm for them (--slurm-args '--gres=gpu:1')")
	}
	for _, tool := range []struct {
		name string
		dst  *string
	}{{"srun", &s.srun}, {"squeue", &s.squeue}, {"scancel", &s.scancel}} {
		p, err := exec.LookPath(tool.name)
		if err != nil {
			return nil, fmt.Errorf("replay: --launcher slurm: %s not found in $PATH (run reduce on a login node of the cluster): %w", tool.name, err)
		}
		*tool.dst = p
	}
	if o.SlurmArgs != "" {
		args, err := SplitCommand(o.SlurmArgs)
		if err != nil {
			return nil, fmt.Errorf("replay: --slurm-args %q: %w", o.SlurmArgs, err)
		}
		for _, a := range args {
			name, _, _ := strings.Cut(a, "=")
			if why, ok := refusedSlurmArgs[name]; ok {
				return nil, fmt.Errorf("replay: --slurm-args: %s is not allowed (%s)", name, why)
			}
		}
		s.userArgs = args
	}
	if o.SharedDir != "" {
		fi, err := os.Stat(o.SharedDir)
		if err != nil {
			return nil, fmt.Errorf("replay: --shared-dir: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("replay: --shared-dir %s: not a directory", o.SharedDir)
		}
		s.sharedDir = o.SharedDir
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	s.prefix = fmt.Sprintf("reduce-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))

	ctx, cancel := context.WithTimeout(context.Background(), slurmTool)
	defer cancel()
	if out, err := exec.CommandContext(ctx, s.srun, "--version").Output(); err == nil {
		s.version = strings.TrimSpace(string(out))
	}
	// --test-only submits nothing: it checks the options (partition, gres,
	// time limit) against the cluster, so that a typo is an error now and
	// not a retried "not started" on every replay.
	test := exec.CommandContext(ctx, s.srun, append(append([]string{"--test-only"}, s.userArgs...), "true")...)
	if out, err := test.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("replay: --launcher slurm: srun --test-only %s: %s", strings.Join(s.userArgs, " "), lastLine(out))
	}
	return s, nil
}

func (s *slurm) Info() LaunchInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := LaunchInfo{
		Launcher: LauncherSlurm, Version: s.version, Options: slices.Clone(s.userArgs), SharedDir: s.sharedDir,
		QueueTimeout: s.queueTimeout.Seconds(), Retries: s.retries, Nodes: sortedKeys(s.nodes),
		Jobs: s.jobs, Retried: s.retried, Canceled: s.canceled,
	}
	if len(s.unresolved) > 0 {
		info.Unresolved = map[string]int{}
		for k, v := range s.unresolved {
			info.Unresolved[k] = v
		}
	}
	return info
}

// run runs c as a Slurm job, again when the job is lost (up to retries
// times). It returns only when nothing it started for c is left, here or
// on the cluster; Result.Launch says where it ran.
func (s *slurm) run(ctx context.Context, r *Runner, c Command) Result {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Result{ExitCode: -1, Canceled: true, Err: ErrClosed}
	}
	s.runs.Add(1)
	s.mu.Unlock()
	defer s.runs.Done()
	// Close cancels every job in flight, as ctx does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()

	var jobs []string
	for attempt := 1; ; attempt++ {
		res := s.runOnce(ctx, r, c)
		l := res.Launch
		if l.JobID != "" {
			jobs = append(jobs, l.JobID)
		}
		l.Jobs, l.Attempts = slices.Clone(jobs), attempt
		s.mu.Lock()
		s.jobs++
		if l.Node != "" {
			s.nodes[l.Node] = true
		}
		if l.Infra != "" {
			s.unresolved[l.Infra]++
		}
		retry := l.Infra != "" && l.Infra != SlurmWrapper && attempt <= s.retries && !s.closed && ctx.Err() == nil
		if retry {
			s.retried++
		}
		s.mu.Unlock()
		if !retry {
			return res
		}
	}
}

// runOnce submits c as one job, which the supervisor watches as any
// replay (slurmJob), and reads what srun, slurmstepd and the job's wrapper
// said of it.
func (s *slurm) runOnce(ctx context.Context, r *Runner, c Command) Result {
	name := fmt.Sprintf("%s-%d", s.prefix, s.seq.Add(1))
	cmd, err := s.command(c, name)
	if err != nil {
		return Result{ExitCode: -1, Err: err, Launch: &Launch{Launcher: LauncherSlurm}}
	}
	// The job's timeout is c's, from the job's start (slurmJob.extend).
	cmd.Timeout = r.timeout(&c)
	if cmd.Timeout == 0 {
		cmd.Timeout = -1
	}
	cmd.as = func(p *execProc) proc { return &slurmJob{execProc: p, s: s, name: name, submitted: time.Now()} }
	rr := *r
	rr.Environ = outsideJob(r.environ())
	res := rr.Run(ctx, cmd)

	var log []byte
	res.Stderr, log = splitSlurmLog(res.Stderr)
	out := parseSlurmLog(log)
	res.Launch = &Launch{Launcher: LauncherSlurm, JobID: out.jobID, Node: out.node, Log: log, Detail: out.detail}
	lost := false
	switch {
	case !res.Started:
		return res // srun itself could not be started: an error of Replay
	case res.TimedOut || res.Canceled:
		// The supervisor ended the job (and its reap waited until it was
		// gone): whatever srun and the job printed then says nothing.
		s.mu.Lock()
		s.canceled++
		s.mu.Unlock()
	case out.timeLimit:
		// The user's --time ran out: as slow as a hang, and as little
		// evidence.
		res.TimedOut, res.Harness = true, false
	case out.infra != "":
		res.Launch.Infra = out.infra
		res.Harness = false
		lost = true
	case !out.started:
		res.Launch.Infra, res.Launch.Detail = SlurmLost, "the job's wrapper never ran: "+lastLine(log)
		lost = true
	}
	if lost || res.Err != nil {
		// A job lost to the cluster is gone before it is submitted again.
		if err := s.ensureGone(name); err != nil {
			res.Err = errors.Join(res.Err, err)
		}
	}
	return res
}

// slurmJob is a Slurm job as the supervisor sees it: srun, which submitted
// it and exits when it ends, is the process of this machine that stands
// for it. Its interrupt is SIGINT to the job's step (scancel
// --signal=INT: Python prints where it hung); its kill cancels the job
// (scancel), and kills srun when it does not exit after that; its reap
// waits, when the job was signalled, until squeue no longer lists it.
type slurmJob struct {
	*execProc // srun
	s         *slurm
	name      string
	submitted time.Time
	signalled atomic.Bool
}

func (j *slurmJob) interrupt() bool {
	j.signalled.Store(true)
	_, err := j.s.tool(j.s.scancel, "--signal=INT", "--quiet", "--name="+j.name)
	return err == nil
}

func (j *slurmJob) kill() {
	j.signalled.Store(true)
	j.s.cancel(j.name)
	t := time.NewTimer(killWait + j.s.grace)
	defer t.Stop()
	select {
	case <-j.exited():
	case <-t.C:
		signalGroup(j.pid(), syscall.SIGKILL)
	}
}

func (j *slurmJob) extend(timeout time.Duration) time.Duration {
	return j.s.untilTimeout(j.name, j.submitted, timeout)
}

func (j *slurmJob) reap() (exitStatus, error) {
	st, err := j.execProc.reap()
	if j.signalled.Load() {
		err = errors.Join(err, j.s.ensureGone(j.name))
	}
	return st, err
}

// untilTimeout is how much of timeout job name has left, 0 when it is
// spent, measured from the job's start as squeue reports it (to the
// second): time in the queue does not count.
func (s *slurm) untilTimeout(name string, submitted time.Time, timeout time.Duration) time.Duration {
	out, err := s.tool(s.squeue, "--noheader", "--name="+name, "--format=%T|%S")
	if err != nil {
		return 0
	}
	state, startS, _ := strings.Cut(strings.TrimSpace(firstLine(out)), "|")
	switch state {
	case "":
		return 0 // gone, or never seen: srun is about to exit anyway
	case "PENDING", "CONFIGURING", "REQUEUED", "RESV_DEL_HOLD", "REQUEUE_HOLD":
		return max(250*time.Millisecond, min(timeout/4, 5*time.Second))
	}
	started, err := time.ParseInLocation("2006-01-02T15:04:05", startS, time.Local)
	if err != nil || !started.After(submitted.Truncate(time.Second)) {
		return 0 // started the second it was submitted: no queue time
	}
	return max(0, time.Until(started.Add(time.Second+timeout)))
}

// cancel runs scancel for job name with extra options.
func (s *slurm) cancel(name string, opts ...string) {
	s.tool(s.scancel, append(opts, "--quiet", "--name="+name)...)
}

// ensureGone cancels job name and waits until squeue no longer lists it.
func (s *slurm) ensureGone(name string) error {
	deadline := time.Now().Add(slurmGone)
	for i := 0; ; i++ {
		out, err := s.tool(s.squeue, "--noheader", "--name="+name, "--format=%i %T")
		if err == nil && len(bytes.TrimSpace(out)) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replay: slurm job %s still in the queue %v after it was cancelled: %s", name, slurmGone, strings.TrimSpace(string(out)))
		}
		if i%20 == 0 {
			s.cancel(name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Close cancels every job in flight, waits for their runs to return, and
// then until squeue lists no job of this launcher (a finished job may still
// be completing).
func (s *slurm) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.runs.Wait()
	deadline := time.Now().Add(slurmGone)
	for i := 0; ; i++ {
		left, err := s.queued()
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replay: slurm jobs still in the queue after close: %s", strings.Join(left, ", "))
		}
		if i%20 == 0 {
			for _, name := range left {
				s.cancel(name)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// queued lists the names of this launcher's jobs squeue shows.
func (s *slurm) queued() ([]string, error) {
	out, err := s.tool(s.squeue, "--noheader", "--user="+strconv.Itoa(os.Getuid()), "--format=%j")
	if err != nil {
		return nil, fmt.Errorf("replay: squeue: %w", err)
	}
	var names []string
	for _, l := range strings.Fields(string(out)) {
		if strings.HasPrefix(l, s.prefix+"-") {
			names = append(names, l)
		}
	}
	return names, nil
}

// tool runs squeue or scancel and returns its standard output.
func (s *slurm) tool(path string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), slurmTool)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	// squeue's times in the format untilTimeout parses.
	cmd.Env = append(os.Environ(), "SLURM_TIME_FORMAT=standard")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v: %s", path, strings.Join(args, " "), err, lastLine(stderr.Bytes()))
	}
	return out, nil
}

// jobContext are the variables Slurm sets inside a job: with them srun
// would start a step of that job (reduce run from an sbatch script or an
// salloc shell) instead of a job of its own, which scancel --name cannot
// reach. The user's srun settings (SLURM_PARTITION, SLURM_ACCOUNT, ...)
// are kept.
var jobContext = map[string]bool{
	"SLURM_JOB_ID": true, "SLURM_JOBID": true, "SLURM_STEP_ID": true, "SLURM_STEPID": true,
	"SLURM_JOB_NAME": true, "SLURM_NODELIST": true, "SLURM_JOB_NODELIST": true, "SLURM_NNODES": true,
	"SLURM_JOB_NUM_NODES": true, "SLURM_NTASKS": true, "SLURM_NPROCS": true, "SLURM_TASKS_PER_NODE": true,
	"SLURM_JOB_CPUS_PER_NODE": true, "SLURM_CPUS_ON_NODE": true, "SLURM_MEM_PER_NODE": true,
	"SLURM_MEM_PER_CPU": true, "SLURM_OVERLAP": true, "SLURM_EXPORT_ENV": true,
}

// outsideJob returns env without jobContext's variables.
func outsideJob(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !jobContext[k] {
			out = append(out, kv)
		}
	}
	return out
}

// command is the srun command that runs c as job name.
func (s *slurm) command(c Command, name string) (Command, error) {
	// --export=ALL first: the replay's environment (Command.Env) must
	// reach the task whatever the cluster's default; the user may still
	// narrow it.
	args := append([]string{"--export=ALL"}, s.userArgs...)
	args = append(args, "--job-name="+name, "--quiet", "--ntasks=1", "--nodes=1")
	if s.queueTimeout > 0 {
		args = append(args, "--immediate="+strconv.Itoa(int(math.Ceil(s.queueTimeout.Seconds()))))
	}
	args = append(args, "sh", "-c", slurmWrapper, "reduce-slurm")
	w := Command{Path: s.srun, Env: c.Env, Timeout: -1, Foreign: c.Foreign}
	if s.sharedDir != "" {
		// The Runner makes the per-run directory in the shared one
		// (TempRoot), replaces {rundir}, and runs srun in it when c asks:
		// the step's working directory is srun's.
		w.Stdin, w.Files, w.Streams, w.TempDir, w.Dir = c.Stdin, c.Files, c.Streams, c.TempDir, c.Dir
		args = append(args, "0", "", "0", "--", c.Path)
		w.Args = append(args, c.Args...)
		return w, nil
	}
	if c.hasFiles() && c.Stdin != nil {
		return Command{}, errors.New("replay: slurm launcher: a command with both Files and Stdin needs --shared-dir")
	}
	// The files travel on srun's standard input: the one place a streamed
	// file is held in memory whole (DESIGN: copied only where a file must
	// travel).
	files, err := c.allFiles()
	if err != nil {
		return Command{}, err
	}
	mk := "0"
	if c.TempDir || len(files) > 0 {
		mk = "1"
	}
	names := make([]string, 0, len(files))
	for n := range files {
		if n == "" || n == "." || n == ".." || strings.ContainsRune(n, '/') {
			return Command{}, fmt.Errorf("replay: Command.Files: %q is not a plain file name", n)
		}
		names = append(names, n)
	}
	slices.Sort(names)
	args = append(args, mk, c.Dir, strconv.Itoa(len(names)))
	var stdin []byte
	for _, n := range names {
		args = append(args, n, strconv.Itoa(len(files[n])))
		stdin = append(stdin, files[n]...)
	}
	if len(names) == 0 {
		stdin = c.Stdin
	}
	args = append(args, "--", c.Path)
	w.Args = append(args, c.Args...)
	w.Stdin = stdin
	return w, nil
}

// slurmWrapper runs one replay inside its job step: `sh -c slurmWrapper
// reduce-slurm MKDIR DIR NFILES [NAME SIZE]... -- PROG ARGS...`. It names
// the job and node on stderr; with MKDIR 1 it makes a per-run directory
// (REDUCE_RUN_DIR and TMPDIR), writes the NFILES files it reads in order
// from stdin into it, replaces {rundir} in DIR and the arguments by its
// path (absolute; and runDirQuotedArg by the path written for the single
// quotes around it), runs PROG in DIR (when not "") and removes the
// directory. PROG's exit status is the wrapper's (128+N for a signal N,
// which Parse reads as the signal). A failure of the wrapper itself is
// exit 86 and a line "reduce-slurm: error: ...".
//
// The script never spells the placeholders out: with --shared-dir the
// Runner replaces them in every argument, the script's included.
//
// A SIGINT or SIGTERM (scancel --signal=INT at a timeout, or the cancel)
// reaches PROG too, since Slurm signals every process of the step; the
// wrapper's trap only makes it wait for PROG and clean up.
const slurmWrapper = `echo "reduce-slurm: job=${SLURM_JOB_ID:-} node=${SLURMD_NODENAME:-$(hostname)}" >&2
fail() { printf 'reduce-slurm: error: %s\n' "$*" >&2; [ -z "$d" ] || rm -rf "$d"; exit 86; }
mk=$1 wd=$2 n=$3 d=
shift 3
if [ "$mk" = 1 ]; then
	t=${TMPDIR:-/tmp}
	case $t in /*) ;; *) t=$PWD/$t ;; esac
	d=$(mktemp -d "$t/reduce-run-XXXXXX") || fail "cannot make a per-run directory in $t"
	export REDUCE_RUN_DIR="$d" TMPDIR="$d"
	# q: $d with every ' written '\'', for a placeholder inside single quotes
	s=$d q=
	while :; do
		case $s in
		*"'"*) q=$q${s%%"'"*}"'\\''"; s=${s#*"'"} ;;
		*) q=$q$s; break ;;
		esac
	done
fi
while [ "$n" -gt 0 ]; do
	head -c "$2" >"$d/$1" || fail "cannot write $1 in $d"
	got=$(wc -c <"$d/$1")
	[ "$((got))" -eq "$2" ] || fail "$1: got $((got)) of $2 bytes on stdin"
	shift 2
	n=$((n - 1))
done
[ "$1" = -- ] || fail "bad arguments"
shift
ph="{rundir"'}' qph="{rundir:quoted"'}'
sub() {
	s=$1 r=
	[ -n "$d" ] || { r=$s; return; }
	while :; do
		case $s in
		*"$ph"* | *"$qph"*) ;;
		*) r=$r$s; return ;;
		esac
		p=${s%%"$ph"*}
		case $p in
		*"$qph"*) p=${s%%"$qph"*}; r=$r$p$q; s=${s#"$p$qph"} ;;
		*) r=$r$p$d; s=${s#"$p$ph"} ;;
		esac
	done
}
if [ -n "$wd" ]; then
	sub "$wd"
	cd "$r" || fail "cannot cd to $r"
fi
if [ -n "$d" ]; then
	for a do
		shift
		sub "$a"
		set -- "$@" "$r"
	done
fi
trap : INT TERM
"$@"
rc=$?
[ -z "$d" ] || rm -rf "$d"
exit $rc
`

// slurmOutcome is what the lines of srun, slurmstepd and the wrapper say
// about a job.
type slurmOutcome struct {
	started     bool   // the wrapper ran: the job started on a node
	jobID, node string // from the wrapper's line
	infra       string // a Slurm* reason, or ""
	detail      string // the line that gave it
	timeLimit   bool   // Slurm ended the job at its time limit
}

// splitSlurmLog separates, line by line, what srun, slurmstepd and the
// wrapper wrote to a job's stderr (returned as log) from the replay's own
// text.
func splitSlurmLog(stderr []byte) (own, log []byte) {
	if len(stderr) == 0 {
		return stderr, nil
	}
	var o, l bytes.Buffer
	for len(stderr) > 0 {
		line := stderr
		if i := bytes.IndexByte(stderr, '\n'); i >= 0 {
			line, stderr = stderr[:i+1], stderr[i+1:]
		} else {
			stderr = nil
		}
		if isSlurmLine(line) {
			l.Write(line)
		} else {
			o.Write(line)
		}
	}
	if o.Len() > 0 {
		own = o.Bytes()
	}
	if l.Len() > 0 {
		log = l.Bytes()
	}
	return own, log
}

func isSlurmLine(line []byte) bool {
	return bytes.HasPrefix(line, []byte("srun: ")) || bytes.HasPrefix(line, []byte("slurmstepd: ")) ||
		bytes.HasPrefix(line, []byte("slurmstepd-")) || bytes.HasPrefix(line, []byte("reduce-slurm: "))
}

// parseSlurmLog reads the lines splitSlurmLog set apart. The texts are
// Slurm's (22.05 and later; older releases print the same lines):
//
//	reduce-slurm: job=17 node=gpu-03                     the wrapper ran
//	reduce-slurm: error: ...                             the wrapper failed
//	slurmstepd-gpu-03: error: *** STEP 17.0 ON gpu-03 CANCELLED AT ... ***
//	    ... DUE TO PREEMPTION ***, DUE TO NODE FAILURE ..., DUE TO TIME LIMIT ***
//	srun: error: Node failure on gpu-03
//	srun: error: Unable to allocate resources: Requested nodes are busy   (--immediate)
//	srun: error: Unable to allocate resources: <other reason>
//	srun: Force Terminated job 17 / srun: Job step aborted
//	srun: error: gpu-03: task 0: Exited with exit code 1  (the task's own exit: not infra)
func parseSlurmLog(log []byte) slurmOutcome {
	var o slurmOutcome
	set := func(reason, line string) {
		rank := map[string]int{SlurmPreempted: 5, SlurmNodeFail: 4, SlurmQueueTimeout: 3, SlurmCancelled: 2, SlurmNotStarted: 1, SlurmWrapper: 6}
		if rank[reason] > rank[o.infra] {
			o.infra, o.detail = reason, line
		}
	}
	for _, line := range strings.Split(string(log), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "reduce-slurm: error: "):
			set(SlurmWrapper, line)
		case strings.HasPrefix(line, "reduce-slurm: "):
			o.started = true
			for _, f := range strings.Fields(strings.TrimPrefix(line, "reduce-slurm: ")) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "job":
					o.jobID = v
				case "node":
					o.node = v
				}
			}
		case strings.Contains(line, "DUE TO PREEMPTION"):
			set(SlurmPreempted, line)
		case strings.Contains(line, "DUE TO NODE FAIL"), strings.Contains(line, "Node failure on"):
			set(SlurmNodeFail, line)
		case strings.Contains(line, "DUE TO TIME LIMIT"), strings.Contains(line, "Job step time limit exceeded"):
			o.timeLimit = true
		case strings.Contains(line, "CANCELLED AT"), strings.Contains(line, "Force Terminated"):
			set(SlurmCancelled, line)
		case strings.Contains(line, "Unable to allocate resources"):
			if strings.Contains(line, "Requested nodes are busy") || strings.Contains(line, "Immediate") || strings.Contains(line, "immediate") {
				set(SlurmQueueTimeout, line)
			} else {
				set(SlurmNotStarted, line)
			}
		case strings.HasPrefix(line, "srun: error: Unable to create"), strings.HasPrefix(line, "srun: fatal: "),
			strings.Contains(line, "Job allocation") && strings.Contains(line, "has been revoked"):
			set(SlurmNotStarted, line)
		}
	}
	if o.infra == SlurmNotStarted && o.started {
		o.infra = SlurmLost // srun lost the step it had started
	}
	if o.timeLimit && o.infra == SlurmCancelled {
		o.infra, o.detail = "", ""
	}
	return o
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// FlagQueueTimeout is --queue-timeout for Options.QueueTimeout: zero (the
// option unset) unless the user gave it, so that the local launcher does not
// reject a default it was never given; a given 0 is no bound (-1).
func FlagQueueTimeout(given bool, v time.Duration) time.Duration {
	switch {
	case !given:
		return 0
	case v == 0:
		return -1
	}
	return v
}

// FlagRetries is --retries for Options.Retries, where 0 means the default
// and negative none: a given 0 or less is none.
func FlagRetries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
