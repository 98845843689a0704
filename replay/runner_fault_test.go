package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The fault tests run one misbehaving child each (runner_child_test.go) and
// check three things: the Result classifies it right, no process of its
// group is left running, and no file is left under TempRoot.

// Short limits for the tests: a fault that should not time out gets a long
// timeout (its child must never be interrupted, however slow the machine);
// one that hangs gets a short one.
const (
	testLong  = 30 * time.Second
	testShort = 300 * time.Millisecond
	testGrace = 200 * time.Millisecond
)

// faultRunner returns a Runner with its own TempRoot.
func faultRunner(t *testing.T, timeout time.Duration) (*Runner, string) {
	t.Helper()
	root := t.TempDir()
	return &Runner{Timeout: timeout, Grace: testGrace, WaitDelay: testLong, TempRoot: root}, root
}

// faultCmd runs this test binary as the child with behaviour fault, in a
// per-run directory holding a candidate file.
func faultCmd(t *testing.T, fault string, env ...string) Command {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Command{
		Path: exe,
		Args: []string{"-test.run=^$"},
		// GORACE: a race-enabled child would sleep 1 s at exit 0.
		Env:   append([]string{faultEnv + "=" + fault, "GORACE=atexit_sleep_ms=0"}, env...),
		Files: map[string][]byte{"candidate.bin": []byte("candidate")},
	}
}

// procStat is a process's state and process group from /proc/PID/stat.
func procStat(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, 0, false
	}
	pgrp, _ = strconv.Atoi(f[2])
	return f[0][0], pgrp, true
}

// alive reports whether pid is a live process. A zombie is dead: this
// machine's init does not reap orphans, so a killed grandchild may linger
// as one.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	st, _, ok := procStat(pid)
	return ok && st != 'Z' && st != 'X'
}

// groupLive lists the live processes of process group pgid.
func groupLive(pgid int) []int {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, pg, ok := procStat(pid); ok && pg == pgid && st != 'Z' && st != 'X' {
			live = append(live, pid)
		}
	}
	return live
}

// assertGone fails unless every process of group pgid is dead. A process
// SIGKILL'ed a moment ago may still be exiting, so it polls for a while.
func assertGone(t *testing.T, pgid int) {
	t.Helper()
	if pgid <= 0 {
		t.Fatalf("no process group (pid %d)", pgid)
	}
	var live []int
	for range 200 {
		if live = groupLive(pgid); live == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("process group %d still has live processes %v", pgid, live)
}

// assertEmpty fails unless dir is empty.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Errorf("left in %s: %v", dir, names)
	}
}

// assertClean is assertGone and assertEmpty.
func assertClean(t *testing.T, res Result, root string) {
	t.Helper()
	if !res.Started {
		t.Fatalf("not started: %v", res.Err)
	}
	assertGone(t, res.PID)
	assertEmpty(t, root)
}

func describe(res Result) string {
	return fmt.Sprintf("exit %d signal %v timedout %v canceled %v harness %v err %v\nstderr (%d bytes): %.2000q",
		res.ExitCode, res.Signal, res.TimedOut, res.Canceled, res.Harness, res.Err, res.StderrBytes, res.Stderr)
}

func TestFaultHang(t *testing.T) {
	r, root := faultRunner(t, testShort)
	res := r.Run(context.Background(), faultCmd(t, "hang"))
	if res.Err != nil || !res.TimedOut || res.Canceled || res.Harness {
		t.Fatalf("want a timeout: %s", describe(res))
	}
	// The Go child dies by the first SIGINT (Python's would raise
	// KeyboardInterrupt); SIGKILL is never needed.
	if res.Signal != syscall.SIGINT || res.ExitCode != -1 {
		t.Errorf("want killed by SIGINT: %s", describe(res))
	}
	if res.Duration < testShort {
		t.Errorf("Duration %v < timeout %v", res.Duration, testShort)
	}
	assertClean(t, res, root)
}

func TestFaultIgnoreSIGINT(t *testing.T) {
	// The child prints its line once it ignores SIGINT. If the timeout
	// came before that (a slow start), the child died by SIGINT without
	// printing it: the run says nothing about the Runner, so it is tried
	// again with a longer timeout.
	timeout := testShort
	for try := 0; ; try++ {
		r, root := faultRunner(t, timeout)
		res := r.Run(context.Background(), faultCmd(t, "ignore-int"))
		if !bytes.Contains(res.Stderr, []byte("worker: ignoring SIGINT")) && res.Signal == syscall.SIGINT && try < 5 {
			t.Logf("the timeout came before the child ignored SIGINT; again with %v", 2*timeout)
			timeout *= 2
			continue
		}
		if res.Err != nil || !res.TimedOut || res.Harness {
			t.Fatalf("want a timeout: %s", describe(res))
		}
		if res.Signal != syscall.SIGKILL || res.ExitCode != -1 {
			t.Errorf("want killed by SIGKILL after the grace: %s", describe(res))
		}
		if res.Duration < timeout+testGrace {
			t.Errorf("Duration %v < timeout + grace %v: SIGKILL came early", res.Duration, timeout+testGrace)
		}
		assertClean(t, res, root)
		return
	}
}

func TestFaultSegfault(t *testing.T) {
	r, root := faultRunner(t, testLong)
	res := r.Run(context.Background(), faultCmd(t, "segv"))
	if res.Err != nil || res.Signal != syscall.SIGSEGV || res.ExitCode != -1 || res.TimedOut || res.Harness {
		t.Fatalf("want killed by SIGSEGV: %s", describe(res))
	}
	if res.CoreDump {
		t.Errorf("core dumped despite RLIMIT_CORE 0")
	}
	if string(res.Stderr) != "worker: about to segfault\n" {
		t.Errorf("stderr %q", res.Stderr)
	}
	assertClean(t, res, root)
}

func TestFaultAbort(t *testing.T) {
	r, root := faultRunner(t, testLong)
	res := r.Run(context.Background(), faultCmd(t, "abort"))
	if res.Err != nil || res.Signal != syscall.SIGABRT || res.ExitCode != -1 || res.TimedOut || res.Harness {
		t.Fatalf("want killed by SIGABRT: %s", describe(res))
	}
	for _, want := range []string{"terminate called after throwing", "SIGABRT: abort"} {
		if !bytes.Contains(res.Stderr, []byte(want)) {
			t.Errorf("stderr lacks %q: %s", want, describe(res))
		}
	}
	assertClean(t, res, root)
}

func TestFaultExitNonzero(t *testing.T) {
	r, root := faultRunner(t, testLong)
	res := r.Run(context.Background(), faultCmd(t, "exit1"))
	if res.Err != nil || res.ExitCode != 1 || res.Signal != 0 || res.TimedOut || res.Harness {
		t.Fatalf("want exit 1: %s", describe(res))
	}
	if !bytes.HasSuffix(res.Stderr, []byte("RuntimeError: boom\n")) {
		t.Errorf("stderr %q", res.Stderr)
	}
	assertClean(t, res, root)
}

func TestFaultGarbage(t *testing.T) {
	r, root := faultRunner(t, testLong)
	res := r.Run(context.Background(), faultCmd(t, "garbage"))
	if res.Err != nil || res.ExitCode != 0 || res.Signal != 0 || res.TimedOut || res.Harness {
		t.Fatalf("want exit 0: %s", describe(res))
	}
	if res.Truncated {
		t.Errorf("truncated under the limit")
	}
	if !bytes.Equal(res.Stdout, junk(1, 64<<10)) {
		t.Errorf("stdout: %d bytes, not the junk written", len(res.Stdout))
	}
	if !bytes.Equal(res.Stderr, junk(2, 48<<10)) {
		t.Errorf("stderr: %d bytes, not the junk written", len(res.Stderr))
	}
	assertClean(t, res, root)
}

func TestFaultFlood(t *testing.T) {
	r, root := faultRunner(t, testLong)
	cmd := faultCmd(t, "flood")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := r.Run(context.Background(), cmd)
	runtime.ReadMemStats(&after)

	if res.Err != nil || res.ExitCode != 0 || res.Signal != 0 || res.TimedOut {
		t.Fatalf("want exit 0: %s", describe(res))
	}
	if !res.Truncated {
		t.Errorf("not truncated")
	}
	// Memory: the reducer allocated a few MiB for 208 MiB of output.
	const bound = 12 << 20
	if grew := after.TotalAlloc - before.TotalAlloc; grew > bound {
		t.Errorf("Run allocated %d bytes for %d bytes of output; want < %d", grew, floodStderr+floodStdout, bound)
	} else {
		t.Logf("Run allocated %.1f MiB for %d MiB of output", float64(grew)/(1<<20), (floodStderr+floodStdout)>>20)
	}

	check := func(name string, got []byte, total int64, n int64) {
		t.Helper()
		if total != n {
			t.Errorf("%s: counted %d bytes, want %d", name, total, n)
		}
		half := int64(DefaultCaptureLimit / 2)
		want := floodBytes(0, half, n)
		want = append(want, elidedMarker(n-2*half)...)
		want = append(want, floodBytes(n-half, n, n)...)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, not the head, marker and tail (%d bytes); starts %.40q ends %.40q",
				name, len(got), len(want), got, got[max(0, len(got)-40):])
		}
		if !bytes.HasPrefix(got, []byte(floodHead)) || !bytes.HasSuffix(got, []byte(floodTail)) {
			t.Errorf("%s: head or tail marker missing", name)
		}
		if !bytes.Contains(got, []byte(fmt.Sprintf("... [%d bytes elided] ...", n-2*half))) {
			t.Errorf("%s: no elided marker", name)
		}
	}
	check("stderr", res.Stderr, res.StderrBytes, floodStderr)
	check("stdout", res.Stdout, res.StdoutBytes, floodStdout)
	assertClean(t, res, root)
}

func TestFaultForkedChild(t *testing.T) {
	r, root := faultRunner(t, testLong)
	r.WaitDelay = testLong // returning before it proves the group kill worked
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	start := time.Now()
	res := r.Run(context.Background(), faultCmd(t, "fork", pidFileEnv+"="+pidFile))
	elapsed := time.Since(start)
	if res.Err != nil || res.ExitCode != 0 || res.Signal != 0 || res.TimedOut {
		t.Fatalf("want exit 0: %s", describe(res))
	}
	if elapsed >= testLong {
		t.Errorf("Run took %v: it waited out WaitDelay for the grandchild's pipe", elapsed)
	}
	if !bytes.Contains(res.Stdout, []byte("worker: leader done")) {
		t.Errorf("stdout %q", res.Stdout)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	gc, _ := strconv.Atoi(string(b))
	if gc <= 0 || gc == res.PID {
		t.Fatalf("grandchild pid %q", b)
	}
	for i := 0; alive(gc); i++ {
		if i == 200 {
			t.Fatalf("grandchild %d still alive", gc)
		}
		time.Sleep(10 * time.Millisecond)
	}
	assertClean(t, res, root)
}

func TestFaultEscapedGrandchild(t *testing.T) {
	// A grandchild that leaves the group (setsid) cannot be killed through
	// it; re-parented to the Runner's process (a child subreaper) when the
	// leader exits, it is killed then (sweep), and its pipes close: with
	// WaitDelay an hour, Run returns all the same.
	if !subreaper() {
		t.Skip("no PR_SET_CHILD_SUBREAPER here")
	}
	r, root := faultRunner(t, testLong)
	r.WaitDelay = time.Hour
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	res := r.Run(context.Background(), faultCmd(t, "escape", pidFileEnv+"="+pidFile))
	gc := 0
	if b, err := os.ReadFile(pidFile); err == nil {
		gc, _ = strconv.Atoi(string(b))
	}
	if res.Err != nil || res.ExitCode != 0 || res.Signal != 0 || res.TimedOut {
		t.Fatalf("want exit 0: %s", describe(res))
	}
	if gc <= 0 || !processGone(gc) {
		if gc > 0 {
			syscall.Kill(gc, syscall.SIGKILL)
		}
		t.Errorf("grandchild %d survives its run", gc)
	}
	if !bytes.Contains(res.Stdout, []byte("worker: leader done")) {
		t.Errorf("the leader's last output was lost: %q", res.Stdout)
	}
	assertClean(t, res, root)
}

func TestFaultHarness(t *testing.T) {
	r, root := faultRunner(t, testLong)
	cmd := faultCmd(t, "harness")
	cmd.Files = nil // the worker cannot load its candidate
	cmd.TempDir = true
	res := r.Run(context.Background(), cmd)
	if res.Err != nil || res.ExitCode != HarnessExitCode || !res.Harness || res.Signal != 0 || res.TimedOut {
		t.Fatalf("want a harness failure: %s", describe(res))
	}
	if !bytes.Contains(res.Stderr, []byte("cannot load candidate")) {
		t.Errorf("stderr %q", res.Stderr)
	}
	assertClean(t, res, root)

	// The same exit status from a user's program is its own.
	cmd.Foreign = true
	res = r.Run(context.Background(), cmd)
	if res.ExitCode != HarnessExitCode || res.Harness {
		t.Errorf("foreign command: %s", describe(res))
	}
	assertClean(t, res, root)

	// With its candidate it runs.
	cmd = faultCmd(t, "harness")
	res = r.Run(context.Background(), cmd)
	if res.ExitCode != 0 || res.Harness {
		t.Errorf("with a candidate: %s", describe(res))
	}
	assertClean(t, res, root)
}
