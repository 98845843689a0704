package replay

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSignalContext: the first of SIGINT, SIGTERM and SIGHUP interrupts a
// replay as Ctrl-C does; a second one, of any of them, kills it in its
// grace at once, and the Runner still cleans up after it. The child
// ignores SIGINT and the grace is an hour: the run ends only by the kill
// the second signal asks for.
func TestSignalContext(t *testing.T) {
	pairs := [][2]syscall.Signal{{syscall.SIGTERM, syscall.SIGINT}, {syscall.SIGINT, syscall.SIGINT}}
	if !signal.Ignored(syscall.SIGHUP) { // under nohup, SignalContext leaves it alone
		pairs = append(pairs, [2]syscall.Signal{syscall.SIGHUP, syscall.SIGTERM})
	}
	for _, sigs := range pairs {
		t.Run(sigs[0].String()+" then "+sigs[1].String(), func(t *testing.T) {
			r, root := faultRunner(t, testLong)
			r.Grace = time.Hour
			ctx, stop := SignalContext(context.Background())
			defer stop()
			readyFile := filepath.Join(t.TempDir(), "ready")
			go func() {
				for {
					if _, err := os.Stat(readyFile); err == nil {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				syscall.Kill(os.Getpid(), sigs[0])
				<-ctx.Done() // handled: the second is a second
				syscall.Kill(os.Getpid(), sigs[1])
			}()
			done := make(chan Result, 1)
			go func() { done <- r.Run(ctx, faultCmd(t, "ignore-int", readyEnv+"="+readyFile)) }()
			var res Result
			select {
			case res = <-done:
			case <-time.After(testLong):
				t.Fatalf("the replay is still in its grace %v after the second signal", testLong)
			}
			if !res.Canceled || res.Err != nil || res.Harness {
				t.Fatalf("want canceled: %s", describe(res))
			}
			if res.Signal != syscall.SIGKILL {
				t.Errorf("want killed by SIGKILL: %s", describe(res))
			}
			assertClean(t, res, root)
		})
	}
}
