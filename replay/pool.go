package replay

import (
	"context"
	"sync"
)

// Pool runs commands through a Runner, at most Jobs at a time (the -j flag),
// each in a slot of its own. Slot i of Jobs is pinned to GPU GPUs[i mod
// len(GPUs)] (the --gpus flag) through CUDA_VISIBLE_DEVICES, and
// HIP_VISIBLE_DEVICES too for ROCm, set over the command's own Env; with
// Jobs = 4 and GPUs "0,1", slots 0 and 2 get GPU 0, slots 1 and 3 GPU 1.
// Two commands running at the same time are never in the same slot, so with
// Jobs <= len(GPUs) they never share a GPU.
//
// The zero Pool runs one command at a time with a zero Runner. Set the
// fields before the first Run and leave them; a Pool may be used from any
// number of goroutines.
type Pool struct {
	// Runner runs the commands; nil means a zero Runner (the defaults).
	Runner *Runner
	// Jobs is the number of slots; 0 or negative means len(GPUs), or 1
	// without GPUs.
	Jobs int
	// GPUs are the devices the slots are pinned to, as ParseGPUs returns
	// them; none leaves the visible devices as inherited.
	GPUs []string
	// Kind is the device kind (DeviceCUDA, DeviceROCm); it says which
	// visible-devices variables are set. "" is CUDA's.
	Kind string

	// slurm runs the commands as Slurm jobs (LauncherSlurm); nil runs them
	// here.
	slurm *slurm

	once  sync.Once
	free  chan int // the free slots: a bounded semaphore that names them
	slots [][]string
}

func (p *Pool) init() {
	p.once.Do(func() {
		n := p.Jobs
		if n <= 0 {
			n = max(len(p.GPUs), 1)
		}
		p.free = make(chan int, n)
		p.slots = make([][]string, n)
		for i := range n {
			if len(p.GPUs) > 0 {
				p.slots[i] = VisibleDevicesEnv(p.Kind, p.GPUs[i%len(p.GPUs)])
			}
			p.free <- i
		}
	})
}

// Size is the number of slots: at most this many commands run at once.
func (p *Pool) Size() int {
	p.init()
	return len(p.slots)
}

// SlotEnv is the environment slot i adds to a command (nil without GPUs).
func (p *Pool) SlotEnv(i int) []string {
	p.init()
	return p.slots[i]
}

// Run waits for a free slot, runs c in it and frees the slot. When ctx is
// done before a slot frees up, it returns at once a Result with Canceled
// set and Err = ctx.Err(), without starting anything. Slots are taken in
// order at first (0, 1, ...); after that, a command gets whichever slot
// was freed.
func (p *Pool) Run(ctx context.Context, c Command) Result {
	slot, err := p.take(ctx)
	if err != nil {
		return Result{ExitCode: -1, Canceled: true, Err: err}
	}
	defer p.put(slot)
	if env := p.slots[slot]; env != nil {
		c.Env = MergeEnv(c.Env, env)
	}
	r := p.Runner
	if r == nil {
		r = &Runner{}
	}
	if p.slurm != nil {
		return p.slurm.run(ctx, r, c)
	}
	return r.Run(ctx, c)
}

// take waits for a free slot and returns its index, or ctx's error when ctx
// is done first (also when it is done already and a slot is free). Every
// replay holds a slot while it runs, whoever starts its process: Run for a
// Command, the torch backend for a zygote's child (which it forks in the
// slot's environment, SlotEnv). Give the slot back with put.
func (p *Pool) take(ctx context.Context) (int, error) {
	p.init()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	select {
	case slot := <-p.free:
		return slot, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// put frees a slot take returned.
func (p *Pool) put(slot int) { p.free <- slot }
