package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"reduce/internal/signature"

	"golang.org/x/sys/unix"
)

// The zygote of the torch backend, and of the exec backend's Python
// commands (torchBackend.program, see warmExec).
//
// `python reduce_replay.py zygote --device D --slots N --slot-env JSON
// [--entry M:F | --step JSON | --exec JSON [--warm-import M,...]]
// [--device-memory BYTES]` imports torch (and the entry's, step's or
// --warm-import modules) once and never touches the device or runs an op
// itself, so that
// forking it is safe: no
// CUDA context, no OpenMP pool. It keeps one pre-forked child per slot;
// each child arms a parent-death SIGKILL, puts itself in a process group of
// its own, takes its slot's environment (CUDA_VISIBLE_DEVICES), initializes
// the device (torch.cuda.init() and a first allocation, so that the CUDA
// context exists before its candidate arrives), and blocks on a pipe for
// exactly one candidate. When it gets one the zygote forks the slot's next
// child at once, so device initialization overlaps the running replay.
//
// Protocol: JSON lines on the zygote's stdin and stdout.
//
//	Go → zygote  {"id": "7", "slot": 0, "path": ".../candidate.bin",
//	              "stdout": ".../stdout.fifo", "stderr": ".../stderr.fifo",
//	              "run_dir": "..."}
//	             the candidate's file as "path", or its plan inline as
//	             "plan" (at most maxInlinePlan bytes), or as a file,
//	             "plan_path"
//	zygote → Go  {"event": "hello", "pid", "torch", "cuda", "hip", "python",
//	              "error"?, "entry_error"?, "warning"?}             once
//	             {"event": "ready"|"init_error", "slot", "pid", "error"?}
//	             {"event": "start", "id", "pid", "pgid", "slot"}
//	             {"event": "exit", "id", "pid", "status", "signal", "core"}
//	             {"event": "error", "id", "error"}   (the request was not run)
//	             {"event": "idle_exit", "slot", "pid"}
//
// The child opens the two files (FIFOs in the candidate's per-run
// directory, which this side reads as the Runner reads pipes: bounded
// capture, no file grows on disk), dup2s them onto its fds 1 and 2, sets
// TMPDIR and REDUCE_RUN_DIR to the run directory, runs the replay (or,
// with --exec, the user's script or module as the interpreter would) and
// _exits with the status an interpreter would give (1 and the traceback for
// an exception, death by the signal for a crash). The zygote reaps it with
// waitid(WNOWAIT) first, SIGKILLs what is left of its process group while
// the group id cannot be reused, then reports "exit". EOF on stdin: the
// zygote kills every child and exits.
//
// Each child is watched by the Runner's supervisor as any other replay
// process: the zygote is only how it was started (a zygoteChild). Its pid
// is its process group's id; the zygote, its parent, reaps it and SIGKILLs
// what is left of its group first, while the group's id cannot be reused,
// and the "exit" line tells the supervisor it has exited. Until then the
// supervisor may signal the group (SIGINT on timeout, SIGKILL after the
// grace); the reap and its "exit" line are microseconds apart, far less than
// the pid space takes to wrap around.
//
// If the zygote dies (killed, crashed, or killed by a candidate), the
// children it held die with it (parent-death SIGKILL; this side SIGKILLs
// the group of a running one too, and its child counts as exited once it is
// gone), the next replay starts a new zygote, and each replay that was in
// flight is run once more in the new one (Verdict.Retried): its child was
// killed with the zygote, so its outcome is unknown. If the zygote dies
// during the retry too, the verdict is infra, "torch zygote died". A zygote
// that cannot be started again is an error of Replay.
type zygote struct {
	t       *torchBackend
	pid     int
	in      *os.File
	inMu    sync.Mutex
	helloC  chan zygoteEvent
	statusC chan zygoteEvent
	mu      sync.Mutex
	calls   map[string]*zygoteCall
	exited  chan struct{} // the process has exited
	dead    chan struct{} // exited, and its last events are delivered
	errMu   sync.Mutex
	stderr  *capture
}

type zygoteEvent struct {
	Event      string `json:"event"`
	ID         string `json:"id,omitempty"`
	PID        int    `json:"pid,omitempty"`
	PGID       int    `json:"pgid,omitempty"`
	Slot       int    `json:"slot,omitempty"`
	Status     *int   `json:"status,omitempty"`
	Signal     int    `json:"signal,omitempty"`
	Core       bool   `json:"core,omitempty"`
	Error      string `json:"error,omitempty"`
	Torch      string `json:"torch,omitempty"`
	CUDA       string `json:"cuda,omitempty"`
	HIP        string `json:"hip,omitempty"`
	Python     string `json:"python,omitempty"`
	EntryError string `json:"entry_error,omitempty"`
	NoTorch    bool   `json:"no_torch,omitempty"`
	Warning    string `json:"warning,omitempty"`
}

// zygoteCall is one request to the zygote. readEvents writes it; the
// replay reads pid after start delivered it, and exit and gone after done
// is closed.
type zygoteCall struct {
	start chan zygoteEvent // the "start" event: a child runs the request
	done  chan struct{}    // closed once exit or gone is set
	exit  zygoteEvent      // "exit" (the child was reaped) or "error" (never run)
	gone  bool             // the zygote died first; the child, if any, is gone too
	pid   int              // the child's, from "start"
}

// zygoteStart bounds how long a zygote may take to import torch and to
// initialize the device in its first child.
var zygoteStart = 3 * time.Minute

// errZygoteDied is in Result.Err of a replay whose zygote died.
var errZygoteDied = errors.New("replay: the torch zygote died")

// errNoTorch is in the error of a zygote whose interpreter cannot import
// torch.
var errNoTorch = errors.New("cannot import torch")

// zygoteLocked returns the running zygote, starting one when there is none
// or the last one died. t.zmu is held.
func (t *torchBackend) zygoteLocked() (*zygote, error) {
	if t.closed {
		return nil, ErrClosed
	}
	if t.z != nil {
		select {
		case <-t.z.dead:
			t.z = nil
		default:
			return t.z, nil
		}
	}
	z, err := startZygote(t)
	if err != nil {
		return nil, err
	}
	t.z = z
	t.starts++
	return z, nil
}

func startZygote(t *torchBackend) (*zygote, error) {
	slotEnv, err := json.Marshal(t.slotEnv)
	if err != nil {
		return nil, err
	}
	args := []string{t.module, "zygote", "--device", t.device, "--slots", strconv.Itoa(len(t.slotEnv)), "--slot-env", string(slotEnv)}
	args = append(append(args, t.entryArgs()...), t.memoryArgs()...)
	cmd := exec.Command(t.python, args...)
	started := zygoteStart
	if h := t.program.handoverOf(); h != nil { // the recorded command serves from its first batch
		cmd, started = exec.Command(t.python, h.argv...), handoverStart
		cmd.Dir = h.dir
	}
	cmd.Env = MergeEnv(t.runner.environ(), t.env)
	var pipes [6]*os.File // in r/w, out r/w, err r/w
	for i := 0; i < 6; i += 2 {
		if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
			for _, f := range pipes {
				if f != nil {
					f.Close()
				}
			}
			return nil, fmt.Errorf("replay: torch zygote: pipe: %w", err)
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pipes[0], pipes[3], pipes[5]
	z := &zygote{
		t: t, in: pipes[1],
		helloC: make(chan zygoteEvent, 1), statusC: make(chan zygoteEvent, 64),
		calls: map[string]*zygoteCall{}, exited: make(chan struct{}), dead: make(chan struct{}),
		stderr: newCapture(64 << 10),
	}
	p, err := startProcess(cmd)
	pipes[0].Close()
	pipes[3].Close()
	pipes[5].Close()
	if err != nil {
		pipes[1].Close()
		pipes[2].Close()
		pipes[4].Close()
		return nil, fmt.Errorf("replay: --python %s: cannot start the torch zygote: %w", t.python, err)
	}
	go func() {
		<-p.exited()
		p.reap() // and what is left in its own group
		close(z.exited)
	}()
	z.pid = cmd.Process.Pid
	t.seen(z.pid)
	go z.readStderr(pipes[4])
	go z.readEvents(pipes[2])

	timer := time.NewTimer(started)
	defer timer.Stop()
	fail := func(format string, a ...any) (*zygote, error) {
		z.stop()
		msg := fmt.Sprintf(format, a...)
		if tail := z.stderrTail(); tail != "" {
			msg += "; its stderr ends:\n" + tail
		}
		return nil, errors.New(msg)
	}
	var hello zygoteEvent
	select {
	case hello = <-z.helloC:
	case <-z.dead:
		return fail("replay: --python %s: the torch zygote exited at start", t.python)
	case <-timer.C:
		return fail("replay: --python %s: the torch zygote did not start within %v", t.python, started)
	}
	if hello.Error != "" {
		_, err := fail("replay: --python %s: %s", t.python, hello.Error)
		if hello.NoTorch {
			err = fmt.Errorf("%w: %w", errNoTorch, err)
		}
		return nil, err
	}
	if hello.EntryError != "" {
		return fail("replay: %s", hello.EntryError)
	}
	for {
		select {
		case ev := <-z.statusC:
			if ev.Slot != 0 || (ev.Event != "ready" && ev.Event != "init_error") {
				continue
			}
			if ev.Event == "init_error" {
				return fail("replay: --device %s: torch %s (%s) cannot initialize the device: %s", t.device, hello.Torch, t.python, ev.Error)
			}
			return z, nil
		case <-z.dead:
			return fail("replay: --python %s: the torch zygote exited at start", t.python)
		case <-timer.C:
			return fail("replay: --device %s: the torch zygote's first child did not initialize the device within %v", t.device, zygoteStart)
		}
	}
}

func (z *zygote) readStderr(f *os.File) {
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		z.errMu.Lock()
		z.stderr.Write(buf[:n])
		z.errMu.Unlock()
		if err != nil {
			return
		}
	}
}

func (z *zygote) stderrTail() string {
	z.errMu.Lock()
	defer z.errMu.Unlock()
	b := z.stderr.Bytes()
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

func (z *zygote) readEvents(f *os.File) {
	go func() {
		// EOF comes when the zygote exits; bound the wait for a child that
		// somehow still holds the pipe.
		<-z.exited
		time.Sleep(z.t.runner.waitDelay())
		f.SetReadDeadline(time.Now())
	}()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev zygoteEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			z.errMu.Lock()
			fmt.Fprintf(z.stderr, "reduce: bad zygote event %q: %v\n", sc.Text(), err)
			z.errMu.Unlock()
			continue
		}
		z.t.seen(ev.PID)
		switch ev.Event {
		case "hello":
			select {
			case z.helloC <- ev:
			default:
			}
		case "ready", "init_error", "idle_exit":
			select {
			case z.statusC <- ev:
			default:
			}
		case "start":
			if c := z.call(ev.ID, false); c != nil {
				c.pid = ev.PID
				c.start <- ev
			}
		case "exit", "error":
			if c := z.call(ev.ID, true); c != nil {
				c.exit = ev
				close(c.done)
			}
		}
	}
	f.Close()
	<-z.exited
	// Every event the zygote wrote has been delivered: the calls left never
	// get an "exit".
	z.mu.Lock()
	calls := z.calls
	z.calls = nil
	z.mu.Unlock()
	for _, c := range calls {
		c.gone = true
		if c.pid == 0 {
			close(c.done) // no child ran it
			continue
		}
		go c.lost()
	}
	close(z.dead)
}

// lost makes sure the child of a call whose zygote died is gone (it got
// SIGKILL with its parent's death, but what it forked did not), then counts
// it as exited. Nobody reaps it for this side to see: it is reparented, so
// it is polled for, often at first, since the supervisor may still signal
// its group until it counts as exited and the group's id is free once it is
// reaped. There is no bound: a child stuck in a driver is the supervisor's
// to give up on (killWait), as any process is.
func (c *zygoteCall) lost() {
	signalGroup(c.pid, syscall.SIGKILL)
	for start := time.Now(); !processGone(c.pid); {
		d := 5 * time.Millisecond
		if time.Since(start) > killWait {
			d = 100 * time.Millisecond
		}
		time.Sleep(d)
	}
	close(c.done)
}

// call returns the call of id, removing it when done.
func (z *zygote) call(id string, done bool) *zygoteCall {
	z.mu.Lock()
	defer z.mu.Unlock()
	c := z.calls[id]
	if done {
		delete(z.calls, id)
	}
	return c
}

// register makes the call of a request before it is sent. Once the zygote
// is dead a new call is gone at once.
func (z *zygote) register(id string) *zygoteCall {
	c := &zygoteCall{start: make(chan zygoteEvent, 1), done: make(chan struct{})}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.calls == nil {
		c.gone = true
		close(c.done)
		return c
	}
	z.calls[id] = c
	return c
}

func (z *zygote) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	z.inMu.Lock()
	defer z.inMu.Unlock()
	if z.in == nil {
		return errZygoteDied
	}
	_, err = z.in.Write(append(b, '\n'))
	return err
}

// stop closes the zygote's stdin (it kills its children and exits) and
// waits for it, killing it when it does not exit in time.
func (z *zygote) stop() error {
	z.inMu.Lock()
	if z.in != nil {
		z.in.Close()
		z.in = nil
	}
	z.inMu.Unlock()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-z.dead:
		return nil
	case <-t.C:
	}
	select {
	case <-z.exited:
	default:
		signalGroup(z.pid, syscall.SIGKILL)
	}
	t.Reset(killWait)
	select {
	case <-z.dead:
		return nil
	case <-t.C:
		return fmt.Errorf("replay: the torch zygote (pid %d) did not exit", z.pid)
	}
}

func (t *torchBackend) newID() string {
	t.idMu.Lock()
	defer t.idMu.Unlock()
	t.nextID++
	return strconv.FormatUint(t.nextID, 10)
}

// maxInlinePlan is the largest plan a zygote request carries itself: the
// zygote writes the request into a pipe its child reads once its device is
// initialized, and a pipe holds 64 KiB without waiting. A larger plan (the
// ids of many samples, many elements set) travels as planFile in the run
// directory: a description of the candidate, not the candidate.
const maxInlinePlan = 48 << 10

// planFile is the name of a large plan's file in the run directory.
const planFile = "plan.json"

// zygoteInput is the candidate of one zygote request: a plan the child
// builds it from (the torch backend's), or the writer of the file it is
// written into (data: the exec backend's command reads a file).
type zygoteInput struct {
	data func(io.Writer) error
	plan json.RawMessage
}

func (t *torchBackend) replayZygote(ctx context.Context, data zygoteInput, start time.Time) (Verdict, error) {
	slot, err := t.pool.take(ctx)
	if err != nil {
		v := Verdict{Backend: t.verdictKind(), Device: t.device, Zygote: true,
			Result:    Result{ExitCode: -1, Canceled: true, Err: err},
			Signature: signature.Signature{Family: signature.FamilyInfra, Expression: "canceled"}, Duration: time.Since(start)}
		v.Exit = exitInfo(v.Result)
		return v, err
	}
	defer t.pool.put(slot)
	v, retry, err := t.zygoteOnce(ctx, slot, data, start)
	if retry && err == nil && ctx.Err() == nil {
		v, _, err = t.zygoteOnce(ctx, slot, data, start)
		v.Retried = true
	}
	return v, err
}

// zygoteChild is a child the zygote forked for one request, as the
// supervisor sees it. Its call's done is closed when the zygote reported
// its exit (it reaped the child and killed what was left of its group
// first), or when the zygote died and the child is gone.
type zygoteChild struct {
	c      *zygoteCall
	leader int
}

func (k zygoteChild) pid() int { return k.leader }

func (k zygoteChild) exited() <-chan struct{} { return k.c.done }

func (k zygoteChild) interrupt() bool {
	signalGroup(k.leader, syscall.SIGINT)
	return true
}

func (k zygoteChild) kill() { signalGroup(k.leader, syscall.SIGKILL) }

func (k zygoteChild) extend(time.Duration) time.Duration { return 0 }

func (k zygoteChild) reap() (exitStatus, error) {
	st := exitStatus{code: -1}
	switch {
	case k.c.gone:
		return st, errZygoteDied
	case k.c.exit.Event != "exit":
		return st, fmt.Errorf("replay: torch zygote: %s", k.c.exit.Error)
	}
	if k.c.exit.Status != nil {
		st.code = *k.c.exit.Status
	}
	st.signal, st.core = syscall.Signal(k.c.exit.Signal), k.c.exit.Core
	return st, nil
}

// zygoteOnce runs the candidate in a child of the zygote in slot. retry
// reports that the zygote died with the candidate's outcome unknown; the
// verdict is then the infra one to give if the retry dies too.
func (t *torchBackend) zygoteOnce(ctx context.Context, slot int, data zygoteInput, start time.Time) (v Verdict, retry bool, err error) {
	v = Verdict{Backend: t.verdictKind(), Device: t.device, Zygote: true}
	t.zmu.Lock()
	z, err := t.zygoteLocked()
	t.zmu.Unlock()
	if err != nil {
		v.Signature = signature.Signature{Family: signature.FamilyInfra, Expression: "torch zygote not started"}
		return v, false, err
	}
	files := &Command{TempDir: true}
	switch {
	case data.plan == nil:
		files.Streams = map[string]func(io.Writer) error{t.program.file: data.data}
	case len(data.plan) > maxInlinePlan:
		files.Files = map[string][]byte{planFile: data.plan}
	}
	dir, err := t.runner.makeRunDir(files)
	if err != nil {
		v.Signature = signature.Signature{Family: signature.FamilyInfra, Expression: "no run directory"}
		return v, false, err
	}
	// The directory is this function's until a child runs the request;
	// then it is the supervisor's.
	handed := false
	defer func() {
		if handed {
			return
		}
		if rerr := removeAll(dir); rerr != nil {
			v.Result.Err = errors.Join(v.Result.Err, rerr)
		}
	}()
	var streams [2]*stream
	var writers [2]*os.File
	var paths [2]string
	for i, name := range []string{"stdout.fifo", "stderr.fifo"} {
		paths[i] = filepath.Join(dir, name)
		var r *os.File
		err := unix.Mkfifo(paths[i], 0o600)
		if err == nil {
			r, err = os.OpenFile(paths[i], os.O_RDONLY|syscall.O_NONBLOCK, 0)
		}
		if err == nil {
			// Held until the child is gone, so that the reader sees no EOF
			// before the child has opened its end.
			if writers[i], err = os.OpenFile(paths[i], os.O_WRONLY, 0); err != nil {
				r.Close()
			}
		}
		if err != nil {
			for j := 0; j < i; j++ {
				writers[j].Close()
				streams[j].stop()
				<-streams[j].done
			}
			v.Signature = signature.Signature{Family: signature.FamilyInfra, Expression: "no output pipes"}
			return v, false, fmt.Errorf("replay: torch backend: output FIFO: %w", err)
		}
		streams[i] = startStream(r, t.runner.captureLimit())
	}
	out := &output{stdout: streams[0], stderr: streams[1], held: writers[:]}
	// died is the verdict of a request whose zygote died before its child
	// exited: res.Err is nil, or says so (errZygoteDied).
	died := func(res Result) (Verdict, bool, error) {
		// Its calls are marked gone just before the zygote counts as dead:
		// waited for, so that the retry starts a new zygote rather than
		// meet this one again (zygoteLocked).
		<-z.dead
		if res.Err == nil {
			res.Err = errZygoteDied
		}
		if tail := z.stderrTail(); tail != "" {
			res.Err = fmt.Errorf("%w; its stderr ends:\n%s", res.Err, tail)
		}
		v.Result, v.Exit = res, exitInfo(res)
		v.Signature = signature.Signature{Family: signature.FamilyInfra, Expression: "torch zygote died"}
		v.Duration = time.Since(start)
		return v, true, nil
	}

	id := t.newID()
	call := z.register(id)
	sent := time.Now()
	req := map[string]any{"id": id, "slot": slot, "stdout": paths[0], "stderr": paths[1], "run_dir": dir}
	switch {
	case data.plan == nil:
		req["path"] = filepath.Join(dir, t.program.file)
	case len(data.plan) > maxInlinePlan:
		req["plan_path"] = filepath.Join(dir, planFile)
	default:
		req["plan"] = data.plan
	}
	if err := z.send(req); err != nil {
		<-z.dead // a write fails only when the zygote is gone
	}
	var pid int
	select {
	case ev := <-call.start:
		pid = ev.PID
	case <-call.done:
		select {
		case ev := <-call.start: // started, and already exited
			pid = ev.PID
		default:
		}
	}
	if pid == 0 {
		res := Result{ExitCode: -1}
		out.collect(&res, t.runner.waitDelay())
		if call.gone {
			return died(res)
		}
		res.Err = fmt.Errorf("replay: torch zygote: %s", call.exit.Error)
		v.Result, v.Exit = res, exitInfo(res)
		v.Signature = signature.Signature{Family: signature.FamilyInfra, Expression: "torch zygote: request refused"}
		v.Duration = time.Since(start)
		return v, false, nil
	}

	handed = true
	res := t.runner.supervise(ctx, supervised{proc: zygoteChild{c: call, leader: pid}, name: "torch child",
		start: sent, timeout: t.runner.timeout(&Command{}), foreign: t.program != nil && t.program.handover == nil, out: out, dir: dir})
	if errors.Is(res.Err, errZygoteDied) && !res.TimedOut && !res.Canceled {
		return died(res)
	}
	v.Result, v.Exit = res, workerExit(KindTorch, t.program == nil, res)
	v.Signature = signature.Parse(res.Stderr, v.Exit)
	if v.Backend == KindTorch {
		v.Report = ParseReport(res.Stdout)
	}
	v.Duration = time.Since(start)
	if res.Canceled {
		return v, false, ctx.Err()
	}
	return v, false, nil
}
