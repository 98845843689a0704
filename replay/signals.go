package replay

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// How a command of reduce is stopped. The first SIGINT, SIGTERM or SIGHUP
// cancels the context it runs under, as Ctrl-C does: the replays in flight
// are interrupted (SIGINT to their groups, the grace, SIGKILL) and the
// command ends as an interrupted one does (the best result so far written,
// marked partial; exit 4). A second one, of any of them, cuts the grace
// short: the replays still in it are killed at once (killNowKey), and the
// command ends the same way, only sooner. No signal ends the process
// before its cleanup: the lock on --out released, the run directories and
// the backends' temporary directories removed, a fixture written whole or
// not at all. A third ends the process at once (the signal's default). SIGHUP
// is left alone where the process started with it ignored (nohup: a hangup
// must not stop the run).

// killNowKey is the context value SignalContext sets: a channel closed by
// the second signal, which the supervisor's grace waits on too.
type killNowKey struct{}

// SignalContext returns parent's child canceled by the first SIGINT,
// SIGTERM or SIGHUP, and the stop that ends the handling (and cancels
// it). A command calls it before it makes anything to clean up, and stops
// it last, once everything is cleaned up: a signal after stop has its
// default effect again.
func SignalContext(parent context.Context) (context.Context, func()) {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	ctx, cancel := context.WithCancel(parent)
	now, done := make(chan struct{}), make(chan struct{})
	ctx = context.WithValue(ctx, killNowKey{}, (<-chan struct{})(now))
	go func() {
		// After the second, a third signal has its default effect: a
		// cleanup that hangs (a read of a FIFO, a dead mount) cannot keep
		// the process alive.
		for _, act := range []func(){cancel, func() { close(now); signal.Stop(ch) }} {
			select {
			case <-ch:
				act()
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel()
		})
	}
}

// killNow is the channel a second signal closes (SignalContext); nil,
// which never fires, for a context without one.
func killNow(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(killNowKey{}).(<-chan struct{})
	return ch
}
