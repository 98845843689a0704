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

// allocate records one buffer of numel elements of dt; empty buffers are
// not recorded (torch does not allocate them).
type allocate func(what string, numel int64, dt DType)

// memoryPlan is the op's allocation plan, or nil.
func memoryPlan(c *call) []Allocation {
	if c.op.memory == nil {
		return nil
	}
	var plan []Allocation
	add := func(what string, numel int64, dt DType) {
		if numel > 0 {
			plan = append(plan, Allocation{What: what, Bytes: numel * int64(dt.Size())})
		}
	}
	if !c.op.memory(c, add) {
		return nil
	}
	return plan
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
func outOfMemory(op *Op, mode Mode, plan []Allocation, limit int64) *Failure {
	if mode == ModeCUDA {
		return cudaOutOfMemory(op, plan, limit)
	}
	var used int64
	for _, a := range plan {
		if used+a.Bytes > limit {
			return &Failure{Op: op.Name, Exception: "RuntimeError", Message: CPUAllocMessage(a.Bytes), Frames: op.frames, Class: classHostOOM}
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
func cudaOutOfMemory(op *Op, plan []Allocation, limit int64) *Failure {
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
				return &Failure{Op: op.Name, Exception: "torch.cuda.OutOfMemoryError",
					Message: CUDAOOMMessage(seg, limit, allocated, limit-reserved, reserved), Frames: op.frames, Class: classDeviceOOM}
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
