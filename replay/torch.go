package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"reduce/fixtures"
)

// The torch backend: a Python with torch runs the embedded reduce_replay.py,
// written beside the Python files it imports (pythonFiles).
//
// A candidate reaches the worker as a plan (fixtures.Batch.Plan: the view
// laid out for a process that builds the candidate from the recorded file
// itself, reduce_batch.load_view), an encoding of the view made here. By
// default each candidate runs in a child forked from a zygote (see
// zygote): `python reduce_replay.py zygote` imports torch (and the --entry
// module) once; its children, forked ahead of need, initialize the device
// and wait for one candidate each. With NoZygote every candidate gets an
// interpreter of its own through the Runner: `python reduce_replay.py replay
// - --device D [--entry M:F] [--device-memory BYTES]`, the plan on its
// standard input, which pays for `import torch` every time. On Slurm without
// --shared-dir the candidate is built here and travels as a file, with the
// worker (`replay FILE`). With --device-memory the candidate's process
// limits what the op may allocate once the batch is loaded
// (limit_device_memory in reduce_batch/memory.py).
type torchBackend struct {
	bound
	python  string
	device  string // the torch device: cpu, cuda, cuda:N
	kind    string // DeviceCPU, DeviceCUDA, DeviceROCm
	entry   string
	step    string // the recorded step as JSON, when no entry overrides it
	class   string // the class the step rebuilds (Options.StepClass) as JSON, or ""
	trust   bool   // Options.Trusted
	memory  int64  // Options.DeviceMemory
	dir     string // holds the launcher reduce_replay.py and the package's zip (pythonFiles)
	module  string // the launcher in dir
	env     []string
	runner  *Runner
	noZyg   bool
	set     Settings
	slotEnv []map[string]string // the environment of pool's slot i, for the zygote's child of slot i
	// program is set when the zygote serves the exec backend (see
	// warmExec): its children run the user's Python command, not the
	// embedded replay; their verdicts are the exec backend's, and their
	// exit status 86 is the command's own.
	program *pythonProgram

	zmu      sync.Mutex
	z        *zygote
	closed   bool
	starts   int // zygotes started, for tests
	nextID   uint64
	idMu     sync.Mutex
	seenMu   sync.Mutex
	seenPIDs map[int]bool // every zygote and child pid, for tests
}

// Python interpreters that were checked, by path.
var pythonChecks sync.Map // string -> *pythonCheck

type pythonCheck struct {
	once sync.Once
	info pythonInfo
	err  error
}

type pythonInfo struct {
	Torch         string `json:"torch"`
	CUDA          string `json:"cuda"`
	HIP           string `json:"hip"`
	CUDAAvailable bool   `json:"cuda_available"`
	Devices       int    `json:"devices"`
}

const pythonProbe = `import json, sys
import torch
ok = torch.cuda.is_available()
print(json.dumps({"torch": str(torch.__version__), "cuda": torch.version.cuda or "",
    "hip": getattr(torch.version, "hip", None) or "", "cuda_available": ok,
    "devices": torch.cuda.device_count() if ok else 0}))
`

// checkPython runs python once (per process and path) to see whether it can
// import torch and whether torch sees a GPU.
func checkPython(python string) (pythonInfo, error) {
	v, _ := pythonChecks.LoadOrStore(python, &pythonCheck{})
	c := v.(*pythonCheck)
	c.once.Do(func() {
		r := &Runner{Timeout: 2 * time.Minute, CaptureLimit: 64 << 10}
		res := r.Run(context.Background(), Command{Path: python, Args: []string{"-c", pythonProbe}, Env: PythonEnv(), Foreign: true})
		if res.Err != nil {
			c.err = res.Err
			return
		}
		if res.ExitCode != 0 {
			c.err = fmt.Errorf("cannot import torch: %s", lastLine(res.Stderr))
			return
		}
		if err := json.Unmarshal(bytes.TrimSpace(res.Stdout), &c.info); err != nil {
			c.err = fmt.Errorf("torch probe printed %q: %v", lastLine(res.Stdout), err)
		}
	})
	return c.info, c.err
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 0 || lines[len(lines)-1] == "" {
		return "(no output)"
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// defaultPythons are tried in order when Options.Python is "".
func defaultPythons() []string {
	c := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil && p != c[0] {
		c = append(c, p)
	}
	return c
}

// FindPython returns the interpreter the torch backend uses for python
// (Options.Python): python itself looked up in $PATH, or, when it is "",
// the first of /usr/bin/python3 and python3 in $PATH that can import torch.
func FindPython(python string) (string, error) {
	if python != "" {
		p, err := exec.LookPath(python)
		if err != nil {
			return "", fmt.Errorf("replay: --python %q: %w", python, err)
		}
		return p, nil
	}
	var tried []string
	for _, p := range defaultPythons() {
		if _, err := os.Stat(p); err != nil {
			tried = append(tried, fmt.Sprintf("%s: not found", p))
			continue
		}
		if _, err := checkPython(p); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("replay: --backend torch: no Python that can import torch (tried %s); name one with --python", strings.Join(tried, "; "))
}

func newTorchBackend(o Options) (Backend, error) {
	dev := strings.ToLower(strings.TrimSpace(o.Device))
	kind := DeviceCPU
	switch {
	case dev == "" || dev == "cpu":
		dev = "cpu"
	case dev == "cuda" || strings.HasPrefix(dev, "cuda:") || dev == "gpu" || dev == "nvidia":
		if !strings.HasPrefix(dev, "cuda") {
			dev = "cuda"
		}
		kind = DeviceCUDA
	case dev == "rocm" || dev == "hip" || dev == "amd":
		dev, kind = "cuda", DeviceROCm // torch's ROCm build calls its device cuda
	default:
		return nil, fmt.Errorf("replay: --device %q: the torch backend takes cpu, cuda, cuda:N or rocm", o.Device)
	}
	if o.Entry != "" {
		i := strings.LastIndexByte(o.Entry, ':')
		if i <= 0 || i == len(o.Entry)-1 {
			return nil, fmt.Errorf("replay: --entry %q: want module:function (a dotted module importable from the working directory, or a .py path)", o.Entry)
		}
	}
	python, err := FindPython(o.Python)
	if err != nil {
		return nil, err
	}
	t := &torchBackend{
		bound:  bound{src: o.src},
		python: python, device: dev, kind: kind, entry: o.Entry, memory: o.DeviceMemory, runner: o.runner(),
		noZyg: o.NoZygote, seenPIDs: map[int]bool{}, trust: o.Trusted,
	}
	if o.Step != nil && o.Entry == "" {
		step, err := json.Marshal(o.Step)
		if err != nil {
			return nil, fmt.Errorf("replay: the recorded step: %w", err)
		}
		t.step = string(step)
		if o.StepClass != nil {
			class, err := json.Marshal(o.StepClass)
			if err != nil {
				return nil, fmt.Errorf("replay: the recorded step's class: %w", err)
			}
			t.class = string(class)
		}
	}
	t.env = append(append(PythonEnv(), DeviceEnv(kind, o.blocking())...), o.env()...)
	t.set = o.settings(KindTorch, dev)
	t.set.Python = python
	if err := t.setUp(o.pool(kind)); err != nil {
		return nil, err
	}
	if t.noZyg && o.slurm != nil {
		// The interpreter runs on the cluster's nodes, which may see
		// another Python, and GPUs this login node lacks: a Python that
		// cannot import torch shows in the replays' verdicts (infra).
		return t, nil
	}
	if t.noZyg {
		info, err := checkPython(python)
		if err == nil && kind != DeviceCPU && !info.CUDAAvailable {
			err = fmt.Errorf("torch %s sees no GPU for --device %s", info.Torch, o.Device)
		}
		if err != nil {
			os.RemoveAll(t.dir)
			return nil, fmt.Errorf("replay: --python %s: %v", python, err)
		}
		if err := t.checkEntry(); err != nil {
			os.RemoveAll(t.dir)
			return nil, err
		}
		return t, nil
	}
	t.zmu.Lock()
	_, err = t.zygoteLocked()
	t.zmu.Unlock()
	if err != nil {
		os.RemoveAll(t.dir)
		return nil, err
	}
	return t, nil
}

// setUp gives t its pool, the environment of each of its slots, and the
// directory with the embedded Python files.
func (t *torchBackend) setUp(pool *Pool) error {
	t.pool = pool
	for i := range t.pool.Size() {
		env := map[string]string{}
		for _, kv := range t.pool.SlotEnv(i) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		t.slotEnv = append(t.slotEnv, env)
	}
	var err error
	if t.dir, err = fixtures.MkdirOwned(t.runner.tempRoot(), "reduce-torch-"); err != nil {
		return fmt.Errorf("replay: fork server: %w", err)
	}
	t.module = filepath.Join(t.dir, WorkerModuleName)
	for name, data := range pythonFiles() {
		if err := os.WriteFile(filepath.Join(t.dir, name), data, 0o644); err != nil {
			os.RemoveAll(t.dir)
			return fmt.Errorf("replay: fork server: %w", err)
		}
	}
	return nil
}

// checkEntry imports the --entry function, or the recorded step (checked
// as every replay checks it: Options.Trusted), once, as every replay
// would: one that cannot be imported is an error of New, as it is when the
// zygote imports it at its start, rather than a harness failure of every
// candidate.
func (t *torchBackend) checkEntry() error {
	if t.entry == "" && t.step == "" {
		return nil
	}
	args := append([]string{t.module, "entry"}, t.entryArgs()...)
	res := t.runner.Run(context.Background(), Command{Path: t.python, Args: args, Env: t.env})
	switch {
	case res.Err != nil && !res.Started:
		return fmt.Errorf("replay: --python %s: %w", t.python, res.Err)
	case res.ExitCode == 0:
		return nil
	}
	// The worker's last line says why ("reduce_batch: harness: --entry ...:
	// cannot import ..."), after the import's traceback, if any.
	errb := bytes.TrimRight(res.Stderr, "\n")
	why := lastLine(errb)
	errb = bytes.TrimRight(errb[:bytes.LastIndexByte(errb, '\n')+1], "\n")
	msg := "replay: " + strings.TrimPrefix(why, "reduce_batch: harness: ")
	if len(errb) > 4096 {
		errb = errb[len(errb)-4096:]
	}
	if len(errb) > 0 {
		msg += "; its stderr ends:\n" + string(errb)
	}
	return errors.New(msg)
}

func (t *torchBackend) Kind() Kind { return KindTorch }

// verdictKind is the backend its verdicts name: the exec backend's when
// the zygote serves it.
func (t *torchBackend) verdictKind() Kind {
	if t.program != nil {
		return KindExec
	}
	return KindTorch
}

func (t *torchBackend) Settings() Settings { return t.set }

// memoryArgs pass Options.DeviceMemory to reduce_replay.py (replay and
// zygote take the same flag).
func (t *torchBackend) memoryArgs() []string {
	if t.memory <= 0 {
		return nil
	}
	return []string{"--device-memory", strconv.FormatInt(t.memory, 10)}
}

// Replay replays the candidate v describes: built by the worker from the
// source's file and the plan made of v here (fixtures.Batch.Plan,
// reduce_batch.load_view), which the zygote's child gets in its request
// and a cold worker on its standard input; on a node that may not see the
// file, built here and sent with the worker.
func (t *torchBackend) Replay(ctx context.Context, v *fixtures.View) (Verdict, error) {
	return t.replay(ctx, t.src, v)
}

// replay is Replay of a view of src: the tests replay many batches with
// one zygote.
func (t *torchBackend) replay(ctx context.Context, src *fixtures.Source, v *fixtures.View) (Verdict, error) {
	start := time.Now()
	if t.isClosed() {
		return Verdict{Backend: KindTorch, Device: t.device}, ErrClosed
	}
	args := []string{t.module, "replay", "-", "--device", t.device}
	args = append(append(args, t.entryArgs()...), t.memoryArgs()...)
	if t.pool.remote() {
		data, err := candidateFile(src, v, fixtures.FormatBin)
		if err != nil {
			return Verdict{Backend: KindTorch, Device: t.device}, err
		}
		// The worker and the module it imports travel with the candidate.
		args[0], args[2] = RunDirArg+"/"+WorkerModuleName, RunDirArg+"/candidate.bin"
		res := t.pool.Run(ctx, Command{Path: t.python, Args: args, Env: t.env, Files: pythonFiles(),
			Streams: map[string]func(io.Writer) error{"candidate.bin": data}})
		return verdictOf(ctx, KindTorch, t.device, res, start)
	}
	plan, err := src.Batch.Plan(v, src.Path)
	var raw []byte
	if err == nil {
		raw, err = json.Marshal(plan)
	}
	if err != nil {
		return Verdict{Backend: KindTorch, Device: t.device}, fmt.Errorf("replay: torch backend: plan: %w", err)
	}
	if t.noZyg {
		res := t.pool.Run(ctx, Command{Path: t.python, Args: args, Env: t.env, Stdin: raw, TempDir: true})
		return verdictOf(ctx, KindTorch, t.device, res, start)
	}
	return t.replayZygote(ctx, zygoteInput{plan: raw}, start)
}

func (t *torchBackend) isClosed() bool {
	t.zmu.Lock()
	defer t.zmu.Unlock()
	return t.closed
}

// Close stops the zygote (its children are killed), removes the backend's
// files and kills what strays are left. Replays still running come back as
// infra verdicts.
func (t *torchBackend) Close() error {
	t.zmu.Lock()
	if t.closed {
		t.zmu.Unlock()
		return nil
	}
	t.closed = true
	z := t.z
	t.z = nil
	t.zmu.Unlock()
	var err error
	if z != nil {
		err = z.stop()
	}
	if rerr := os.RemoveAll(t.dir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if t.program == nil {
		// The exec backend's fork server shares that backend's pool and
		// has no source: the exec backend releases them.
		err = errors.Join(err, t.release())
	}
	// Strays re-parented after their replay's sweep, and what the zygote's
	// children left (re-parented to reduce when the zygote died).
	sweep("")
	return err
}

func (t *torchBackend) seen(pid int) {
	if pid <= 0 {
		return
	}
	t.seenMu.Lock()
	t.seenPIDs[pid] = true
	t.seenMu.Unlock()
}

// pids returns every zygote and child pid the backend has seen.
func (t *torchBackend) pids() []int {
	t.seenMu.Lock()
	defer t.seenMu.Unlock()
	out := make([]int, 0, len(t.seenPIDs))
	for p := range t.seenPIDs {
		out = append(out, p)
	}
	return out
}

// entryArgs are the worker's arguments that say what it runs: the exec
// backend's program, the --entry function, else the recorded step (with
// the class it rebuilds, and --trusted: the file is the user's), else
// (none) the batch's op.
func (t *torchBackend) entryArgs() []string {
	switch {
	case t.program != nil:
		return t.program.zygoteArgs()
	case t.entry != "":
		return []string{"--entry", t.entry}
	case t.step != "":
		args := []string{"--step", t.step}
		if t.class != "" {
			args = append(args, "--step-class", t.class)
		}
		if t.trust {
			args = append(args, "--trusted")
		}
		return args
	}
	return nil
}
