package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/internal/trust"
	"reduce/kernels"
)

// Kind is a backend: a closed set, the values of the --backend flag.
type Kind string

// Backend kinds.
const (
	KindGo    Kind = "go"
	KindTorch Kind = "torch"
	KindExec  Kind = "exec"
)

// kindOf is one kind of backend New builds: what it replays, whether its
// processes read the recorded file (and build each candidate from it
// themselves), and its constructor.
type kindOf struct {
	kind  Kind
	runs  string
	reads bool
	new   func(Options) (Backend, error)
}

// backends are the kinds New builds, the default first. A backend is its
// file and its line here.
var backends = []kindOf{
	{KindGo, "the batch's built-in op", true, newGoBackend},
	{KindTorch, "the batch's built-in op in PyTorch, or the --entry function", true, newTorchBackend},
	{KindExec, "the --replay command", false, newExecBackend},
}

// Kinds lists the backends, the default first.
func Kinds() []Kind {
	out := make([]Kind, len(backends))
	for i, b := range backends {
		out[i] = b.kind
	}
	return out
}

// WorkerCommand is the hidden subcommand of the reduce binary that runs the
// go backend's worker: `reduce __worker --device cpu|cuda` reads a batch
// file on its standard input and runs its op (see Worker).
const WorkerCommand = "__worker"

// Options configure New. The zero value, with a Batch, is the go backend
// on CPU semantics, one replay at a time, with the Runner's defaults.
type Options struct {
	// Batch is the recorded batch every candidate is a view of
	// (Backend.Replay's fixtures.View), and File the batch file it was read
	// from: New binds the backend to them (Options.source). File may be ""
	// for a batch no file holds: an uncompressed copy is then written once,
	// for the processes that read one.
	Batch *fixtures.Batch
	File  string
	// Kind is the backend: KindGo ("" too), KindTorch or KindExec
	// (--backend).
	Kind Kind
	// Device (--device): for go, "cpu" (CPU semantics, the default) or
	// "cuda" (CUDA emulation: device-side asserts); for torch, the torch
	// device the tensors are rebuilt on: "cpu" (the default), "cuda",
	// "cuda:N", or "rocm" (a ROCm build of torch: device "cuda", ROCm's
	// environment); for exec, "cpu", "cuda" or "rocm", which only selects
	// the blocking environment and the visible-devices variables.
	Device string
	// Python is the interpreter of the torch backend (--python): a path or
	// a name looked up in $PATH. "" means the first of /usr/bin/python3
	// and python3 in $PATH that can import torch.
	Python string
	// Entry is the torch backend's user function, "module:function"
	// (--entry): it is called with the loaded batch (reduce_batch.Batch)
	// instead of the batch's built-in op. module is a dotted module name
	// imported from the working directory or $PYTHONPATH, or a path to a
	// .py file; function may be a dotted attribute path.
	Entry string
	// Step is the step the batch was recorded with (fixtures.Batch.Step):
	// without an Entry, the torch backend imports it (its folders on
	// sys.path, its working directory made current) and calls it with the
	// batch in its recorded structure (reduce_batch.steps.resolve_step).
	Step *fixtures.Step
	// StepClass is the class the recorded step rebuilds
	// (fixtures.Batch.StepClass: a LightningModule), or nil: the torch
	// backend checks it with the step, and imports it once, before any
	// replay.
	StepClass *fixtures.Step
	// Trusted says the batch file is the user's (internal/trust's Check:
	// written by their recorder, committed in their repository, or allowed
	// with `reduce trust`): it replays the step and the class it names, with
	// the interpreter that recorded it. Without it ForBatch refuses a step
	// (Untrusted says why, and how to allow it) and leaves the interpreter
	// it names unused: a batch file may come from someone else. An Entry,
	// a Replay command and a Python are the user's own, used as given;
	// reduce's own functions are never a step (trust.OwnStep).
	Trusted bool
	// Untrusted is why the file is not the user's, for ForBatch's error
	// ("not in your trust store ...; not committed in ...").
	Untrusted string
	// Command is a recorded command (fixtures.Batch.Command) the exec
	// backend replays, the candidate handed over in place of its first
	// batch; ForBatch sets it for a batch that records one.
	Command *fixtures.Command
	// Replay is the exec backend's command (--replay), split into words
	// like a shell does (see SplitCommand); {batch} in it is replaced by
	// the candidate file's path.
	Replay string
	// ReplayFormat is the exec backend's candidate format (--replay-format):
	// fixtures.FormatBin ("" too, the native crash.bin),
	// fixtures.FormatNPZ or fixtures.FormatSafetensors.
	ReplayFormat fixtures.Format
	// Jobs is the most replays that run at once (-j); 0 means len(GPUs),
	// or 1 without GPUs. Replay may be called from up to Jobs goroutines
	// (more just wait for a slot).
	Jobs int
	// GPUs pin the replay slots to devices (as ParseGPUs returns them).
	GPUs []string
	// Timeout bounds one replay: 0 means DefaultTimeout, negative none.
	Timeout time.Duration
	// Grace is the time between SIGINT and SIGKILL when a replay is
	// interrupted: 0 means DefaultGrace, negative SIGKILL at once.
	Grace time.Duration
	// NoZygote makes the torch backend start one interpreter per candidate
	// (through the Runner) instead of forking each from a zygote, and the
	// exec backend run its command for every candidate even when it is a
	// Python command that a fork server could run warm.
	NoZygote bool
	// NoCompile (--no-compile) replays a step compiled with torch.compile
	// eager: torch._dynamo disabled in every replay (compileEnv).
	NoCompile bool
	// WarmImport (--warm-import) are modules the exec backend's fork server
	// imports once, besides torch, for a Python --replay command: a module
	// that cannot be imported is an error of New, and so is a command that
	// cannot run warm.
	WarmImport []string
	// Notice, when set, is given the notes a user should read once (the
	// exec backend's command runs cold, and why).
	Notice func(msg string)
	// Blocking makes kernel launches synchronous (CUDA_LAUNCH_BLOCKING=1,
	// or AMD_SERIALIZE_KERNEL=3 on ROCm; see DeviceEnv) so that an
	// asynchronous failure is reported at its kernel. nil means on, the
	// default; point it at false to replay with asynchronous launches.
	Blocking *bool
	// Exe is the reduce binary the go backend re-executes as its worker;
	// "" means os.Executable().
	Exe string
	// Abort makes the go worker end an emulated device-side failure as a
	// torch process whose CUDA context is broken ends at exit: "terminate
	// called after throwing an instance of 'c10::Error'" and SIGABRT.
	Abort bool
	// Env is set over every replay's environment (KEY=VALUE entries).
	Env []string
	// Seed (--seed), when set, seeds the replayed step's random generators:
	// every replay gets REDUCE_SEED, which the torch backend passes to
	// torch.manual_seed before the step (and a user's step may read).
	Seed *int64
	// TempRoot is where per-run directories (and the torch backend's copies
	// of the worker and the package) are made; "" means
	// os.TempDir().
	TempRoot string
	// CaptureLimit bounds the kept output of each stream of a replay, as
	// Runner.CaptureLimit.
	CaptureLimit int
	// DeviceMemory (--device-memory) is the memory the op may allocate, in
	// bytes, emulating a device of that size: a replay whose op needs more
	// fails with an out-of-memory error, so that a failure that depends on
	// the batch size alone reproduces without the device. 0 means no
	// limit. go: the worker adds up the op's outputs and intermediates
	// (kernels.Op.Memory; the inputs do not count). torch: the candidate
	// may allocate that much more once its batch is loaded (RLIMIT_DATA
	// on CPU, torch.cuda.set_per_process_memory_fraction on cuda). Not
	// for exec, whose command is the user's.
	DeviceMemory int64
	// MaxSize (--max-size) bounds what the go worker builds of a batch:
	// every tensor as the elements its view holds (fixtures.Batch.ViewSize:
	// an expanded view of a small storage counts its elements, not its
	// storage). A recorded batch past it is refused by New, and a candidate
	// past it by the worker, before its op runs. 0 means
	// fixtures.DefaultMaxSize.
	MaxSize int64

	// Launcher is where replays run (--launcher): LauncherLocal ("" too),
	// or LauncherSlurm: each replay a Slurm job of its own through srun
	// (the torch backend then starts one interpreter per candidate, as
	// with NoZygote: a zygote cannot fork onto another node).
	Launcher Launcher
	// SlurmArgs are the user's srun options (--slurm-args), split like
	// --replay: "--partition=gpu --gres=gpu:1 --time=5".
	SlurmArgs string
	// SharedDir is a directory every node sees at the same path
	// (--shared-dir); candidates go through it instead of the step's
	// standard input. It is also TempRoot's default.
	SharedDir string
	// QueueTimeout bounds how long a replay's job may wait to start
	// (--queue-timeout): 0 means DefaultQueueTimeout (10 min), negative no
	// bound.
	QueueTimeout time.Duration
	// Retries is how many times a replay whose Slurm job was lost is
	// submitted again (--retries): 0 means DefaultRetries (2), negative
	// none.
	Retries int

	slurm *slurm           // the Slurm launcher, built by New; nil: local
	src   *fixtures.Source // bound by New
}

// Verdict is what one replay of a candidate gave.
type Verdict struct {
	// signature.Signature is the failure, parsed from the replay's stderr and how it
	// ended (Parse); signature.Signature.Backend says cpu, cuda, hip, ... as the
	// text shows.
	Signature signature.Signature
	// Exit is how the replay ended, as given to Parse.
	Exit signature.ExitInfo
	// Report is what the worker reported of a built-in op (ReportPrefix):
	// its outputs, or its failure on the CPU; nil for none, and always for
	// the exec backend.
	Report *Report
	// Result is the process's: exit status, captured output, duration.
	Result Result
	// Backend is the backend's Kind.
	Backend Kind
	// Device is the backend's device (cpu, cuda, ...).
	Device string
	// Zygote reports that the replay ran in a child forked from the torch
	// zygote.
	Zygote bool
	// Retried reports that the zygote died while it held this replay and
	// the replay was run again in a restarted zygote.
	Retried bool
	// Duration is the wall time of the whole replay, as the caller saw it:
	// writing the candidate, the process, collecting its output.
	Duration time.Duration
	// Launcher is where the replay ran.
	Launcher Launcher
	// JobID and Node are the Slurm job that ran the replay (its last
	// attempt) and the node it ran on; empty for a local replay.
	JobID, Node string
	// Requeued counts the Slurm jobs of this replay that were lost
	// (cancelled from outside, preempted, a node failure, not started in
	// time) and submitted again.
	Requeued int
}

// Backend replays candidates of the batch it was made for, each in a fresh
// process. A candidate is a fixtures.View of that batch (the zero View is
// the batch itself): where the backend's processes read the recorded file
// (the go and torch workers, on this machine or through Slurm's
// --shared-dir) they build the candidate from it themselves; elsewhere (the
// exec backend's command, Slurm without --shared-dir) the backend builds
// it and writes it into the replay's run directory.
//
// Replay returns an error only for a failure of the infrastructure that
// should stop the reduction (the worker cannot be started at all, the
// candidate cannot be built or encoded, the backend is closed), or with the
// context's error when ctx is done (the Verdict then says infra,
// "canceled"). A candidate that crashes, hangs or fails to load is a
// Verdict. Replay may be called from several goroutines at once.
type Backend interface {
	Kind() Kind
	// Settings are what the backend's answers depend on.
	Settings() Settings
	Replay(ctx context.Context, v *fixtures.View) (Verdict, error)
	Close() error
}

// Settings are what a backend's answers depend on, every default filled
// in (the interpreter found, the device resolved, the timeout's default):
// two backends with equal Settings answer a candidate alike. A reduction's
// journal pins them, so that --resume never takes an answer given under
// other settings, and a flag given at its default value changes nothing.
type Settings struct {
	Kind   Kind   `json:"backend"`
	Device string `json:"device"`
	// Python is the torch backend's interpreter, as found.
	Python string `json:"python,omitempty"`
	Entry  string `json:"entry,omitempty"`
	// Step is the recorded step the torch backend replays, as an entry
	// names it ("module:qualname"), when no Entry overrides it.
	Step string `json:"step,omitempty"`
	// Replay and ReplayFormat are the exec backend's command and format.
	Replay       string          `json:"replay,omitempty"`
	ReplayFormat fixtures.Format `json:"replay_format,omitempty"`
	// Timeout bounds a replay; 0 is none.
	Timeout      time.Duration `json:"timeout"`
	DeviceMemory int64         `json:"device_memory,omitempty"`
	Blocking     bool          `json:"blocking"`
	Abort        bool          `json:"abort,omitempty"`
	Seed         *int64        `json:"seed,omitempty"`
	NoCompile    bool          `json:"no_compile,omitempty"`
	// Env is Options.Env, as given.
	Env       []string `json:"env,omitempty"`
	Launcher  Launcher `json:"launcher"`
	SlurmArgs string   `json:"slurm_args,omitempty"`
}

// stepName is the recorded step the torch backend replays, "" when an
// entry overrides it or another backend runs.
func (o *Options) stepName(kind Kind) string {
	if o.Step == nil || o.Entry != "" || kind != KindTorch {
		return ""
	}
	return o.Step.Entry()
}

// settings are o's Settings for a backend of kind on device (resolved by
// the backend).
func (o *Options) settings(kind Kind, device string) Settings {
	s := Settings{Kind: kind, Device: device, Entry: o.Entry, Step: o.stepName(kind), Replay: o.Replay, DeviceMemory: o.DeviceMemory,
		Blocking: o.blocking(), Abort: o.Abort, Seed: o.Seed, NoCompile: o.NoCompile, Env: o.Env, Launcher: LauncherLocal, SlurmArgs: o.SlurmArgs}
	switch {
	case o.Timeout == 0:
		s.Timeout = DefaultTimeout
	case o.Timeout > 0:
		s.Timeout = o.Timeout
	}
	if kind == KindExec {
		s.ReplayFormat, _ = fixtures.ParseFormat(string(o.ReplayFormat))
	}
	if o.slurm != nil {
		s.Launcher = LauncherSlurm
	}
	return s
}

// env is what every replay of o gets over its own environment: Options.Env
// and the seed.
func (o *Options) env() []string {
	// REDUCE_REPLAY tells the user's code it runs in a replay: the
	// recorder then records nothing, so that a step whose module runs a
	// training loop when imported can never write over the batch being
	// reduced (reduce_batch.record_on_failure).
	env := append(append([]string{"REDUCE_REPLAY=1"}, compileEnv(o.Batch, o.NoCompile)...), o.Env...)
	// One rank's recording of a torch.distributed run: the worker's
	// start-up check refuses it (exit 2) where torch has no
	// torch.distributed to replay its step alone (reduce_batch.worker._resolve).
	if o.Batch != nil && o.Batch.Meta["world_size"] != "" {
		env = append(env, "REDUCE_WORLD_SIZE="+o.Batch.Meta["world_size"], "REDUCE_RANK="+o.Batch.Meta["rank"])
	}
	if o.Seed != nil {
		env = append(env, fmt.Sprintf("REDUCE_SEED=%d", *o.Seed))
	}
	// The recorded process's sys.argv, which a step's module that reads its
	// command line when imported reads (reduce_batch.steps.resolve_step).
	if o.Batch != nil && o.Batch.Meta["argv"] != "" {
		env = append(env, "REDUCE_ARGV="+o.Batch.Meta["argv"])
	}
	return env
}

// notice passes msg to Options.Notice, if any.
func (o *Options) notice(msg string) {
	if o.Notice != nil {
		o.Notice(msg)
	}
}

// ErrClosed is returned by Replay after Close.
var ErrClosed = errors.New("replay: backend closed")

// New validates o and returns its backend, bound to o.Batch. The torch
// backend starts its zygote (or checks its interpreter) here, so a Python
// that cannot import torch, or a device it cannot initialize, is an error
// of New.
func New(o Options) (Backend, error) {
	kind, _, err := KindFor(o)
	if err != nil {
		return nil, err
	}
	if o.Jobs < 0 {
		return nil, fmt.Errorf("replay: -j %d: want at least 1", o.Jobs)
	}
	i := slices.IndexFunc(backends, func(b kindOf) bool { return b.kind == kind })
	if o.DeviceMemory < 0 {
		return nil, fmt.Errorf("replay: --device-memory %d: want a size in bytes, or 0 for no limit", o.DeviceMemory)
	}
	if len(o.WarmImport) > 0 && (kind != KindExec || o.NoZygote) {
		return nil, fmt.Errorf("replay: --warm-import is for --backend exec's fork server (not with --no-zygote)")
	}
	if o.DeviceMemory > 0 && kind == KindExec {
		return nil, fmt.Errorf("replay: --device-memory is for --backend go or torch (--backend exec runs the --replay command as it is)")
	}
	if f, err := fixtures.ParseFormat(string(o.ReplayFormat)); (err != nil || f != fixtures.FormatBin) && kind != KindExec {
		return nil, fmt.Errorf("replay: --replay-format is for --backend exec (--backend %s reads the native format)", kind)
	}
	if o.Batch == nil {
		return nil, errors.New("replay: no batch to replay candidates of")
	}
	if o.MaxSize < 0 {
		return nil, fmt.Errorf("replay: --max-size %d: want a size in bytes", o.MaxSize)
	}
	if kind == KindGo {
		// The go worker builds every view's elements: a batch it cannot
		// hold is bad input, said before any replay rather than as the
		// worker's death.
		if err := o.Batch.CheckViewSize(o.MaxSize); err != nil {
			return nil, fmt.Errorf("replay: %s: the go backend builds each tensor's elements: %w", cmp.Or(o.File, "the batch"), err)
		}
	}
	if o.slurm, err = newLauncher(&o); err != nil {
		return nil, err
	}
	if o.slurm == nil {
		// What runs of reduce killed by SIGKILL left: their owners are gone.
		fixtures.RemoveStale(cmp.Or(o.TempRoot, os.TempDir()))
	}
	if o.slurm != nil {
		o.NoZygote = true
		if o.TempRoot == "" {
			o.TempRoot = o.SharedDir
		}
	}
	if o.src, err = o.source(backends[i].reads); err != nil {
		if o.slurm != nil {
			o.slurm.Close()
		}
		return nil, fmt.Errorf("replay: the batch's source %s: %w", cmp.Or(o.File, "(a copy)"), err)
	}
	be, err := backends[i].new(o)
	if err != nil {
		o.src.Close()
		if o.slurm != nil {
			o.slurm.Close()
		}
		return nil, err
	}
	return be, nil
}

// source binds o.Batch for a backend whose processes read the recorded
// file (reads: the go and torch workers), wherever they can (not through
// Slurm without --shared-dir, on nodes that may not see it): the source is
// then the file as fixtures.NewSource makes it (a copy in the shared
// directory on Slurm). Elsewhere the backend builds every candidate
// itself, from the batch in memory, and nothing is read again.
func (o *Options) source(reads bool) (*fixtures.Source, error) {
	if !reads || (o.slurm != nil && o.slurm.sharedDir == "") {
		return &fixtures.Source{Batch: o.Batch}, nil
	}
	dir := ""
	if o.slurm != nil {
		dir = o.slurm.sharedDir
	}
	return fixtures.NewSource(o.File, o.Batch, dir)
}

// KindFor is the backend o asks for. o.Kind "" leaves the choice to the
// options that only one backend takes: --entry runs on the torch backend
// and --replay on exec, so either one chooses its backend, and chosenBy
// names it (for a note to the user); neither chooses go. An option of
// another backend than the one o.Kind names is an error, as are both.
func KindFor(o Options) (kind Kind, chosenBy string, err error) {
	kind = Kind(strings.ToLower(strings.TrimSpace(string(o.Kind))))
	if kind == "" {
		switch {
		case o.Entry != "" && o.Replay != "":
			return "", "", errors.New("replay: --entry runs on the torch backend and --replay on exec: give one of them")
		case o.Entry != "":
			return KindTorch, "--entry", nil
		case o.Replay != "":
			return KindExec, "--replay", nil
		case o.Step != nil:
			return KindTorch, "the recorded step", nil
		}
		return KindGo, "", nil
	}
	i := slices.IndexFunc(backends, func(b kindOf) bool { return b.kind == kind })
	if i < 0 {
		var kinds []string
		for _, k := range Kinds() {
			kinds = append(kinds, string(k))
		}
		return "", "", fmt.Errorf("replay: --backend %q: want %s", o.Kind, strings.Join(kinds, ", "))
	}
	if o.Entry != "" && kind != KindTorch {
		return "", "", fmt.Errorf("replay: --entry is for --backend torch, and --backend %s runs %s: drop one of them", kind, backends[i].runs)
	}
	if o.Replay != "" && kind != KindExec {
		return "", "", fmt.Errorf("replay: --replay is for --backend exec, and --backend %s runs %s: drop one of them", kind, backends[i].runs)
	}
	return kind, "", nil
}

// Step says what a backend built from o replays for b: the --replay
// command, the --entry function or the op b records. When there is none,
// or the op is not built in, the error says how to give one: checked before
// any replay, it saves replays that could only fail in the harness.
func Step(o Options, b *fixtures.Batch) (string, error) {
	kind, _, err := KindFor(o)
	if err != nil {
		return "", err
	}
	recorded := ""
	if b.Step != nil && b.Op == "" {
		recorded = b.Step.Entry()
	}
	what, err := step(kind, b.Op, o.Entry, recorded)
	if err != nil || kind == KindExec || o.Entry != "" || b.Op == "" {
		return what, err
	}
	// The op replays with the batch's tensors and attributes: one it cannot
	// be called with is a bad file, not a failure of the op.
	op, _ := kernels.Lookup(b.Op)
	names := make([]string, 0, len(b.Tensors))
	for _, e := range b.Tensors {
		names = append(names, e.Name)
	}
	if err := op.CheckArgs(names, b.Attrs); err != nil {
		return "", fmt.Errorf("the batch cannot be replayed with %s: %v; record it with the op's own tensor names and attributes", what, err)
	}
	return what, nil
}

// ForBatch is o with what it leaves to the recorded batch o.Batch (read
// from o.File) filled in, as `reduce --batch` replays a batch given no
// flags:
//
//   - the backend (KindFor): --entry chooses torch, --replay exec, and a
//     batch that records its step and no op the torch backend;
//   - the step the batch records (with the class it rebuilds), when it
//     records no op: the torch backend replays it unless an Entry
//     overrides it, and no other backend takes it;
//   - the torch backend's interpreter: the one that recorded the batch
//     (its meta "executable"), when it is still there;
//   - the go backend's device: CUDA emulation for a failure recorded on a
//     GPU (CUDA, HIP or Triton).
//
// It tells Notice which option chose the backend and which step replays,
// and refuses a batch the backend has nothing to run for (Step's error,
// after o.File), before New starts anything.
func (o Options) ForBatch() (Options, error) {
	b := o.Batch
	if b == nil {
		return o, errors.New("replay: no batch to replay candidates of")
	}
	if b.Op == "" && o.Step == nil {
		o.Step, o.StepClass = b.Step, b.StepClass()
	}
	if c, err := b.Command(); err != nil {
		return o, fmt.Errorf("%s: %w", o.File, err)
	} else if c != nil && o.Step == nil && o.Entry == "" && o.Replay == "" && (o.Kind == "" || o.Kind == KindExec) {
		if !o.Trusted {
			return o, fmt.Errorf("%s: %w: the file names a command to run, and it is not yours (%s). It would run %s. A batch file from someone else runs nothing it names: read it (reduce inspect %s), then allow it once with `reduce trust %s`; or replay it with a command of yours, --replay 'CMD {batch}'",
				o.File, ErrUntrusted, o.untrusted(), strings.Join(b.Runs(), ", "), fixtures.ShellQuote(o.File), fixtures.ShellQuote(o.File))
		}
		o.Kind, o.Command = KindExec, c
		o.notice(fmt.Sprintf("the candidate replaces %s; it passes once its step completed. The command runs with the %d environment variables it read when recorded (reduce inspect lists them)", c.Handed(), len(c.Env)))
		return o, nil
	}
	kind, chosenBy, err := KindFor(o)
	if err != nil {
		return o, err
	}
	o.Kind = kind
	what, err := Step(o, b)
	if err != nil {
		return o, fmt.Errorf("%s: %w", o.File, err)
	}
	if kind == KindTorch && o.Entry == "" && o.Step != nil {
		if err := o.stepAllowed(b); err != nil { // before any note that reads as if it would run
			return o, fmt.Errorf("%s: %w", o.File, err)
		}
	}
	if chosenBy != "" {
		o.notice(fmt.Sprintf("%s runs on the %s backend: using it", chosenBy, kind))
	}
	if kind != KindTorch || o.Entry != "" {
		o.Step, o.StepClass = nil, nil
	} else if o.Step != nil {
		o.notice("replaying " + what)
	}
	if exe := b.Meta[fixtures.MetaExecutable]; o.Python == "" && kind == KindTorch && exe != "" {
		if rest, ok := strings.CutPrefix(exe, "~/"); ok { // a committed fixture's, its home redacted
			if home, err := os.UserHomeDir(); err == nil {
				exe = filepath.Join(home, rest)
			}
		}
		_, err := os.Stat(exe)
		switch {
		case err == nil && o.Trusted:
			o.Python = exe // the user's own torch
		case err == nil:
			o.notice(fmt.Sprintf("the interpreter the file names (%s) is not run: the file is not yours (%s); replaying with the first of %s that has torch (--python names another)",
				fixtures.Printable(exe), o.untrusted(), strings.Join(defaultPythons(), " and ")))
		default:
			o.notice(fmt.Sprintf("the interpreter that recorded the file (%s) is not here; replaying with the first of %s that has torch (--python names another)",
				fixtures.Printable(exe), strings.Join(defaultPythons(), " and ")))
		}
	}
	if o.Device == "" && kind == KindGo && b.Error != nil {
		switch signature.Recorded(b.Error.Text).Backend {
		case signature.BackendCUDA, signature.BackendHIP, signature.BackendTriton:
			o.Device = "cuda"
		}
	}
	return o, nil
}

// ErrUntrusted is ForBatch's error for a batch that names a step to run
// and is not the user's (Options.Trusted), or names one of reduce's own
// functions as its step.
var ErrUntrusted = errors.New("not run")

// stepAllowed refuses the step the batch names where reduce may not run
// it: any step of a file that is not the user's, saying what the file would
// run and how to allow it (decided first: nothing the step names is looked
// at, not even its file), and one of reduce's own functions, always.
func (o Options) stepAllowed(b *fixtures.Batch) error {
	if !o.Trusted {
		return fmt.Errorf("%w: the file names code, and it is not yours (%s). It would run %s. A batch file from someone else runs nothing it names: read it (reduce inspect %s), then allow it once with `reduce trust %s`; or replay it with a step of yours, --entry MODULE:FUNCTION",
			ErrUntrusted, o.untrusted(), strings.Join(b.Runs(), ", "), fixtures.ShellQuote(o.File), fixtures.ShellQuote(o.File))
	}
	for _, s := range []*fixtures.Step{o.Step, o.StepClass} {
		if s == nil {
			continue
		}
		if why := trust.OwnStep(s.Module, s.Qualname, s.File); why != "" {
			return fmt.Errorf("%w: the recorded step %s: %s, and reduce's own functions are never a step (a file naming one would have reduce call it with the file's data): the file is damaged or was made to do so",
				ErrUntrusted, fixtures.Printable(s.Module+":"+s.Qualname), fixtures.Printable(why))
		}
	}
	return nil
}

// untrusted is why the file is not the user's, in words.
func (o Options) untrusted() string { return cmp.Or(o.Untrusted, "no trust was decided for it") }

// step is Step's rule on what it depends on: the backend, the op the batch
// records ("" for none), the --entry given ("" for none) and the step the
// batch records when it has no op ("module:qualname", or ""): the function
// the torch backend calls when no --entry is given.
func step(kind Kind, op, entry, recorded string) (string, error) {
	switch {
	case kind == KindExec:
		return "the --replay command", nil
	case kind == KindTorch && entry != "":
		return "--entry " + entry, nil
	case kind == KindTorch && recorded != "":
		return "the recorded step " + recorded, nil
	case kind == KindGo && op == "" && recorded != "":
		return "", fmt.Errorf("the batch records the step %s and no op, and the go backend runs only built-in ops: replay it on the torch backend (leave out --backend go)", recorded)
	}
	how := "replay it with --entry MODULE:FUNCTION, or with --backend exec --replay CMD"
	if kind == KindGo {
		how = "the go backend runs only built-in ops: replay it with --backend torch --entry MODULE:FUNCTION, or with --backend exec --replay CMD"
	}
	if op == "" {
		return "", fmt.Errorf("the batch records no op and no step (it was recorded for a step of its own); %s", how)
	}
	if _, err := kernels.Lookup(op); err != nil {
		return "", fmt.Errorf("op %q is not built in (the built-in ops: %s); %s", op, strings.Join(kernels.OpNames(), ", "), how)
	}
	return "op " + op, nil
}

// blocking is o.Blocking with its default.
func (o *Options) blocking() bool { return o.Blocking == nil || *o.Blocking }

// runner is the Runner every backend runs its processes through.
func (o *Options) runner() *Runner {
	return &Runner{Timeout: o.Timeout, Grace: o.Grace, TempRoot: o.TempRoot, CaptureLimit: o.CaptureLimit}
}

// pool is the Pool of o's slots on the given device kind.
func (o *Options) pool(kind string) *Pool {
	return &Pool{Runner: o.runner(), Jobs: o.Jobs, GPUs: o.GPUs, Kind: kind, slurm: o.slurm}
}

// exitInfo converts a Result for Parse.
func exitInfo(r Result) signature.ExitInfo {
	return signature.ExitInfo{Code: r.ExitCode, Signal: int(r.Signal), TimedOut: r.TimedOut, Harness: r.Harness, Canceled: r.Canceled}
}

// workerExit is exitInfo of a run of a worker of kind, with its own fault
// (workerFault) when it died of one; worker is false for the user's
// command.
func workerExit(kind Kind, worker bool, r Result) signature.ExitInfo {
	e := exitInfo(r)
	e.Fault = workerFault(kind, worker, r)
	return e
}

// verdictOf turns a Runner's Result into a Verdict, or the error that must
// stop the reduction: the process could not be started (not for a
// cancellation: ctx's error comes with an infra verdict).
func verdictOf(ctx context.Context, name Kind, device string, res Result, start time.Time) (Verdict, error) {
	v := Verdict{Result: res, Backend: name, Device: device, Exit: workerExit(name, name != KindExec, res), Launcher: LauncherLocal}
	v.Signature = signature.Parse(res.Stderr, v.Exit)
	if name != KindExec {
		v.Report = ParseReport(res.Stdout)
	}
	v.Duration = time.Since(start)
	if l := res.Launch; l != nil {
		v.Launcher, v.JobID, v.Node, v.Requeued = l.Launcher, l.JobID, l.Node, max(l.Attempts-1, 0)
		if l.Infra != "" {
			// The job was lost: the outcome says nothing about the
			// candidate, whatever it printed.
			v.Signature = signature.Signature{Family: signature.FamilyInfra, Expression: "slurm: " + l.Infra}
		}
	}
	if res.Canceled {
		err := ctx.Err()
		if err == nil {
			err = context.Canceled
		}
		return v, err
	}
	if !res.Started && res.Err != nil {
		v.Signature = signature.Signature{Family: signature.FamilyInfra, Expression: "not started"}
		return v, fmt.Errorf("replay: %s backend: %w", name, res.Err)
	}
	return v, nil
}

// candidateFile builds the candidate v describes from src's batch
// (fixtures.Batch.Apply: the rows selected, dtype, per-sample shape and
// layout kept, then the elements set, the dims cut, the values set), for a
// process that cannot read the source, and returns the writer of its file
// in format f (the workers read the native format), for Command.Streams:
// the encoding goes straight into the file, with no copy of the candidate
// in memory. The candidate is checked here, so that one no file can hold
// is an error before any process or directory is made.
func candidateFile(src *fixtures.Source, v *fixtures.View, f fixtures.Format) (func(io.Writer) error, error) {
	reclaim(src.Batch)
	b, err := src.Batch.Apply(v)
	if err != nil {
		return nil, fmt.Errorf("replay: candidate: %w", err)
	}
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("replay: candidate: %w", err)
	}
	return func(w io.Writer) error {
		if _, err := fixtures.EncodeAs(w, b, f); err != nil {
			return fmt.Errorf("replay: candidate: %w", err)
		}
		return nil
	}, nil
}

// reclaimAbove is the recorded storage from which building a candidate
// first collects the garbage.
const reclaimAbove = 64 << 20

// reclaim collects the garbage before a candidate of a large batch is
// built. A candidate's storage is garbage once it was written, but the
// collector runs only when an allocation crosses its goal, and a candidate
// is one allocation as large as the live heap: without this the last
// candidate and the next one are both resident, twice the memory. The
// collection is cheap (the storage holds no pointers to scan) and rare
// next to a replay's process.
func reclaim(b *fixtures.Batch) {
	var n int
	for _, e := range b.Tensors {
		n += len(e.Data)
	}
	if n >= reclaimAbove {
		runtime.GC()
	}
}

// bound is what New binds every backend to: the source its candidates are
// views of, and the pool its processes run in (with its launcher).
type bound struct {
	src  *fixtures.Source
	pool *Pool
}

// provenance is where the backend's replays ran (Provenance).
func (b *bound) provenance() LaunchInfo { return b.pool.info() }

// release closes the pool's launcher (cancelling what is still in flight,
// and waiting until it is gone) and the source.
func (b *bound) release() error { return errors.Join(b.pool.close(), b.src.Close()) }

// processGone reports whether pid no longer runs: it does not exist, or is
// a zombie (dead, waiting for a parent to reap it).
func processGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	st := s[i+2]
	return st == 'Z' || st == 'X'
}
