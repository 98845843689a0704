package replay

// The fault-injection children. The test binary re-executes itself with
// REPLAY_FAULT naming a behaviour; init runs it before the testing package
// starts (an init, not a TestMain, so that no other test file of the
// package has to share one) and exits.

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

const (
	faultEnv   = "REPLAY_FAULT"
	readyEnv   = "REPLAY_READY"   // file a child creates once it is in place
	pidFileEnv = "REPLAY_PIDFILE" // file a grandchild writes its pid to
	lockDirEnv = "REPLAY_LOCKS"   // pool children: directory of lock files
	jobsEnv    = "REPLAY_JOBS"    // pool children: the most that may run
	releaseEnv = "REPLAY_RELEASE" // pool children: wait for this file
)

// Sizes of the flood child's streams.
const (
	floodStderr = 200 << 20
	floodStdout = 8 << 20
)

func init() {
	if f := os.Getenv(faultEnv); f != "" {
		os.Exit(runChild(f))
	}
}

func runChild(fault string) int {
	// No core files from the crashing children, wherever the test runs.
	syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	litter(fault)
	switch fault {
	case "hang":
		fmt.Fprintln(os.Stderr, "worker: hanging")
		ready()
		time.Sleep(time.Hour)
	case "ignore-int":
		signal.Ignore(os.Interrupt)
		fmt.Fprintln(os.Stderr, "worker: ignoring SIGINT")
		ready()
		time.Sleep(time.Hour)
	case "segv":
		fmt.Fprintln(os.Stderr, "worker: about to segfault")
		dieBy(syscall.SIGSEGV)
	case "abort":
		// As a C++ abort() after a message: the Go runtime prints its
		// goroutine dump and, with traceback "crash", dies by SIGABRT.
		debug.SetTraceback("crash")
		fmt.Fprintln(os.Stderr, "terminate called after throwing an instance of 'c10::Error'")
		syscall.Kill(syscall.Getpid(), syscall.SIGABRT)
		time.Sleep(time.Hour)
	case "garbage":
		os.Stdout.Write(junk(1, 64<<10))
		os.Stderr.Write(junk(2, 48<<10))
		return 0
	case "flood":
		writeFlood(os.Stdout, floodStdout)
		writeFlood(os.Stderr, floodStderr)
		return 0
	case "fork", "escape":
		return forkLinger(fault == "escape")
	case "linger":
		// The grandchild: holds the inherited stdout and stderr open.
		writeFileAtomic(os.Getenv(pidFileEnv), strconv.Itoa(os.Getpid()))
		time.Sleep(time.Hour)
	case "harness":
		if _, err := os.ReadFile(filepath.Join(os.Getenv(RunDirEnv), "candidate.bin")); err != nil {
			fmt.Fprintf(os.Stderr, "reduce-worker: harness: cannot load candidate: %v\n", err)
			return HarnessExitCode
		}
		return 0
	case "exit1":
		fmt.Fprint(os.Stderr, "Traceback (most recent call last):\n  File \"w.py\", line 1, in <module>\nRuntimeError: boom\n")
		return 1
	case "env":
		fmt.Print(strings.Join(os.Environ(), "\n"))
		wd, _ := os.Getwd()
		fmt.Fprintf(os.Stderr, "args=%q\nwd=%s\n", os.Args[1:], wd)
		return 0
	case "cat":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			return 3
		}
		return 0
	case "ignore-stdin":
		return 0
	case "chmod":
		d := filepath.Join(os.Getenv(RunDirEnv), "locked")
		os.Mkdir(d, 0o700)
		os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o600)
		os.Chmod(d, 0)
		return 0
	case "pool":
		return poolChild()
	}
	fmt.Fprintf(os.Stderr, "unknown %s %q\n", faultEnv, fault)
	return 99
}

// litter leaves files in the per-run directory, nested ones too, and in
// $TMPDIR, for the tests to check that the Runner removes them all.
func litter(fault string) {
	d := os.Getenv(RunDirEnv)
	if d == "" {
		return
	}
	os.WriteFile(filepath.Join(d, "left-by-"+fault), []byte(fault), 0o600)
	sub := filepath.Join(d, "sub", "deeper")
	os.MkdirAll(sub, 0o700)
	os.WriteFile(filepath.Join(sub, "f"), []byte(fault), 0o600)
	if f, err := os.CreateTemp("", "child-tmp-*"); err == nil {
		f.Close()
	}
}

func ready() {
	if p := os.Getenv(readyEnv); p != "" {
		writeFileAtomic(p, strconv.Itoa(os.Getpid()))
	}
}

func writeFileAtomic(path, s string) {
	tmp := path + ".tmp"
	os.WriteFile(tmp, []byte(s), 0o600)
	os.Rename(tmp, path)
}

// dieBy kills the process by sig with the default action, as an
// uncaught signal kills a C program. The Go runtime turns SIGSEGV into a
// panic or a throw and never dies by it, and signal.Reset leaves the
// runtime's handler in place, so the handler is reset to SIG_DFL with
// rt_sigaction itself (the kernel's struct sigaction is handler, flags,
// restorer, mask on amd64 and arm64); elsewhere a shell does it.
func dieBy(sig syscall.Signal) {
	switch runtime.GOARCH {
	case "amd64", "arm64":
		var sa struct {
			handler  uintptr // SIG_DFL
			flags    uint64
			restorer uintptr
			mask     uint64
		}
		syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
		syscall.Kill(syscall.Getpid(), sig)
		time.Sleep(time.Second)
	}
	sh, _ := exec.LookPath("sh")
	name := strings.TrimPrefix(strings.ToUpper(sigName(sig)), "SIG")
	syscall.Exec(sh, []string{"sh", "-c", "kill -" + name + " $$"}, os.Environ())
	os.Exit(98)
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return strconv.Itoa(int(sig))
}

// junk is n bytes of binary garbage (NULs, invalid UTF-8, escapes), the
// same for the same seed.
func junk(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

// The flood streams: "HEAD-MARKER\n", then letters in 80-column lines,
// then "TAIL-MARKER\n", n bytes in all. floodAt gives the byte at offset i.
const (
	floodHead = "HEAD-MARKER\n"
	floodTail = "TAIL-MARKER\n"
)

func floodFiller(j int64) byte {
	if j%80 == 79 {
		return '\n'
	}
	return byte('a' + j%26)
}

func floodAt(i, n int64) byte {
	switch {
	case i < int64(len(floodHead)):
		return floodHead[i]
	case i >= n-int64(len(floodTail)):
		return floodTail[i-(n-int64(len(floodTail)))]
	}
	return floodFiller(i - int64(len(floodHead)))
}

func floodBytes(from, to, n int64) []byte {
	b := make([]byte, 0, to-from)
	for i := from; i < to; i++ {
		b = append(b, floodAt(i, n))
	}
	return b
}

func writeFlood(w io.Writer, n int64) {
	const period = 26 * 80
	chunk := make([]byte, period*500)
	for j := range chunk {
		chunk[j] = floodFiller(int64(j))
	}
	io.WriteString(w, floodHead)
	for left := n - int64(len(floodHead)+len(floodTail)); left > 0; {
		k := min(left, int64(len(chunk)))
		w.Write(chunk[:k])
		left -= k
	}
	io.WriteString(w, floodTail)
}

// forkLinger starts a grandchild that keeps the worker's stdout and stderr
// open and sleeps; with escape it leaves the process group (setsid). Once
// the grandchild has written its pid, the worker exits 0 without waiting
// for it.
func forkLinger(escape bool) int {
	exe, _ := os.Executable()
	gc := exec.Command(exe)
	gc.Env = append(os.Environ(), faultEnv+"=linger")
	gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
	if escape {
		gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := gc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "fork:", err)
		return 3
	}
	pidFile := os.Getenv(pidFileEnv)
	for range 2000 {
		if _, err := os.Stat(pidFile); err == nil {
			fmt.Println("worker: leader done")
			return 0
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "fork: the grandchild never wrote its pid")
	return 4
}

// poolChild takes the lock file of its GPU (failing if a process that runs
// at the same time has it), checks that no more than $REPLAY_JOBS lock
// files exist, waits (for $REPLAY_RELEASE if set), and prints its GPU.
func poolChild() int {
	dir := os.Getenv(lockDirEnv)
	gpu := os.Getenv("CUDA_VISIBLE_DEVICES")
	jobs, _ := strconv.Atoi(os.Getenv(jobsEnv))
	if hip := os.Getenv("HIP_VISIBLE_DEVICES"); hip != "" && hip != gpu {
		fmt.Fprintf(os.Stderr, "HIP_VISIBLE_DEVICES %q != CUDA_VISIBLE_DEVICES %q\n", hip, gpu)
		return 6
	}
	lock := filepath.Join(dir, "gpu-"+gpu+"-"+strconv.Itoa(os.Getpid()))
	// One lock per GPU: a second process on the same GPU finds the first's.
	if m, _ := filepath.Glob(filepath.Join(dir, "gpu-"+gpu+"-*")); len(m) > 0 {
		fmt.Fprintf(os.Stderr, "GPU %s already in use by %v\n", gpu, m)
		return 3
	}
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		return 7
	}
	defer os.Remove(lock)
	if m, _ := filepath.Glob(filepath.Join(dir, "gpu-*")); len(m) > jobs {
		fmt.Fprintf(os.Stderr, "%d running, more than %d: %v\n", len(m), jobs, m)
		return 4
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "gpu-"+gpu+"-*")); len(m) > 1 {
		fmt.Fprintf(os.Stderr, "GPU %s shared: %v\n", gpu, m)
		return 3
	}
	if rel := os.Getenv(releaseEnv); rel != "" {
		for {
			if _, err := os.Stat(rel); err == nil {
				break
			} else if !errors.Is(err, os.ErrNotExist) {
				return 8
			}
			time.Sleep(5 * time.Millisecond)
		}
	} else {
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Print(gpu)
	return 0
}
