package replay

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

func poolCmd(t *testing.T, locks string, jobs int, env ...string) Command {
	t.Helper()
	c := faultCmd(t, "pool", append([]string{lockDirEnv + "=" + locks, jobsEnv + "=" + strconv.Itoa(jobs)}, env...)...)
	c.Files = nil
	return c
}

func TestPoolSlots(t *testing.T) {
	p := &Pool{Jobs: 4, GPUs: []string{"0", "1"}}
	if p.Size() != 4 {
		t.Fatalf("Size %d", p.Size())
	}
	for i, want := range []string{"0", "1", "0", "1"} {
		if got := p.SlotEnv(i); !slices.Equal(got, []string{"CUDA_VISIBLE_DEVICES=" + want}) {
			t.Errorf("slot %d: %q", i, got)
		}
	}
	p = &Pool{GPUs: []string{"3", "5", "7"}, Kind: DeviceROCm}
	if p.Size() != 3 {
		t.Fatalf("Jobs 0 with 3 GPUs: Size %d", p.Size())
	}
	if got := p.SlotEnv(2); !slices.Equal(got, []string{"CUDA_VISIBLE_DEVICES=7", "HIP_VISIBLE_DEVICES=7"}) {
		t.Errorf("rocm slot 2: %q", got)
	}
	p = &Pool{}
	if p.Size() != 1 || p.SlotEnv(0) != nil {
		t.Errorf("zero Pool: Size %d, env %q", p.Size(), p.SlotEnv(0))
	}
}

// TestPoolDistinctGPUs holds two jobs running at once and checks they have
// GPUs 0 and 1; a third waits for a slot and takes the one freed.
func TestPoolDistinctGPUs(t *testing.T) {
	r, root := faultRunner(t, testLong)
	p := &Pool{Runner: r, Jobs: 2, GPUs: []string{"0", "1"}}
	locks := t.TempDir()
	release := filepath.Join(t.TempDir(), "release")
	cmd := poolCmd(t, locks, 2, releaseEnv+"="+release)

	results := make(chan Result, 3)
	for range 2 {
		go func() { results <- p.Run(context.Background(), cmd) }()
	}
	var held []string
	for i := 0; len(held) < 2; i++ {
		if i == 2000 {
			t.Fatalf("two jobs never ran at once: %v", held)
		}
		held, _ = filepath.Glob(filepath.Join(locks, "gpu-*"))
		time.Sleep(5 * time.Millisecond)
	}
	gpus := map[string]bool{}
	for _, h := range held {
		gpus[filepath.Base(h)[:len("gpu-0")]] = true
	}
	if !gpus["gpu-0"] || !gpus["gpu-1"] {
		t.Errorf("two running jobs on %v, want gpu-0 and gpu-1", held)
	}
	go func() { results <- p.Run(context.Background(), cmd) }() // waits for a slot
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range 3 {
		res := <-results
		if res.ExitCode != 0 {
			t.Errorf("pool child: %s", describe(res))
		}
		seen[string(res.Stdout)]++
		assertGone(t, res.PID)
	}
	if seen["0"]+seen["1"] != 3 || seen["0"] == 0 || seen["1"] == 0 {
		t.Errorf("GPUs seen %v", seen)
	}
	assertEmpty(t, root)
	assertEmpty(t, locks)
}

// TestPoolBounded runs many jobs through Jobs=2: each child fails if more
// than two lock files exist or another holds its GPU's.
func TestPoolBounded(t *testing.T) {
	r, root := faultRunner(t, testLong)
	p := &Pool{Runner: r, Jobs: 2, GPUs: []string{"0", "1"}}
	locks := t.TempDir()
	cmd := poolCmd(t, locks, 2)
	var wg sync.WaitGroup
	res := make([]Result, 12)
	for i := range res {
		wg.Go(func() { res[i] = p.Run(context.Background(), cmd) })
	}
	wg.Wait()
	for i, r := range res {
		if r.ExitCode != 0 {
			t.Errorf("job %d: %s", i, describe(r))
		}
	}
	assertEmpty(t, root)
	assertEmpty(t, locks)
}

func TestPoolCanceledWhileWaiting(t *testing.T) {
	r, root := faultRunner(t, testLong)
	p := &Pool{Runner: r, Jobs: 1}
	locks := t.TempDir()
	release := filepath.Join(t.TempDir(), "release")
	done := make(chan Result, 1)
	go func() { done <- p.Run(context.Background(), poolCmd(t, locks, 1, releaseEnv+"="+release)) }()
	for i := 0; ; i++ {
		if m, _ := filepath.Glob(filepath.Join(locks, "gpu-*")); len(m) == 1 {
			break
		}
		if i == 2000 {
			t.Fatal("the first job never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	res := p.Run(ctx, poolCmd(t, locks, 1))
	if !res.Canceled || res.Started || !errors.Is(res.Err, context.Canceled) {
		t.Errorf("waiting job: %s", describe(res))
	}
	os.WriteFile(release, nil, 0o600)
	if res := <-done; res.ExitCode != 0 {
		t.Errorf("first job: %s", describe(res))
	}
	assertEmpty(t, root)
}
