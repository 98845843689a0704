package replay

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stuckProc is a real process that, as far as the supervisor can tell,
// SIGKILL does not end (as one stuck in a GPU driver): it counts as exited
// only once the test releases it and it has really exited.
type stuckProc struct {
	*execProc
	release, done chan struct{}
}

func newStuckProc(p *execProc) *stuckProc {
	s := &stuckProc{execProc: p, release: make(chan struct{}), done: make(chan struct{})}
	go func() {
		<-s.release
		<-p.exited()
		close(s.done)
	}()
	return s
}

func (s *stuckProc) exited() <-chan struct{} { return s.done }

// A process that outlives killWait after SIGKILL is abandoned: supervise
// returns with Result.Err saying so and what it had printed, and its run
// directory is removed, and it reaped, only once it has exited. The same
// holds for a zygote's child, which goes through the same supervise.
func TestSuperviseAbandons(t *testing.T) {
	defer func(d time.Duration) { killWait = d }(killWait)
	killWait = 200 * time.Millisecond
	r, root := faultRunner(t, testShort)
	// The timeout runs from the child's "worker: hanging" on: a child
	// slow to start (a race build on a loaded machine) would otherwise be
	// abandoned before it printed the line the test looks for.
	readyFile := filepath.Join(t.TempDir(), "ready")
	c := faultCmd(t, "hang", readyEnv+"="+readyFile)
	dir, err := r.makeRunDir(&c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = MergeEnv(os.Environ(), c.Env)
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	start := time.Now()
	p, err := startProcess(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		t.Fatal(err)
	}
	stuck := newStuckProc(p)
	for i := 0; ; i++ {
		if _, err := os.Stat(readyFile); err == nil {
			break
		}
		if i == int(testLong/(10*time.Millisecond)) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("the child did not start within %v", testLong)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := &output{stdout: startStream(outR, 1<<10), stderr: startStream(errR, 1<<10)}
	res := r.supervise(context.Background(), supervised{proc: stuck, name: "stuck", start: start,
		timeout: testShort, out: out, dir: dir})
	if !res.TimedOut || res.Err == nil || !strings.Contains(res.Err.Error(), "abandoned") || res.ExitCode != -1 {
		t.Fatalf("want abandoned after a timeout: %s", describe(res))
	}
	if res.Duration < testShort+testGrace+killWait {
		t.Errorf("abandoned after %v, before timeout + grace + killWait", res.Duration)
	}
	if !strings.Contains(string(res.Stderr), "worker: hanging") {
		t.Errorf("the abandoned process's output was lost: %s", describe(res))
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the run directory of a process not known to have exited was removed: %v", err)
	}
	close(stuck.release) // it had died of the SIGKILL after all
	for i := 0; ; i++ {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if i == 500 {
			t.Fatalf("the run directory %s is still there after the process exited", dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; syscall.Kill(res.PID, 0) == nil; i++ { // reaped: no zombie either
		if i == 500 {
			t.Fatalf("pid %d not reaped", res.PID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	assertEmpty(t, root)
}
