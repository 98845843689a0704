package kernels

import (
	"fmt"
	"strconv"
)

// Device memory emulation: a replay on a device of a given size (the
// --device-memory option) fails with torch's out-of-memory error when the op
// needs more than that.
//
// What counts is what the op allocates on its device while it runs: its
// outputs and the intermediates it materializes (cross_entropy's
// log_softmax, embedding's flattened copy of a non-contiguous index), in the
// order torch 1.13 allocates them. The inputs do not count: they are on the
// device before the op starts, and the emulated device is the room left to
// the op. Nothing is freed during an op, so the sizes add up. The plan is
// made from shapes, dtypes and attributes (one_hot's num_classes=-1 reads the
// values), before the op runs; allocations come before the op's value checks
// (torch allocates the output, then its kernel meets a bad index), so an op
// that would also fail a range check fails with the OOM first. Shape and
// dtype errors that torch raises before allocating keep their own message:
// for arguments whose sizes the plan cannot make, there is no plan, and the
// op runs without the limit.

// Allocation is one buffer an op allocates on its device.
type Allocation struct {
	// What names the buffer: "output", "log_softmax", "total_weight", ...
	What string
	// Bytes is its size as the op requests it.
	Bytes int64
}

// Memory returns the buffers op allocates for these arguments, in the
// order it allocates them (see the note above), or nil when the arguments
// are not ones it can size (torch would fail on them before allocating).
// An error is bad input, as for RunOptions.
func (op *Op) Memory(tensors map[string]*Tensor, attrs map[string]any) ([]Allocation, error) {
	c, err := op.bind(Options{}, tensors, attrs)
	if err != nil {
		return nil, err
	}
	return memoryPlan(c), nil
}

// MemoryBytes is the sum of plan's sizes.
func MemoryBytes(plan []Allocation) int64 {
	var n int64
	for _, a := range plan {
		n += a.Bytes
	}
	return n
}

// memoryPlan is the op's allocation plan, or nil.
func memoryPlan(c *call) []Allocation {
	var plan []Allocation
	add := func(what string, numel int64, dt DType) {
		if numel > 0 {
			plan = append(plan, Allocation{What: what, Bytes: numel * int64(dt.Size())})
		}
	}
	switch c.op.Name {
	case "embedding":
		input, weight := c.tensor("input"), c.tensor("weight")
		if weight.Dims() != 2 || !isIndexDType(input.DType) {
			return nil
		}
		if input.Dims() > 1 && !input.IsContiguous() {
			add("indices.reshape(-1)", input.Numel(), input.DType)
		}
		add("output", input.Numel()*weight.Shape[1], weight.DType)
	case "index_select":
		input, index := c.tensor("input"), c.tensor("index")
		if input.Dims() == 0 {
			add("output", index.Numel(), input.DType)
			break
		}
		dim, f := wrapDim(c.int("dim"), input.Dims())
		if f != nil {
			return nil
		}
		add("output", sliceNumel(input, dim)*index.Numel(), input.DType)
	case "gather":
		// gather's shape checks come before its output.
		if _, f := gatherChecks(c.tensor("input"), c.int("dim"), c.tensor("index")); f != nil {
			return nil
		}
		add("output", c.tensor("index").Numel(), c.tensor("input").DType)
	case "scatter_add":
		input, index, src := c.tensor("input"), c.tensor("index"), c.tensor("src")
		if index.DType != Int64 || input.DType != src.DType {
			return nil
		}
		add("output", input.Numel(), input.DType)
	case "one_hot":
		t := c.tensor("tensor")
		if t.DType != Int64 {
			return nil
		}
		nc := c.int("num_classes")
		if t.Numel() == 0 && nc <= 0 {
			return nil
		}
		mn, mx := int64(0), int64(-1)
		t.Each(func(_ []int64, e int64) {
			v := t.LoadInt(e)
			mn, mx = min(mn, v), max(mx, v)
		})
		if nc == -1 {
			nc = mx + 1
		}
		// On CPU the value checks come before the output; CUDA leaves
		// them to scatter's device asserts, after it.
		if nc <= 0 || !c.cuda && (mn < 0 || mx >= nc) {
			return nil
		}
		add("output", t.Numel()*nc, Int64)
	case "index":
		input, index := c.tensor("input"), c.tensor("index")
		dim := c.int("dim")
		if dim < 0 || dim >= int64(input.Dims()) {
			return nil
		}
		switch index.DType {
		case Int64:
			add("output", sliceNumel(input, dim)*index.Numel(), input.DType)
		case Bool, Uint8:
			var n int64
			index.Each(func(_ []int64, e int64) {
				if index.LoadInt(e) != 0 {
					n++
				}
			})
			add("output", sliceNumel(input, dim)*n, input.DType)
		default:
			return nil
		}
	case "cross_entropy":
		input, target := c.tensor("input"), c.tensor("target")
		if !input.DType.IsFloat() {
			return nil
		}
		add("log_softmax", input.Numel(), input.DType)
		if sameShape(input.Shape, target.Shape) {
			// Probability targets: -(log_softmax * target), then the sum.
			add("log_softmax * target", input.Numel(), input.DType)
		}
		lossPlan(add, c.str("reduction"), target, input.DType)
	case "nll_loss":
		// nll_loss checks shapes before it allocates.
		input, target := c.tensor("input"), c.tensor("target")
		if !input.DType.IsFloat() || input.Dims() >= 2 && (target.Dims() == 0 || target.Shape[0] != input.Shape[0]) {
			return nil
		}
		lossPlan(add, c.str("reduction"), c.tensor("target"), input.DType)
	case "binary_cross_entropy":
		input := c.tensor("input")
		if !input.DType.IsFloat() || !sameShape(input.Shape, c.tensor("target").Shape) {
			return nil
		}
		// loss = empty_like(input), then its reduction.
		add("loss", input.Numel(), input.DType)
		if c.str("reduction") != "none" {
			add("output", 1, input.DType)
		}
	default:
		return nil
	}
	return plan
}

// lossPlan adds nll_loss's output and total_weight.
func lossPlan(add func(string, int64, DType), reduction string, target *Tensor, dt DType) {
	if reduction == "none" {
		add("output", target.Numel(), dt)
		return
	}
	add("output", 1, dt)
	add("total_weight", 1, dt)
}

// sliceNumel is the element count of one slice of t along dim.
func sliceNumel(t *Tensor, dim int64) int64 {
	n := int64(1)
	for d, s := range t.Shape {
		if int64(d) != dim {
			n *= s
		}
	}
	return n
}

// outOfMemory is the failure of plan on a device of limit bytes in mode, or
// nil when it fits.
func outOfMemory(op string, mode Mode, plan []Allocation, limit int64) *Failure {
	if mode == ModeCUDA {
		return cudaOutOfMemory(op, plan, limit)
	}
	var used int64
	for _, a := range plan {
		if used+a.Bytes > limit {
			return &Failure{Op: op, Exception: "RuntimeError", Message: CPUAllocMessage(a.Bytes), Frames: opFrames(op)}
		}
		used += a.Bytes
	}
	return nil
}

// CPUAllocMessage is what torch 1.13's DefaultCPUAllocator raises when
// posix_memalign fails (c10/core/impl/alloc_cpu.cpp, the CAFFE_ENFORCE after
// it; this exact text is real torch 1.13 output on CPU).
func CPUAllocMessage(bytes int64) string {
	return "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate " +
		strconv.FormatInt(bytes, 10) + " bytes. Error code 12 (Cannot allocate memory)"
}

// The CUDA caching allocator's sizes (c10/cuda/CUDACachingAllocator.cpp of
// torch 1.13: kMinBlockSize, kSmallSize, kSmallBuffer, kMinLargeAlloc,
// kLargeBuffer, kRoundLarge).
const (
	cudaMinBlock    = 512
	cudaSmallSize   = 1 << 20
	cudaSmallBuffer = 2 << 20
	cudaMinLarge    = 10 << 20
	cudaLargeBuffer = 20 << 20
	cudaRoundLarge  = 2 << 20
)

// cudaOutOfMemory emulates the caching allocator on a device of limit bytes:
// each request is rounded to 512 bytes and served from the free part of a
// segment of its pool (small: up to 1 MiB, packed into 2 MiB segments;
// large: the rest), or from a new segment of get_allocation_size bytes
// (2 MiB for small requests, 20 MiB for 1 to 10 MiB, else the request
// rounded up to 2 MiB). A new segment that does not fit next to the ones
// reserved is the OOM, reported with the segment's size, as malloc() does.
func cudaOutOfMemory(op string, plan []Allocation, limit int64) *Failure {
	var allocated, reserved int64
	var free [2][]int64 // per pool (0 small, 1 large): free bytes of each segment
	for _, a := range plan {
		size := int64(cudaMinBlock)
		if a.Bytes > cudaMinBlock {
			size = (a.Bytes + cudaMinBlock - 1) / cudaMinBlock * cudaMinBlock
		}
		pool := 0
		if size > cudaSmallSize {
			pool = 1
		}
		served := false
		for i, f := range free[pool] {
			if f >= size {
				free[pool][i] -= size
				served = true
				break
			}
		}
		if !served {
			seg := int64(cudaSmallBuffer)
			switch {
			case size <= cudaSmallSize:
			case size < cudaMinLarge:
				seg = cudaLargeBuffer
			default:
				seg = (size + cudaRoundLarge - 1) / cudaRoundLarge * cudaRoundLarge
			}
			if reserved+seg > limit {
				return &Failure{Op: op, Exception: "torch.cuda.OutOfMemoryError",
					Message: CUDAOOMMessage(seg, limit, allocated, limit-reserved, reserved), Frames: opFrames(op)}
			}
			reserved += seg
			free[pool] = append(free[pool], seg-size)
		}
		allocated += size
	}
	return nil
}

// CUDAOOMMessage is str(torch.cuda.OutOfMemoryError) of torch 1.13, as
// DeviceCachingAllocator::malloc builds it (c10/cuda/CUDACachingAllocator.cpp,
// release/1.13: TORCH_CHECK_WITH(OutOfMemoryError, ...) with format_size of
// alloc_size, device_total, allocated_bytes, device_free and reserved_bytes;
// the "N allowed; " part that a memory fraction adds is left out: the
// emulated device is that small).
func CUDAOOMMessage(alloc, total, allocated, free, reserved int64) string {
	return "CUDA out of memory. Tried to allocate " + formatSize(alloc) + " (GPU 0; " + formatSize(total) +
		" total capacity; " + formatSize(allocated) + " already allocated; " + formatSize(free) + " free; " +
		formatSize(reserved) + " reserved in total by PyTorch) If reserved memory is >> allocated memory try " +
		"setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
}

// formatSize is the caching allocator's format_size: bytes up to 1 KiB,
// then KiB, MiB, GiB with two decimals.
func formatSize(n int64) string {
	if n < 0 {
		n = 0
	}
	switch {
	case n <= 1024:
		return strconv.FormatInt(n, 10) + " bytes"
	case n <= 1<<20:
		return fmt.Sprintf("%.2f KiB", float64(n)/1024)
	case n <= 1<<30:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// opFrames are the Python frames through which op's allocation fails.
func opFrames(op string) []Frame {
	switch op {
	case "cross_entropy":
		return []Frame{frameCrossEntropy}
	case "nll_loss":
		return []Frame{frameNLLLoss}
	case "embedding":
		return []Frame{frameEmbedding}
	case "binary_cross_entropy":
		return []Frame{frameBCE}
	}
	return nil
}
