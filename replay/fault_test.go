package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/kernels"
)

func TestReturnedLine(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"", false},
		{ReturnedLine + "\n", true},
		{"ok x\nreduce-report: {}\n" + ReturnedLine + "\n", true},
		{"partial" + ReturnedLine + "\n", false},
		{ReturnedLine + "x\n", false},
		{"a\n" + ReturnedLine, true},
		{"a\n" + ReturnedLine + "\r\n", true},
		{"reduce-returnedreduce-returned\n" + ReturnedLine + "\n", true},
	} {
		if got := returned([]byte(tc.out)); got != tc.want {
			t.Errorf("returned(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
}

func TestWorkerFault(t *testing.T) {
	ok := Result{Started: true, ExitCode: 0, Stdout: []byte("ok\n" + ReturnedLine + "\n")}
	early := Result{Started: true, ExitCode: 0, Stdout: []byte("halfway\n")}
	oom := Result{Started: true, ExitCode: 2, Stderr: []byte("fatal error: runtime: out of memory\n\nruntime stack:\nruntime.throw(...)\n")}
	for _, tc := range []struct {
		name   string
		kind   Kind
		worker bool
		res    Result
		want   string
	}{
		{"passed", KindTorch, true, ok, ""},
		{"exit 0 halfway", KindTorch, true, early, "worker fault: exited 0 before the step returned"},
		{"go exit 0 halfway", KindGo, true, early, "worker fault: exited 0 before the step returned"},
		{"the user's command", KindExec, false, early, ""},
		{"go runtime", KindGo, true, oom, "worker fault: the go worker died: fatal error: runtime: out of memory"},
		{"torch exit 2 is the step's", KindTorch, true, oom, ""},
		{"timed out", KindTorch, true, Result{Started: true, TimedOut: true}, ""},
		{"killed", KindTorch, true, Result{Started: true, ExitCode: -1, Signal: syscall.SIGKILL}, ""},
	} {
		got := workerFault(tc.kind, tc.worker, tc.res)
		if got != tc.want {
			t.Errorf("%s: workerFault = %q, want %q", tc.name, got, tc.want)
		}
		e := workerExit(tc.kind, tc.worker, tc.res)
		if s := signature.Parse(tc.res.Stderr, e); (got != "") != (s.Family == signature.FamilyInfra && s.Expression == got) {
			t.Errorf("%s: signature %v for fault %q", tc.name, s, got)
		}
	}
}

// expanded is a batch of cross_entropy whose input is one float viewed as
// [3, classes] (strides 0): 4 bytes of storage, 12·classes bytes built.
func expanded(classes int64) *fixtures.Batch {
	target := &kernels.Tensor{DType: kernels.Int64, Shape: []int64{3}, Strides: []int64{1}, Data: make([]byte, 24)}
	input := &kernels.Tensor{DType: kernels.Float32, Shape: []int64{3, classes}, Strides: []int64{0, 0}, Data: make([]byte, 4)}
	return &fixtures.Batch{Op: "cross_entropy", Samples: 3, Attrs: map[string]any{},
		Tensors: []*fixtures.Entry{{Name: "input", BatchDim: fixtures.Dim(0), Tensor: input}, {Name: "target", BatchDim: fixtures.Dim(0), Tensor: target}}}
}

// A view that repeats one element 3·2**40 times is refused by New, with
// the numbers and the flag, before any replay: its storage is 4 bytes.
func TestNewRefusesViewsTooLargeToBuild(t *testing.T) {
	b := expanded(1 << 40)
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	o := goOptions(t, "cpu")
	o.Batch = b
	be, err := New(o)
	if err == nil {
		be.Close()
		t.Fatal("New: no error for a view of 3·2**40 elements")
	}
	msg := err.Error()
	for _, want := range []string{strconv.FormatInt(3<<40+3, 10) + " elements", strconv.FormatInt(12<<40+24, 10) + " bytes",
		strconv.FormatInt(fixtures.DefaultMaxSize, 10), "--max-size", `tensor "input"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("New: %q lacks %q", msg, want)
		}
	}
	if !errors.Is(err, fixtures.ErrLimit) || strings.Contains(msg, "\n") {
		t.Errorf("New: %v: want one line, an ErrLimit", err)
	}
	// Within a limit raised past it, or on another backend, it is not refused here.
	o.MaxSize = 16 << 40
	if be, err := New(o); err != nil {
		t.Errorf("New with --max-size 16TiB: %v", err)
	} else {
		be.Close()
	}
}

// The worker refuses a candidate past its --max-size before the op runs: a
// harness failure, never the worker's death.
func TestWorkerRefusesViewsTooLargeToBuild(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := fixtures.Write(path, expanded(1<<26)); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Worker([]string{"--max-size", strconv.Itoa(1 << 20), path}, nil, &out, &errb, nil)
	if code != HarnessExitCode || !strings.Contains(errb.String(), fmt.Sprintf("%d elements", 3<<26+3)) ||
		!strings.Contains(errb.String(), "--max-size") {
		t.Errorf("worker: exit %d, stderr %q", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := Worker([]string{path}, nil, &out, &errb, nil); code != 0 || !returned(out.Bytes()) {
		t.Errorf("worker within the limit: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// The go worker killed by its own runtime (out of memory under a limit on
// its address space) is a harness fault, never a failure signature.
func TestGoWorkerDeathIsInfra(t *testing.T) {
	if raceEnabled {
		// The worker is this test binary: under the race detector its
		// runtime cannot start in 1 GiB. make test runs it without
		// (test-go-torch2).
		t.Skip("the race detector's runtime needs more than the 1 GiB of address space this test allows")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "worker.sh")
	// 1 GiB of address space: the Go runtime's own reservations fit, the
	// 3·2**26 floats the op builds from its expanded input do not.
	script := "#!/bin/sh\nulimit -v 1048576\nexec " + strconv.Quote(exe) + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := goOptions(t, "cpu")
	o.Exe = wrapper
	o.Env = append(o.Env, "GOGC=off")
	be := newBackend(t, o, expanded(1<<28))
	v := replayOK(t, be, whole)
	if v.Signature.Family != signature.FamilyInfra || !strings.HasPrefix(v.Signature.Expression, "worker fault: the go worker died") {
		t.Errorf("verdict %v (exit %d)\nstderr %.600s", v.Signature, v.Result.ExitCode, v.Result.Stderr)
	}
	if testing.Verbose() {
		t.Logf("%v in %v\n%.300s", v.Signature, v.Result.Duration, v.Result.Stderr)
	}
}

// A step that ends its process with status 0 halfway is no pass; the
// same step returning is.
func TestTorchExitBeforeReturnIsInfra(t *testing.T) {
	t.Parallel()
	for _, noZygote := range []bool{false, true} {
		o := torchOptions(t, t.TempDir())
		o.Entry = filepath.Join(entryDir(t), "faults.py") + ":run"
		o.NoZygote = noZygote
		base := exampleBatch(t, "four_class_targets")
		be := newBackend(t, o, base)
		v := replayBatch(t, be, withMeta(base, "fault", "exit0"), whole)
		if v.Result.ExitCode != 0 || v.Signature.Family != signature.FamilyInfra ||
			v.Signature.Expression != "worker fault: exited 0 before the step returned" || v.Exit.Fault == "" {
			t.Errorf("no zygote %v: os._exit(0) in the step: %v (exit %d)\nstdout %q", noZygote, v.Signature, v.Result.ExitCode, v.Result.Stdout)
		}
		if v := replayBatch(t, be, withMeta(base, "fault", "pass"), whole); v.Signature.Family != signature.FamilyPass {
			t.Errorf("no zygote %v: a step that returns: %v\nstdout %q", noZygote, v.Signature, v.Result.Stdout)
		}
	}
}

// A replay's grandchild in a session of its own (setsid), holding the
// output pipes and sleeping 100 s, is killed when its replay ends: with
// the zygote, without it, and under the exec backend's command.
func TestStrayGrandchildKilled(t *testing.T) {
	t.Parallel()
	base := exampleBatch(t, "four_class_targets")
	check := func(name string, v Verdict) {
		t.Helper()
		var pid int
		fmt.Sscanf(string(v.Result.Stdout[bytes.Index(v.Result.Stdout, []byte("escaped ")):]), "escaped %d", &pid)
		if pid <= 0 {
			t.Errorf("%s: no grandchild: %v\nstdout %q\nstderr %s", name, v.Signature, v.Result.Stdout, v.Result.Stderr)
			return
		}
		if !processGone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("%s: grandchild %d survives its replay", name, pid)
		}
		if v.Signature.Family != signature.FamilyPass {
			t.Errorf("%s: %v", name, v.Signature)
		}
	}
	for _, noZygote := range []bool{false, true} {
		o := torchOptions(t, t.TempDir())
		o.Entry = filepath.Join(entryDir(t), "faults.py") + ":run"
		o.NoZygote = noZygote
		be := newBackend(t, o, base)
		check(fmt.Sprintf("torch, no zygote %v", noZygote), replayBatch(t, be, withMeta(base, "fault", "escape"), whole))
	}
	be := newBackend(t, Options{Kind: KindExec, TempRoot: t.TempDir(),
		Replay: `sh -c 'setsid sleep 100 & echo "escaped $!"; true {batch}'`}, base)
	check("exec", replayOK(t, be, whole))
}

// The Runner kills a grandchild that left the group and holds the pipes,
// and does not wait for their EOF: with an hour's WaitDelay the test ends.
func TestRunnerKillsEscapedGrandchild(t *testing.T) {
	if !subreaper() {
		t.Skip("no PR_SET_CHILD_SUBREAPER here")
	}
	r := &Runner{Timeout: time.Minute, WaitDelay: time.Hour, TempRoot: t.TempDir()}
	pidFile := filepath.Join(t.TempDir(), "gc.pid")
	res := r.Run(context.Background(), Command{Path: "sh", TempDir: true, Args: []string{"-c",
		`setsid sh -c 'echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 100' "$PIDFILE" &
		 while [ ! -s "$PIDFILE" ]; do sleep 0.01; done; echo leader done`}, Env: []string{"PIDFILE=" + pidFile}})
	if res.Err != nil || res.ExitCode != 0 || !bytes.Contains(res.Stdout, []byte("leader done")) {
		t.Fatalf("run: %s", describe(res))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	gc, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if gc <= 0 || !processGone(gc) {
		syscall.Kill(gc, syscall.SIGKILL)
		t.Errorf("grandchild %q survives", b)
	}
}

// A process of reduce's that is no replay's (no REDUCE_REPLAY, no run
// directory) is never a stray, even re-parented to reduce.
func TestSweepSparesOthers(t *testing.T) {
	if !subreaper() {
		t.Skip("no PR_SET_CHILD_SUBREAPER here")
	}
	cmd := exec.Command("sh", "-c", `setsid sleep 100 >/dev/null 2>&1 & echo $!`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	defer func() {
		syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}()
	sweep("")
	if processGone(pid) {
		t.Errorf("sweep killed %d, a process of no replay", pid)
	}
}

// Directories of a run killed by SIGKILL are removed by the next New; a
// live run's are left alone.
func TestNewRemovesStaleDirectories(t *testing.T) {
	root := t.TempDir()
	child := exec.Command("sleep", "100")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	tag := strconv.Itoa(child.Process.Pid) + "." + procStart(t, child.Process.Pid)
	var stale []string
	for _, p := range fixtures.TempPrefixes {
		d := filepath.Join(root, p+tag+"-123")
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, d)
	}
	live, err := fixtures.MkdirOwned(root, "reduce-run-")
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, "reduce-run-unowned")
	os.Mkdir(other, 0o700)
	// While its owner runs, nothing is removed.
	o := goOptions(t, "cpu")
	o.TempRoot = root
	newBackend(t, o, exampleBatch(t, "four_class_targets"))
	for _, d := range stale {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s of a live owner: %v", d, err)
		}
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	newBackend(t, o, exampleBatch(t, "four_class_targets"))
	for _, d := range stale {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s of a killed owner: %v", d, err)
		}
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
}

// procStart is a process's start time field from /proc/PID/stat.
func procStart(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Skip("no /proc")
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))[19]
}
