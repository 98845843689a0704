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
// torch zygote) and any child without REDUCE_REPLAY=1 are never killed. A
// dead child (zombie) is reaped unless reduce started it or it is in
// reduce's own process group (a child os/exec started without Setpgid,
// which its own Wait reaps): a stray that died before a sweep saw it alive
// would stay a zombie for the rest of the run. A backend's Close sweeps a
// last time, for a stray re-parented after its last replay's sweep.
// The torch zygote and each of its children are subreapers of their own
// (reduce_replay.py), and the zygote kills what its dead children left.

var reaper = struct {
	once    sync.Once
	ok      bool
	mu      sync.Mutex
	started map[int]bool    // pids startProcess started, until reaped
	dirs    map[string]bool // run directories of replays in flight
	spared  map[int]bool    // strays of replays in flight, reaped once dead
	// stuck are strays killed that did not die in killWait (uninterruptible
	// sleep in a driver, NFS): not waited on again until they are zombies.
	stuck map[int]bool
}{started: map[int]bool{}, dirs: map[string]bool{}, spared: map[int]bool{}, stuck: map[int]bool{}}

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
	self, ownGroup := os.Getpid(), syscall.Getpgrp()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kill, dead []int
	reaper.mu.Lock()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || reaper.started[pid] {
			continue
		}
		ppid, state, pgrp, ok := parentOf(pid)
		if !ok || ppid != self {
			continue
		}
		if state == 'Z' {
			// A spared stray that ended on its own, or a stray that died
			// before a sweep saw it alive (a zombie's environment is gone).
			// One in reduce's own group is a child os/exec started without
			// Setpgid, whose own Wait reaps it.
			if reaper.spared[pid] || reaper.stuck[pid] || pgrp != ownGroup {
				dead = append(dead, pid)
			}
			continue
		}
		if reaper.stuck[pid] {
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
		reaped := reapKilled(pid)
		reaper.mu.Lock()
		delete(reaper.spared, pid)
		if !reaped {
			reaper.stuck[pid] = true
		}
		reaper.mu.Unlock()
	}
	// A dead leader whose other threads are still exiting shows as a
	// zombie before it can be reaped: waited for like a killed stray.
	for _, pid := range dead {
		if reapKilled(pid) {
			reaper.mu.Lock()
			delete(reaper.spared, pid)
			delete(reaper.stuck, pid)
			reaper.mu.Unlock()
		}
	}
	return kill
}

// reapKilled waits, for at most killWait, for a killed stray to die, and
// reaps it; it reports whether it did.
func reapKilled(pid int) bool {
	deadline := time.Now().Add(killWait)
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if p == pid || (err != nil && err != syscall.EINTR) || time.Now().After(deadline) {
			return p == pid
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// parentOf reads a process's parent, state and process group from
// /proc/PID/stat.
func parentOf(pid int) (ppid int, state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	return ppid, f[0][0], pgrp, err == nil
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
