package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"reduce/fixtures"
)

// HarnessExitCode is the exit status a reduce worker (the go worker, the
// torch worker) uses to say the harness itself failed: it could not load
// the candidate, import torch, or find the op, so the candidate was never
// run. The Runner reports such a run as Result.Harness; it is never taken as
// a reproduction (nor as a non-reproduction: the candidate is unknown).
//
// 86 is free in every convention a replayed program may follow: Python
// exits 1 on an uncaught exception and 2 on bad usage (and 120 when it
// cannot flush at exit); pytest uses 0-5; sysexits.h 64-78; shells 126
// (not executable), 127 (not found) and 128+n (killed by signal n); Go 1
// and 2; exit(-1) gives 255. PyTorch, CUDA and ROCm do not exit with a code
// of their own: their fatal errors are exceptions (exit 1) or signals
// (SIGABRT, SIGSEGV).
const HarnessExitCode = 86

// Defaults of the Runner's options, used where an option is zero.
const (
	DefaultTimeout      = 60 * time.Second
	DefaultGrace        = 2 * time.Second
	DefaultCaptureLimit = 1 << 20
	DefaultWaitDelay    = 250 * time.Millisecond
)

// RunDirEnv names the variable that gives a child its per-run directory
// (see Command.TempDir); RunDirArg in Command.Args or Command.Dir is
// replaced by the directory's path.
const (
	RunDirEnv = "REDUCE_RUN_DIR"
	RunDirArg = "{rundir}"
	// runDirQuotedArg is RunDirArg inside a single-quoted word of a shell
	// script (the exec backend's, commandArgs): it is replaced by the
	// directory's path with every ' written '\'', so that the word holds
	// the path whatever its characters.
	runDirQuotedArg = "{rundir:quoted}"
)

// Command is one process to run.
type Command struct {
	// Path is the program: a path, or a name looked up in $PATH.
	Path string
	// Args are the arguments after the program name (argv[1:]). Every
	// RunDirArg in them is replaced by the per-run directory's path (and
	// runDirQuotedArg by the path written for the single quotes around it).
	Args []string
	// Env is set over the Runner's environment (Runner.Environ or the
	// reducer's own, less the variables FilterEnv drops): an entry here wins
	// over an inherited one with the same key, and over the per-run
	// directory's REDUCE_RUN_DIR and TMPDIR. Build it from DeviceEnv,
	// PythonEnv and the backend's own variables.
	Env []string
	// Dir is the working directory; "" is the reducer's. RunDirArg in it is
	// replaced by the per-run directory's path, so Dir: RunDirArg runs the
	// child inside it (a core file or a stray output lands there and is
	// removed with it).
	Dir string
	// Stdin is what the child reads on its standard input; nil gives it
	// /dev/null. A child that exits without reading it all is fine.
	Stdin []byte
	// Timeout overrides Runner.Timeout for this command when non-zero
	// (negative: no timeout).
	Timeout time.Duration
	// TempDir asks for a fresh per-run directory, created before the child
	// starts and removed, with whatever the child left in it, after the
	// child and its process group are dead: also when it timed out, was
	// cancelled or crashed. Its path is given to the child as
	// $REDUCE_RUN_DIR and as $TMPDIR (so the child's own temporary files
	// go there too), and replaces RunDirArg in Args and Dir.
	TempDir bool
	// Files are written into the per-run directory before the child starts
	// (name to content; names are plain file names, no separators). Files
	// implies TempDir.
	Files map[string][]byte
	// Streams are files like Files whose content a function writes straight
	// into the file (through a buffer), so that no copy of it is held in
	// memory: this is how a candidate batch reaches a worker,
	// Streams: {"candidate.bin": write}, Args: {..., "{rundir}/candidate.bin"}.
	// An error from the function fails the run before the child starts. A
	// name may not be in both maps. Streams implies TempDir.
	Streams map[string]func(io.Writer) error
	// Foreign marks a program that is not one of reduce's workers (the exec
	// backend's user command): its exit status 86 is its own, and
	// Result.Harness is never set.
	Foreign bool

	// as, when set, is the started program as the supervisor is to see it:
	// the Slurm launcher's srun stands for its job (slurmJob).
	as func(*execProc) proc
}

// Result is what happened to one Command.
//
// For the conversion to the signature parser's ExitInfo: the process exited
// normally iff Signal == 0 && ExitCode >= 0 (ExitCode is its status); it was
// killed by a signal iff Signal != 0 (ExitCode is then -1, CoreDump says
// whether a core was dumped); TimedOut and Canceled say that the Runner
// itself interrupted it (first SIGINT, then SIGKILL), so Signal is then
// typically SIGINT or SIGKILL (or the exit status of the child's SIGINT
// handler) and says nothing about the candidate; Harness says the worker
// never ran the candidate. Err != nil with Started false means the child
// never ran: nothing else is meaningful.
type Result struct {
	// ExitCode is the exit status; -1 when killed by a signal or never
	// started.
	ExitCode int
	// Signal is the signal that killed the process, 0 if none.
	Signal syscall.Signal
	// CoreDump reports that the signal dumped a core.
	CoreDump bool
	// TimedOut reports that the timeout expired and the Runner interrupted
	// the process.
	TimedOut bool
	// Canceled reports that the context was done before the process exited
	// (the Runner interrupted it) or before it could start. The outcome says
	// nothing about the candidate.
	Canceled bool
	// Harness reports that a worker exited with HarnessExitCode: it could
	// not run the candidate at all. Never set for a Foreign command, nor
	// when the Runner interrupted the process.
	Harness bool
	// Started reports that the process was started (PID is valid).
	Started bool
	// PID is the process's id, which is also its process group's.
	PID int
	// Stdout and Stderr are the bounded captures of the two streams: all of
	// a stream up to Runner.CaptureLimit bytes; beyond that its first and
	// last halves around a line "... [N bytes elided] ...", N the number of
	// bytes dropped. nil when the stream was empty.
	Stdout, Stderr []byte
	// StdoutBytes and StderrBytes count every byte the streams carried.
	StdoutBytes, StderrBytes int64
	// Truncated reports that either stream was cut.
	Truncated bool
	// Duration runs from the start until the process exited.
	Duration time.Duration
	// Err is the Runner's own failure: the program could not be started,
	// the per-run directory could not be made or removed, the process could
	// not be killed (stuck in the kernel), or the context was done before
	// the start. nil for any outcome of the child itself, crashes included.
	Err error
	// Launch is where a launcher other than the local one ran the command
	// (a Slurm job: its id, node, attempts); nil for a local run.
	Launch *Launch
}

// Runner runs each Command in a fresh process of its own process group,
// with a timeout, bounded output capture and cleanup of every process and
// file the run left. A Runner's options must not change while it runs; one
// Runner may run any number of commands at once. The zero Runner uses the
// defaults.
type Runner struct {
	// Timeout bounds a run: 0 means DefaultTimeout (60 s), negative means
	// none (the context still applies). A hang is a common outcome of a
	// broken candidate; a zero Runner must not wait for it forever.
	Timeout time.Duration
	// Grace is the time between SIGINT and SIGKILL when the Runner
	// interrupts a run (timeout or context done): long enough for a Python
	// worker to print the KeyboardInterrupt traceback that says where it
	// hung. 0 means DefaultGrace (2 s); negative means SIGKILL at once.
	Grace time.Duration
	// CaptureLimit bounds the kept output of each stream, in bytes: 0 means
	// DefaultCaptureLimit (1 MiB); negative keeps nothing (bytes are still
	// counted).
	CaptureLimit int
	// WaitDelay bounds how long Run keeps reading the child's output after
	// the child exited and its process group and strays were killed; it
	// matters only when a process out of reach (one re-parented to init,
	// see sweep) still holds the pipes. 0 or negative means
	// DefaultWaitDelay (250 ms); what is already in the pipe is read even
	// then.
	WaitDelay time.Duration
	// TempRoot is where per-run directories and TempFile's files are made;
	// "" means os.TempDir().
	TempRoot string
	// Environ is the base environment of every run; nil means the
	// reducer's (os.Environ()). FilterEnv is applied to it.
	Environ []string
}

func (r *Runner) timeout(c *Command) time.Duration {
	t := r.Timeout
	if c.Timeout != 0 {
		t = c.Timeout
	}
	switch {
	case t == 0:
		return DefaultTimeout
	case t < 0:
		return 0
	}
	return t
}

func (r *Runner) grace() time.Duration {
	switch {
	case r.Grace == 0:
		return DefaultGrace
	case r.Grace < 0:
		return 0
	}
	return r.Grace
}

func (r *Runner) captureLimit() int {
	if r.CaptureLimit == 0 {
		return DefaultCaptureLimit
	}
	return r.CaptureLimit
}

func (r *Runner) waitDelay() time.Duration {
	if r.WaitDelay <= 0 {
		return DefaultWaitDelay
	}
	return r.WaitDelay
}

// tempRoot is absolute: a per-run directory's path reaches commands that
// run elsewhere (Command.Dir), and one that starts with "-" would read as
// an option.
func (r *Runner) tempRoot() string {
	root := r.TempRoot
	if root == "" {
		root = os.TempDir()
	}
	if abs, err := filepath.Abs(root); err == nil {
		return abs
	}
	return root
}

// TempFile writes data to a new file in TempRoot, its name made from
// pattern as os.CreateTemp makes it, and returns its path and a cleanup
// that removes it (safe to call more than once). Call cleanup after Run
// returns: Run returns only once the child's process group is dead. Prefer
// Command.Files, which Run itself cleans up.
func (r *Runner) TempFile(pattern string, data []byte) (path string, cleanup func(), err error) {
	f, err := os.CreateTemp(r.tempRoot(), pattern)
	if err != nil {
		return "", nil, fmt.Errorf("replay: temporary file: %w", err)
	}
	path = f.Name()
	cleanup = func() { os.Remove(path) }
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("replay: temporary file: %w", err)
	}
	return path, cleanup, nil
}

// makeRunDir creates the per-run directory and writes c.Files and
// c.Streams into it.
func (r *Runner) makeRunDir(c *Command) (string, error) {
	dir, err := fixtures.MkdirOwned(r.tempRoot(), "reduce-run-")
	if err != nil {
		return "", fmt.Errorf("replay: per-run directory: %w", err)
	}
	liveDir(dir, true)
	plain := func(name string) bool {
		return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, '/')
	}
	for name, data := range c.Files {
		if !plain(name) {
			removeAll(dir)
			return "", fmt.Errorf("replay: Command.Files: %q is not a plain file name", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			removeAll(dir)
			return "", fmt.Errorf("replay: per-run directory: %w", err)
		}
	}
	for name, write := range c.Streams {
		if _, dup := c.Files[name]; dup || !plain(name) {
			removeAll(dir)
			return "", fmt.Errorf("replay: Command.Streams: %q is not a plain file name, or is in Files too", name)
		}
		if err := writeStream(filepath.Join(dir, name), write); err != nil {
			removeAll(dir)
			return "", fmt.Errorf("replay: per-run directory: %s: %w", name, err)
		}
	}
	return dir, nil
}

// writeStream creates the file path and has write fill it.
func writeStream(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// hasFiles reports whether c asks for files in its per-run directory.
func (c *Command) hasFiles() bool { return len(c.Files) > 0 || len(c.Streams) > 0 }

// removeAll removes dir and everything in it, also what a child made
// unwritable (a directory chmod 0 cannot be emptied until it is chmod'ed
// back).
func removeAll(dir string) error {
	liveDir(dir, false)
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("replay: removing per-run directory: %w", err)
	}
	return nil
}

// Run runs c in a new process and reports what happened. It returns only
// when the process is dead and reaped, every process left in its process
// group has been sent SIGKILL, its output is read and its per-run
// directory removed. The exception is a process that SIGKILL does not end
// within 10 s (stuck in a driver): Result.Err says so, and the cleanup
// finishes in the background once it dies.
//
// The process is the leader of a new process group and gets SIGKILL if the
// reducer dies (Linux's parent-death signal; its own children do not). On
// timeout or when ctx is done, the group gets SIGINT, then after
// Runner.Grace SIGKILL. Once the leader has exited, and before it is
// reaped (so that its pid, the group's id, cannot have been reused), the
// group gets SIGKILL again: no child it forked outlives it or keeps its
// output pipes open. A descendant that left the group (setsid, setpgid) is
// re-parented to reduce, a child subreaper, and killed then too (sweep);
// one out of even that reach (where there is no subreaper) holds the pipes
// for at most Runner.WaitDelay, and is left running.
//
// Run only starts the process (startProcess); watching it is the
// supervisor's (supervise), the same one that watches a torch zygote's
// child and a Slurm job.
func (r *Runner) Run(ctx context.Context, c Command) (res Result) {
	res.ExitCode = -1
	if err := ctx.Err(); err != nil {
		res.Canceled = true
		res.Err = err
		return res
	}
	var dir string
	if c.TempDir || c.hasFiles() {
		var err error
		if dir, err = r.makeRunDir(&c); err != nil {
			res.Err = err
			return res
		}
	}
	// fail ends a run that never started; its directory is Run's to remove.
	fail := func(err error) Result {
		res.Err = err
		if dir != "" {
			if err := removeAll(dir); err != nil {
				res.Err = errors.Join(res.Err, err)
			}
		}
		return res
	}

	cmd := r.command(&c, dir)
	var outR, outW, errR, errW, inR, inW *os.File
	var err error
	if outR, outW, err = os.Pipe(); err == nil {
		if errR, errW, err = os.Pipe(); err == nil && c.Stdin != nil {
			inR, inW, err = os.Pipe()
		}
	}
	if err != nil {
		for _, f := range []*os.File{outR, outW, errR, errW} {
			if f != nil {
				f.Close()
			}
		}
		return fail(fmt.Errorf("replay: pipe: %w", err))
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if inR != nil {
		cmd.Stdin = inR
	}

	start := time.Now()
	p, err := startProcess(cmd)
	// The child has its copies of the pipes' ends now; the reducer keeps
	// only its own, so that EOF comes when the child's side is gone.
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if inW != nil {
			inW.Close()
		}
		return fail(fmt.Errorf("replay: start %s: %w", c.Path, err))
	}

	limit := r.captureLimit()
	out := &output{stdout: startStream(outR, limit), stderr: startStream(errR, limit)}
	if inW != nil {
		out.feed(inW, c.Stdin)
	}
	var sp proc = p
	if c.as != nil {
		sp = c.as(p)
	}
	return r.supervise(ctx, supervised{proc: sp, name: c.Path, start: start, timeout: r.timeout(&c),
		foreign: c.Foreign, out: out, dir: dir})
}

// command builds the exec.Cmd of c; dir is the per-run directory or "".
func (r *Runner) command(c *Command, dir string) *exec.Cmd {
	expand := func(s string) string {
		if dir == "" {
			return s
		}
		return strings.NewReplacer(RunDirArg, dir, runDirQuotedArg, strings.ReplaceAll(dir, "'", `'\''`)).Replace(s)
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = expand(a)
	}
	cmd := exec.Command(c.Path, args...)
	cmd.Dir = expand(c.Dir)
	var runDir []string
	if dir != "" {
		runDir = []string{RunDirEnv + "=" + dir, "TMPDIR=" + dir}
	}
	cmd.Env = MergeEnv(r.environ(), runDir, c.Env)
	return cmd
}

// allFiles returns c.Files with c.Streams written out in memory, for a
// launcher that sends the files along with the command.
func (c *Command) allFiles() (map[string][]byte, error) {
	if len(c.Streams) == 0 {
		return c.Files, nil
	}
	out := maps.Clone(c.Files)
	if out == nil {
		out = make(map[string][]byte, len(c.Streams))
	}
	for name, write := range c.Streams {
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("replay: Command.Streams: %q is in Files too", name)
		}
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			return nil, fmt.Errorf("replay: %s: %w", name, err)
		}
		out[name] = buf.Bytes()
	}
	return out, nil
}
