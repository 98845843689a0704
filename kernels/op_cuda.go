package kernels

import "sort"

// Device-assert bookkeeping for CUDA emulation.
//
// Launch configurations follow torch 1.13's kernels (documented at each
// emulation). Every failing thread prints one line: CUDA_KERNEL_ASSERT
// calls __assert_fail, which prints and traps, so a thread stops at its
// first failing element. A real GPU prints the lines in a scheduling-
// dependent order; the emulation sorts them by block, then thread, so runs
// are deterministic.

// MaxStoredAsserts bounds Failure.Asserts; AssertThreads counts them all.
const MaxStoredAsserts = 4096

type assertKey struct{ block, thread int64 }

type assertSet struct {
	name string  // the tensor holding the checked values
	t    *Tensor // its elements, by row-major linear index
	elem []int64 // row-major storage elements of t (lazily built)
	seen map[assertKey]bool
	list []DeviceAssert
	n    int64
}

func newAsserts(name string, t *Tensor) *assertSet {
	return &assertSet{name: name, t: t, seen: map[assertKey]bool{}}
}

func (s *assertSet) value(lin int64) float64 {
	if s.elem == nil {
		s.elem = rowMajor(s.t)
	}
	return s.t.LoadFloat(s.elem[lin])
}

// add records a failing thread that checked element lin (row-major) of the
// tensor; a thread already recorded keeps its first element (threads visit
// their elements in increasing lin order in every emulated kernel).
func (s *assertSet) add(site Site, block, thread, lin int64) {
	k := assertKey{block, thread}
	if s.seen[k] {
		return
	}
	s.seen[k] = true
	s.n++
	if len(s.list) >= MaxStoredAsserts {
		return
	}
	s.list = append(s.list, DeviceAssert{
		Site:   site,
		Block:  [3]int64{block, 0, 0},
		Thread: [3]int64{thread, 0, 0},
		Tensor: s.name,
		Index:  unravel(lin, s.t.Shape),
		Value:  s.value(lin),
	})
}

// failure is the device-side failure, or nil when no thread failed.
func (s *assertSet) failure() *Failure {
	if s == nil || s.n == 0 {
		return nil
	}
	sort.SliceStable(s.list, func(i, j int) bool {
		a, b := s.list[i], s.list[j]
		if a.Block[0] != b.Block[0] {
			return a.Block[0] < b.Block[0]
		}
		return a.Thread[0] < b.Thread[0]
	})
	// Every thread of one launch asserts at one site, so the first names
	// the failure's class.
	return &Failure{
		Exception:     "RuntimeError",
		Message:       CUDAErrorMessage,
		Asserts:       s.list,
		AssertThreads: s.n,
		Async:         true,
		Class:         s.list[0].Class,
	}
}

// elementwiseThread maps position p of a TensorIterator-driven launch of 128
// threads × 4 elements per block (gpu_kernel, the scatter/gather and index
// kernels) to its block and thread. vec > 1 is the vectorised path (full
// blocks only): thread t loads vec consecutive elements at t·vec.
func elementwiseThread(p, n int64, vec int) (block, thread int64) {
	block = p / 512
	within := p % 512
	if vec > 1 && n-block*512 >= 512 {
		return block, (within / int64(vec)) % 128
	}
	return block, within % 128
}
