package replay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reaperChildEnv names what the test binary does when a test re-executes
// it for the reaper's tests: "exit" exits 0; "zombie-stray" starts an
// "exit" child in a session of its own, waits until it is a zombie, prints
// "stray PID" and exits without reaping it.
const reaperChildEnv = "REPLAY_REAPER_CHILD"

func init() {
	switch os.Getenv(reaperChildEnv) {
	case "exit":
		os.Exit(0)
	case "zombie-stray":
		os.Exit(zombieStray())
	}
}

func zombieStray() int {
	exe, _ := os.Executable()
	gc := exec.Command(exe)
	gc.Env = append(os.Environ(), reaperChildEnv+"=exit")
	gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := gc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "fork:", err)
		return 3
	}
	pid := gc.Process.Pid
	for range 20000 {
		if _, state, _, ok := parentOf(pid); ok && state == 'Z' {
			fmt.Println("stray", pid)
			return 0
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "fork: the grandchild never died")
	return 4
}

// zombieChildren are the dead children of this process that nobody reaped.
func zombieChildren() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, state, _, ok := parentOf(pid); ok && ppid == os.Getpid() && state == 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// A stray that left its group and died before any sweep saw it alive is
// reaped by its replay's sweep: no zombie of it is left to reduce.
func TestStrayDeadBeforeSweepIsReaped(t *testing.T) {
	if !subreaper() {
		t.Skip("no PR_SET_CHILD_SUBREAPER here")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Timeout: time.Minute, TempRoot: t.TempDir()}
	res := r.Run(context.Background(), Command{Path: exe, TempDir: true,
		Env: []string{reaperChildEnv + "=zombie-stray", "GORACE=atexit_sleep_ms=0"}})
	var pid int
	if res.Err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %s", describe(res))
	}
	if _, err := fmt.Sscanf(string(bytes.TrimSpace(res.Stdout)), "stray %d", &pid); err != nil {
		t.Fatalf("no stray in %q", res.Stdout)
	}
	zombies := zombieChildren()
	for _, z := range zombies {
		if z == pid {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			t.Errorf("the dead stray %d is left a zombie of reduce's (zombie children %v)", pid, zombies)
		}
	}
}

// newStray starts a replay's stray that is re-parented to reduce after
// every sweep so far (a setsid'd process whose parent has exited), and
// returns its pid.
func newStray(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", `setsid sleep 100 >/dev/null 2>&1 & echo $!`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "REDUCE_REPLAY=1", RunDirEnv + "=/nonexistent/reduce-run-ended"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	t.Cleanup(func() {
		if !processGone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	})
	// Settled once it leads a group of its own and runs sleep.
	for i := 0; ; i++ {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		ppid, _, pgrp, ok := parentOf(pid)
		if !ok || ppid != os.Getpid() {
			t.Fatalf("stray %d: parent %d, want reduce's %d", pid, ppid, os.Getpid())
		}
		if pgrp == pid && string(comm) == "sleep\n" {
			return pid
		}
		if i > 30000 {
			t.Fatalf("stray %d never settled (group %d, %q)", pid, pgrp, comm)
		}
		time.Sleep(time.Millisecond)
	}
}

// A backend's Close kills the strays re-parented to reduce after its last
// replay's sweep: none outlives the backend.
func TestStrayKilledByClose(t *testing.T) {
	if !subreaper() {
		t.Skip("no PR_SET_CHILD_SUBREAPER here")
	}
	base := exampleBatch(t, "four_class_targets")
	cases := []struct {
		name string
		opts func() Options
	}{
		{"go", func() Options { o := goOptions(t, "cpu"); o.TempRoot = t.TempDir(); return o }},
		{"exec", func() Options { return Options{Kind: KindExec, TempRoot: t.TempDir(), Replay: "true {batch}"} }},
		{"torch", func() Options { return torchOptions(t, t.TempDir()) }},
		{"torch, no zygote", func() Options { o := torchOptions(t, t.TempDir()); o.NoZygote = true; return o }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			be := newBackend(t, c.opts(), base)
			replayOK(t, be, whole)
			stray := newStray(t)
			if err := be.Close(); err != nil {
				t.Fatal(err)
			}
			if !processGone(stray) {
				t.Errorf("%s: the stray %d survives Close", c.name, stray)
			}
		})
	}
}

// A replay's grandchild that left its group under a process of no replay
// (no replay environment: no sweep kills it) is re-parented to reduce only
// when that process exits, after the replay's sweep; Close kills it.
func TestStrayReparentedAfterSweepKilledByClose(t *testing.T) {
	if !subreaper() {
		t.Skip("no PR_SET_CHILD_SUBREAPER here")
	}
	dir := t.TempDir()
	pidFile, release := filepath.Join(dir, "gc.pid"), filepath.Join(dir, "release")
	inner := `REDUCE_REPLAY=1 setsid sleep 100 </dev/null >/dev/null 2>&1 & echo $! > "$0.tmp"; mv "$0.tmp" "$0"; ` +
		`while [ ! -e "$1" ]; do sleep 0.01; done`
	script := `env -i PATH="$PATH" setsid sh -c ` + shellQuote(inner) + ` ` + shellQuote(pidFile) + ` ` + shellQuote(release) +
		` </dev/null >/dev/null 2>&1 & while [ ! -s ` + shellQuote(pidFile) + ` ]; do sleep 0.01; done; true {batch}`
	be := newBackend(t, Options{Kind: KindExec, TempRoot: t.TempDir(), Replay: "sh -c " + shellQuote(script)},
		exampleBatch(t, "four_class_targets"))
	if v := replayOK(t, be, whole); v.Result.ExitCode != 0 {
		t.Fatalf("replay: %s", describe(v.Result))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	gc, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	t.Cleanup(func() {
		os.WriteFile(release, nil, 0o600)
		if gc > 0 && !processGone(gc) {
			syscall.Kill(gc, syscall.SIGKILL)
		}
	})
	if gc <= 0 || processGone(gc) {
		t.Fatalf("grandchild %q: not running after its replay (the test cannot tell anything)", b)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if ppid, _, _, ok := parentOf(gc); ok && ppid == os.Getpid() {
			break
		}
		if i > 30000 {
			t.Fatalf("grandchild %d never re-parented to reduce", gc)
		}
		time.Sleep(time.Millisecond)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if !processGone(gc) {
		t.Errorf("the grandchild %d, re-parented after its replay's sweep, survives Close", gc)
	}
}

// A dead child in reduce's own process group (os/exec without Setpgid) is
// its starter's to reap: a sweep leaves it, and Wait sees its status.
func TestSweepLeavesOwnGroupZombies(t *testing.T) {
	if !subreaper() {
		t.Skip("no PR_SET_CHILD_SUBREAPER here")
	}
	cmd := exec.Command("sh", "-c", "exit 3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	for i := 0; ; i++ {
		if _, state, _, ok := parentOf(pid); !ok || state == 'Z' {
			break
		}
		if i > 30000 {
			t.Fatalf("%d never died", pid)
		}
		time.Sleep(time.Millisecond)
	}
	sweep("")
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("Wait after a sweep: %v, want exit status 3", err)
	}
}
