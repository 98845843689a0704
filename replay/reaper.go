package replay

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The replays' strays. reduce is a child subreaper (PR_SET_CHILD_SUBREAPER):
// a process a replay left behind that also left its process group (setsid,
// setpgid), which the group's SIGKILL cannot reach, is re-parented to reduce
// when its parent dies instead of to init. Once a replay's process has
// exited, sweep finds such strays among reduce's children and kills them
// (and their groups), so that none survives its replay or holds its output
// pipes. A stray is told by its environment: a replay's processes inherit
// REDUCE_REPLAY=1 and their run directory's REDUCE_RUN_DIR; one whose run
// directory is a replay still in flight is that replay's, left alone until
// its own end. reduce's own children (those startProcess started, the
// torch zygote) and any child without REDUCE_REPLAY=1 are never touched.
// The torch zygote and each of its children are subreapers of their own
// (reduce_replay.py), and the zygote kills what its dead children left.

var reaper = struct {
	once    sync.Once
	ok      bool
	mu      sync.Mutex
	started map[int]bool    // pids startProcess started, until reaped
	dirs    map[string]bool // run directories of replays in flight
	spared  map[int]bool    // strays of replays in flight, reaped once dead
}{started: map[int]bool{}, dirs: map[string]bool{}, spared: map[int]bool{}}

// subreaper makes reduce a child subreaper, once; it reports whether it is
// one (false where the kernel has no PR_SET_CHILD_SUBREAPER: strays then go
// to init, out of reach).
func subreaper() bool {
	reaper.once.Do(func() {
		reaper.ok = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
	})
	return reaper.ok
}

// liveDir marks a run directory as a replay's in flight (live) or ended.
func liveDir(dir string, live bool) {
	if dir == "" {
		return
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if live {
		reaper.dirs[dir] = true
	} else {
		delete(reaper.dirs, dir)
	}
}

// startRegistered runs start (which forks a child and returns its pid, or
// 0) with the registry held, so that no sweep sees the child before it is
// known as reduce's own.
func startRegistered(start func() int) {
	subreaper()
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if pid := start(); pid > 0 {
		reaper.started[pid] = true
	}
}

// reaped forgets a child startProcess started, once it is reaped.
func reaped(pid int) {
	reaper.mu.Lock()
	delete(reaper.started, pid)
	reaper.mu.Unlock()
}

// sweep kills the strays of the replay whose run directory is dir ("" for
// none) and of replays that ended, with their process groups, and reaps
// them; it returns their pids. Their own children, re-parented to reduce in
// turn, are found by the next round.
func sweep(dir string) []int {
	if !subreaper() {
		return nil
	}
	var killed []int
	for range 16 {
		round := sweepOnce(dir)
		if len(round) == 0 {
			break
		}
		killed = append(killed, round...)
	}
	return killed
}

func sweepOnce(dir string) []int {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kill []int
	reaper.mu.Lock()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || reaper.started[pid] {
			continue
		}
		ppid, state, ok := parentOf(pid)
		if !ok || ppid != self {
			continue
		}
		if state == 'Z' {
			if reaper.spared[pid] { // a spared stray that ended on its own
				var ws syscall.WaitStatus
				if p, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); p == pid {
					delete(reaper.spared, pid)
				}
			}
			continue
		}
		replay, runDir := replayEnv(pid)
		switch {
		case !replay:
		case runDir != "" && runDir != dir && reaper.dirs[runDir]:
			reaper.spared[pid] = true
		default:
			kill = append(kill, pid)
		}
	}
	reaper.mu.Unlock()
	for _, pid := range kill {
		// Our child until we reap it: its pid cannot have been reused.
		syscall.Kill(-pid, syscall.SIGKILL) // its group, if it leads one
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range kill {
		reapKilled(pid)
		reaper.mu.Lock()
		delete(reaper.spared, pid)
		reaper.mu.Unlock()
	}
	return kill
}

// reapKilled waits, for at most killWait, for a killed stray to die, and
// reaps it.
func reapKilled(pid int) {
	deadline := time.Now().Add(killWait)
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if p == pid || (err != nil && err != syscall.EINTR) || time.Now().After(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// parentOf reads a process's parent and state from /proc/PID/stat.
func parentOf(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// replayEnv reads a process's environment as it was exec'd: whether it is
// a replay's (REDUCE_REPLAY=1, or a run directory) and its run directory
// (REDUCE_RUN_DIR).
func replayEnv(pid int) (replay bool, runDir string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false, ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		switch {
		case string(kv) == "REDUCE_REPLAY=1":
			replay = true
		case bytes.HasPrefix(kv, []byte(RunDirEnv+"=")):
			runDir = string(kv[len(RunDirEnv)+1:])
		}
	}
	// What reduce's own environment holds (reduce run inside a replay) is
	// every child's, and says nothing.
	if os.Getenv("REDUCE_REPLAY") == "1" {
		replay = false
	}
	if runDir == os.Getenv(RunDirEnv) {
		runDir = ""
	}
	return replay || runDir != "", runDir
}
