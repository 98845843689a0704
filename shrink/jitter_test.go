package shrink

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"
)

// jitter delays every answer of o by a random time (a few microseconds to
// a fraction of a millisecond) and yields the processor, so that with
// Jobs > 1 answers really come back in varying orders. The delays are
// random on purpose; nothing is asserted about time.
func jitter(o Oracle, seed uint64) Oracle {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	return func(ctx context.Context, c Candidate) (Outcome, error) {
		mu.Lock()
		d := time.Duration(rng.IntN(300)) * time.Microsecond
		mu.Unlock()
		runtime.Gosched()
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return o(ctx, c)
	}
}
