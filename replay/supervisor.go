package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor: the one lifecycle of every replay process, however it was
// started. A starter (Runner.Run execs a program; the torch backend has its
// zygote fork a child; the Slurm launcher has srun submit a job) hands it a
// started process (proc) with its output; from there on the supervisor
// alone decides when to interrupt it (timeout, ctx), escalates from the
// interrupt (SIGINT) to the kill (SIGKILL of its process group), gives up
// on it after killWait, collects its bounded output, removes its per-run
// directory once it is gone, and says what happened in a Result. A proc
// says only what its interrupt, its kill and its reap are.

// killWait is how long the supervisor waits for a process to die after
// SIGKILL before it gives up on it (a process in uninterruptible sleep in a
// GPU driver cannot be killed until the driver lets it go). A variable for
// tests.
var killWait = 10 * time.Second

// proc is a started process as the supervisor sees it: a program of this
// machine (execProc), a child of the torch zygote (zygoteChild), or a Slurm
// job with the srun that submitted it (slurmJob).
type proc interface {
	// pid is the process's id, which is also its process group's id.
	pid() int
	// exited is closed once the process has exited. Until then its pid,
	// the group's id, cannot have been reused, so the supervisor may
	// signal the group (interrupt, kill); once it is closed it never does.
	exited() <-chan struct{}
	// interrupt asks the process to stop, as Ctrl-C would, so that Python
	// prints where it was (SIGINT to its group). It reports false when
	// there was nothing to ask (a Slurm job still in the queue), so that
	// no grace is waited for nothing.
	interrupt() bool
	// kill ends the process (SIGKILL to its group).
	kill()
	// extend says, once the timeout has run out, how much longer the
	// process may run: 0 but for a Slurm job, whose timeout runs from its
	// start, not from its submission.
	extend(timeout time.Duration) time.Duration
	// reap is called once, after exited is closed. It makes sure nothing
	// is left of the process group (SIGKILL while the group's id is still
	// reserved), or of the Slurm job, and says how the process ended. An
	// error means that is unknown.
	reap() (exitStatus, error)
}

// exitStatus is how a process ended.
type exitStatus struct {
	code   int            // the exit status; -1 when killed by a signal
	signal syscall.Signal // the signal that killed it, 0 if none
	core   bool           // the signal dumped a core
}

// execProc is a program started by startProcess.
type execProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startProcess starts cmd as the leader of a new process group that gets
// SIGKILL when the reducer dies (Linux's parent-death signal; its own
// children do not). Its stdio must be *os.File (or nil), so that no
// goroutine of exec's copies them and Wait returns as soon as it is reaped.
//
// The child is started, and waited for, on one locked OS thread: Linux
// sends the parent-death signal when the thread that forked the child
// exits, and a Go thread may exit while the child runs unless it is held
// like this. The thread is blocked in waitid meanwhile anyway.
func startProcess(cmd *exec.Cmd) (*execProc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	p := &execProc{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var err error
		startRegistered(func() int {
			if err = cmd.Start(); err != nil {
				return 0
			}
			return cmd.Process.Pid
		})
		if err != nil {
			started <- err
			return
		}
		started <- nil
		waitExited(cmd.Process.Pid)
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *execProc) pid() int { return p.cmd.Process.Pid }

func (p *execProc) exited() <-chan struct{} { return p.done }

func (p *execProc) interrupt() bool {
	signalGroup(p.pid(), syscall.SIGINT)
	return true
}

func (p *execProc) kill() { signalGroup(p.pid(), syscall.SIGKILL) }

func (p *execProc) extend(time.Duration) time.Duration { return 0 }

// reap kills what is left of the group while the leader is a zombie (so
// that no child it forked outlives it or keeps its output pipes open), and
// only then reaps it.
func (p *execProc) reap() (exitStatus, error) {
	signalGroup(p.pid(), syscall.SIGKILL)
	err := p.cmd.Wait()
	reaped(p.pid())
	st := exitStatus{code: -1}
	ps := p.cmd.ProcessState
	if ps == nil {
		return st, fmt.Errorf("replay: wait %s: %w", p.cmd.Args[0], err)
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		st.code = ps.ExitCode()
	case ws.Exited():
		st.code = ws.ExitStatus()
	case ws.Signaled():
		st.signal, st.core = ws.Signal(), ws.CoreDump()
	}
	return st, nil
}

// waitExited blocks until the process pid has exited, without reaping it:
// while it is a zombie its pid, which is also its process group's id,
// cannot be reused, so the group can be signalled safely.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == syscall.EINTR {
			continue
		}
		return err
	}
}

// signalGroup sends sig to the process group pgid and to its leader (which
// may have left the group).
func signalGroup(pgid int, sig syscall.Signal) {
	syscall.Kill(-pgid, sig)
	syscall.Kill(pgid, sig)
}

// output is a started process's side of the streams: the two captured
// output streams, the standard input being fed, and the write ends the
// starter holds open until the process is gone (the zygote's FIFOs, which
// would read EOF before the child opened its end otherwise).
type output struct {
	stdout, stderr *stream
	stdin          *os.File      // the write end being fed; nil when none
	stdinDone      chan struct{} // closed when feeding ends; nil when none
	held           []*os.File
}

// feed writes data to the process's standard input through w, then closes
// w. A process that exits without reading it all is fine (EPIPE).
func (o *output) feed(w *os.File, data []byte) {
	o.stdin, o.stdinDone = w, make(chan struct{})
	go func() {
		defer close(o.stdinDone)
		w.Write(data)
		w.Close()
	}()
}

// stop makes every reader and the feeder return now, after what is already
// in the pipes.
func (o *output) stop() {
	o.stdout.stop()
	o.stderr.stop()
	if o.stdin != nil {
		o.stdin.SetWriteDeadline(time.Now())
	}
}

// collect closes the held write ends, reads both streams to EOF, which
// comes once every process that holds them is gone, for at most wait, and
// puts the captures in res.
func (o *output) collect(res *Result, wait time.Duration) {
	for _, f := range o.held {
		f.Close()
	}
	t := time.AfterFunc(wait, o.stop)
	<-o.stdout.done
	<-o.stderr.done
	if o.stdinDone != nil {
		<-o.stdinDone
	}
	t.Stop()
	res.Stdout, res.StdoutBytes = o.stdout.c.Bytes(), o.stdout.c.total
	res.Stderr, res.StderrBytes = o.stderr.c.Bytes(), o.stderr.c.total
	res.Truncated = o.stdout.c.truncated() || o.stderr.c.truncated()
}

// readBufs holds the buffers the output readers copy through.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// stream reads one of the child's output pipes into a capture until EOF,
// or until stop makes it give up.
type stream struct {
	f    *os.File
	c    *capture
	done chan struct{}
}

func startStream(f *os.File, limit int) *stream {
	s := &stream{f: f, c: newCapture(limit), done: make(chan struct{})}
	go s.read()
	return s
}

func (s *stream) read() {
	defer close(s.done)
	defer s.f.Close()
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	for {
		n, err := s.f.Read(buf)
		s.c.Write(buf[:n])
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.drain(buf)
		}
		return
	}
}

// drain reads, without blocking, what is already in the pipe when stop set
// the deadline: the last words of a child whose pipe an escaped process
// still holds. At most 1 MiB, so that a process flooding the pipe cannot
// keep it going.
func (s *stream) drain(buf []byte) {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		for left := 1 << 20; left > 0; {
			n, err := syscall.Read(int(fd), buf[:min(len(buf), left)])
			if n <= 0 || err != nil {
				return
			}
			s.c.Write(buf[:n])
			left -= n
		}
	})
}

// stop makes read return: after what is in the pipe now, even if some
// process still holds the write end.
func (s *stream) stop() { s.f.SetReadDeadline(time.Now()) }

// supervised is a started process handed to the supervisor, with what it
// takes over from the starter.
type supervised struct {
	proc
	// name says what runs, in messages: the program, "torch child".
	name string
	// start is when the process was started: Result.Duration runs from it.
	start time.Time
	// timeout bounds the run; 0 means none.
	timeout time.Duration
	// foreign: not one of reduce's workers, so HarnessExitCode is the
	// program's own (Command.Foreign).
	foreign bool
	out     *output
	// dir is the per-run directory, removed once the process is gone;
	// "" when none.
	dir string
}

// supervise watches s until it has exited, interrupting it on timeout or
// when ctx is done, and returns what happened. It returns only when the
// process is dead and reaped, its group has been sent SIGKILL, its output
// is read and its per-run directory removed; or, for a process that
// SIGKILL does not end within killWait, with Result.Err saying so, the
// cleanup then finishing in the background once it dies.
func (r *Runner) supervise(ctx context.Context, s supervised) (res Result) {
	res = Result{ExitCode: -1, Started: true, PID: s.pid()}
	exited := s.exited()
	var timer *time.Timer
	var timeoutC <-chan time.Time
	if s.timeout > 0 {
		timer = time.NewTimer(s.timeout)
		defer timer.Stop()
		timeoutC = timer.C
	}
	interrupted := false
wait:
	for {
		select {
		case <-exited:
		case <-timeoutC:
			if d := s.extend(s.timeout); d > 0 {
				timer.Reset(d)
				continue
			}
			res.TimedOut, interrupted = true, true
		case <-ctx.Done():
			res.Canceled, interrupted = true, true
		}
		break wait
	}
	if interrupted && !r.interrupt(ctx, s.proc, res.TimedOut) {
		res.Duration = time.Since(s.start)
		s.out.stop()
		s.out.collect(&res, 0)
		res.Err = fmt.Errorf("replay: %s (pid %d) did not exit within %v of SIGKILL; abandoned", s.name, res.PID, killWait)
		go func() {
			<-exited
			s.reap()
			if s.dir != "" {
				removeAll(s.dir)
			}
		}()
		return res
	}
	res.Duration = time.Since(s.start)

	st, err := s.reap()
	// The group is dead, and so are the strays that left it (sweep): EOF
	// comes as soon as the killed processes are gone; only one out of
	// reach (re-parented to init, or a replay's without its environment)
	// can hold the pipes longer, for at most the Runner's WaitDelay.
	sweep(s.dir)
	s.out.collect(&res, r.waitDelay())
	res.Err = err
	if s.dir != "" {
		if err := removeAll(s.dir); err != nil {
			res.Err = errors.Join(res.Err, err)
		}
	}
	if err != nil {
		return res
	}
	res.ExitCode, res.Signal, res.CoreDump = st.code, st.signal, st.core
	res.Harness = !s.foreign && !interrupted && res.Signal == 0 && res.ExitCode == HarnessExitCode
	return res
}

// interrupt ends a process the supervisor stopped waiting for: its
// interrupt (SIGINT to its group), and after the Runner's grace (cut short
// when ctx is done during the grace of a timeout, or by a second signal,
// SignalContext) its kill (SIGKILL). It reports false when the process has
// still not exited killWait after the kill.
func (r *Runner) interrupt(ctx context.Context, p proc, timedOut bool) bool {
	exited := p.exited()
	if g := r.grace(); g > 0 && p.interrupt() {
		var cancelC <-chan struct{}
		if timedOut {
			cancelC = ctx.Done() // cancelled during the grace: no more of it
		}
		t := time.NewTimer(g)
		defer t.Stop()
		select {
		case <-exited:
			return true
		case <-t.C:
		case <-cancelC:
		case <-killNow(ctx):
		}
	}
	select {
	case <-exited:
		return true
	default:
	}
	p.kill()
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-exited:
		return true
	case <-t.C:
		return false
	}
}
