package replay

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A stray of a replay still in flight (its run directory live) is left to
// that replay's own sweep, and a child reduce started itself is never a
// stray, whatever its environment.
func TestSweepSparesLiveReplays(t *testing.T) {
	if !subreaper() {
		t.Skip("no PR_SET_CHILD_SUBREAPER here")
	}
	live := "/nonexistent/reduce-run-live-" + strconv.Itoa(os.Getpid())
	liveDir(live, true)
	defer liveDir(live, false)
	cmd := exec.Command("sh", "-c", `setsid sleep 100 >/dev/null 2>&1 & echo $!`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "REDUCE_REPLAY=1", RunDirEnv + "=" + live}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	stray, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	defer func() {
		syscall.Kill(stray, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(stray, &ws, syscall.WNOHANG, nil)
	}()
	if ppid, _, _, ok := parentOf(stray); !ok || ppid != os.Getpid() {
		t.Fatalf("stray %d: parent %d, want reduce's %d", stray, ppid, os.Getpid())
	}

	own := exec.Command("sleep", "100")
	own.Env = []string{"REDUCE_REPLAY=1", RunDirEnv + "=/nonexistent/ended"}
	startRegistered(func() int {
		if own.Start() != nil {
			return 0
		}
		return own.Process.Pid
	})
	if own.Process == nil {
		t.Fatal("sleep did not start")
	}
	defer func() {
		own.Process.Kill()
		own.Wait()
		reaped(own.Process.Pid)
	}()

	killed := sweep("/nonexistent/another-replay")
	if processGone(stray) || slices.Contains(killed, stray) {
		t.Errorf("another replay's sweep killed %d, a stray of a replay in flight", stray)
	}
	if processGone(own.Process.Pid) {
		t.Errorf("sweep killed %d, a child reduce started", own.Process.Pid)
	}
	killed = sweep(live)
	if !slices.Contains(killed, stray) || !processGone(stray) {
		t.Errorf("its own replay's sweep left the stray %d (killed %v)", stray, killed)
	}
	if processGone(own.Process.Pid) {
		t.Errorf("sweep killed %d, a child reduce started", own.Process.Pid)
	}
}
