"""reduce_batch.memory: emulating a device's memory (--device-memory)."""

import ctypes

from .errors import HarnessError
from .fileformat import torch_module


def _vm_data():
    """The process's data size in bytes (VmData of /proc/self/status: what RLIMIT_DATA limits)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise HarnessError("--device-memory: no VmData in /proc/self/status")


def _malloc_top():
    """The free bytes at the top of glibc's main heap (mallinfo2().keepcost), 0 when unknown. They
    are inside VmData already; an allocation that glibc cannot mmap under the limit extends the
    heap from them (brk), so the limit must leave them out to count what the op allocates."""

    class _MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]

    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return 0
    fn.restype = _MallInfo2
    return int(fn().keepcost)


def limit_device_memory(device, nbytes):
    """Let this process allocate at most `nbytes` more on `device` from now on (reduce's
    --device-memory, run_in_child's device_memory: emulating a device of that size, so that a
    failure that depends on the batch size alone reproduces). On cuda, the caching allocator's
    memory fraction: what it has reserved so far (the CUDA context's first block, the loaded
    batch) plus nbytes. On the CPU, RLIMIT_DATA:
    the data size now plus nbytes, less the free top of the heap (_malloc_top); an allocation
    past it makes torch's DefaultCPUAllocator raise "can't allocate memory". The intra-op thread
    pool is started first: its threads' stacks are data mappings too, and must not count against
    the op. Free chunks inside the heap may still serve small allocations unseen: the limit is
    exact to a page for an op's large buffers, not for its small ones. Returns a function that
    lifts the limit again (for the summary of the output, which is the harness's, not the op's)."""
    torch = torch_module()
    d = torch.device(device)
    if d.type == "cuda":
        index = d.index if d.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory
        reserved = torch.cuda.memory_reserved(index)
        torch.cuda.set_per_process_memory_fraction(min(1.0, (reserved + nbytes) / float(total)), index)
        return lambda: torch.cuda.set_per_process_memory_fraction(1.0, index)
    import resource

    try:
        # One malloc arena: a thread's first allocation would otherwise map an arena of its own,
        # counted against the limit though the op never asked for it.
        ctypes.CDLL(None).mallopt(-8, 1)  # M_ARENA_MAX (glibc malloc.h)
    except (OSError, AttributeError):
        pass
    if torch.get_num_threads() > 1:
        torch.ones(1 << 18).sum()  # a parallel reduction: the pool's threads exist from here on
    old = resource.getrlimit(resource.RLIMIT_DATA)
    soft = max(_vm_data() + nbytes - _malloc_top(), 0)
    if old[1] != resource.RLIM_INFINITY:
        soft = min(soft, old[1])
    resource.setrlimit(resource.RLIMIT_DATA, (soft, old[1]))
    return lambda: resource.setrlimit(resource.RLIMIT_DATA, old)
