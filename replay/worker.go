package replay

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"reduce/fixtures"
	"reduce/kernels"
)

// Worker is the go backend's worker, `reduce __worker --device cpu|cuda
// [--abort] [--device-memory BYTES] [--max-size BYTES] [FILE]`: it reads one batch file (the
// native format), FILE with fixtures.Read (which maps a large one rather
// than copy it) or else stdin, runs the batch's built-in op in the mode the
// device names, and returns the process's exit status. args are the arguments
// after the program name; a leading WorkerCommand is skipped. env reads the
// environment (os.Getenv).
//
//   - The op passes: a one-line summary on stdout (each output's dtype,
//     shape, first values, sum and a CRC-32 of its values), then the
//     report line (ReportPrefix: the outputs; in CUDA mode, the failure
//     of the batch run again in CPU mode instead, if it fails there), exit
//     0. A failure ends stdout with the report of the failure on the CPU
//     (in CUDA mode, the batch run again in CPU mode), if it fails there.
//   - The op fails on the host (CPU mode, or a check CUDA makes on the
//     host): a Python traceback through torch's frames and the exception
//     torch 1.13 raises ("IndexError: Target 4 is out of bounds.") on
//     stderr, exit 1, as an uncaught Python exception.
//   - CUDA mode, device-side assert: the assert lines of the failing
//     threads, then the RuntimeError ("CUDA error: device-side assert
//     triggered"). Reporting is asynchronous as on a GPU: unless
//     CUDA_LAUNCH_BLOCKING=1 is in env, the traceback points at a later
//     line of the training step (loss.item(), where the error surfaces),
//     and the message carries c10's advice to pass CUDA_LAUNCH_BLOCKING=1;
//     with it, the traceback points at the op's own call. The context is
//     sticky: nothing runs after the error. With --abort the worker then
//     dies as a torch process whose context is broken dies at exit:
//     "terminate called after throwing an instance of 'c10::Error'" and
//     SIGABRT; Worker does not return then (it must be the process's
//     main; a core dump is disabled first).
//   - With --device-memory, an op whose outputs and intermediates
//     (kernels.Op.Memory) do not fit fails as torch does out of memory:
//     DefaultCPUAllocator's RuntimeError in CPU mode, the caching
//     allocator's torch.cuda.OutOfMemoryError in CUDA mode; exit 1.
//   - The candidate cannot be run (not a valid batch file, no op, an
//     unknown op, tensors or attributes the op does not take, tensors whose
//     views hold more than --max-size bytes of elements):
//     a message on stderr and HarnessExitCode.
//   - A pass ends stdout with ReturnedLine: an exit 0 without it is the
//     worker's own fault.
func Worker(args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) int {
	if len(args) > 0 && args[0] == WorkerCommand {
		args = args[1:]
	}
	if env == nil {
		env = func(string) string { return "" }
	}
	harness := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "reduce worker: harness failure: "+format+"\n", a...)
		return HarnessExitCode
	}
	fs := flag.NewFlagSet("reduce "+WorkerCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	device := fs.String("device", "cpu", "cpu (CPU semantics) or cuda (CUDA emulation)")
	abort := fs.Bool("abort", false, "after a device-side failure, die by SIGABRT as a broken CUDA context does at exit")
	deviceMemory := fs.Int64("device-memory", 0, "bytes the op may allocate, emulating a device of that size (0: no limit)")
	maxSize := fs.Int64("max-size", 0, "bytes the candidate's tensors may take built as their views' elements (0: fixtures.DefaultMaxSize)")
	view := fs.Bool("view", false, "read {\"source\": FILE, \"view\": VIEW} on stdin and replay the view of FILE (fixtures.View)")
	if err := fs.Parse(args); err != nil {
		return harness("%v", err)
	}
	if fs.NArg() > 1 {
		return harness("unexpected arguments %q (one batch file, or none to read it from stdin)", fs.Args())
	}
	mode, err := kernels.ParseMode(*device)
	if err != nil {
		return harness("--device: %v", err)
	}
	var b *fixtures.Batch
	switch {
	case *view:
		if fs.NArg() != 0 {
			return harness("--view reads its candidate on stdin: unexpected arguments %q", fs.Args())
		}
		b, err = readView(stdin)
	case fs.NArg() == 1:
		b, err = fixtures.Read(fs.Arg(0), fixtures.WithMaxSize(math.MaxInt64))
	default:
		b, err = fixtures.Decode(bufio.NewReaderSize(stdin, 1<<20), "<stdin>")
	}
	if err != nil {
		return harness("%v", err)
	}
	if err := b.CheckViewSize(*maxSize); err != nil {
		// Built, its views would kill the worker (the Go runtime's out of
		// memory): refused before the op runs.
		return harness("the candidate: %v", err)
	}
	if b.Op == "" {
		return harness("the batch records no op (it was recorded for a step of its own): replay it with --backend torch --entry module:function or --backend exec --replay CMD")
	}
	op, err := kernels.Lookup(b.Op)
	if err != nil {
		return harness("%v", err)
	}
	if *deviceMemory < 0 {
		return harness("--device-memory %d: want a size in bytes, or 0 for no limit", *deviceMemory)
	}
	res, err := op.RunOptions(kernels.Options{Mode: mode, DeviceMemory: *deviceMemory}, b.Named(), b.Attrs)
	if err != nil {
		return harness("%v", err)
	}
	f := res.Failure
	// The report is information, never the verdict: one that cannot be
	// written is left out. In CUDA mode the batch runs again in CPU mode,
	// where a fixture's tests run it (a check that fails stops it early).
	onCPU := func() *kernels.Failure {
		if mode == kernels.ModeCPU {
			return f
		}
		cres, err := op.RunOptions(kernels.Options{Mode: kernels.ModeCPU, DeviceMemory: *deviceMemory}, b.Named(), b.Attrs)
		if err != nil {
			return nil
		}
		return cres.Failure
	}
	if f == nil {
		rep := Report{Outputs: writeSummary(stdout, op.Name, mode, res)}
		if cpu := onCPU(); cpu != nil {
			// It passes here but fails on the CPU: no outputs to check there.
			rep = Report{CPU: &CPUFailure{Exception: cpu.Exception, Message: cpu.Message}}
		}
		_ = writeReport(stdout, rep)
		fmt.Fprintln(stdout, ReturnedLine)
		return 0
	}
	if cpu := onCPU(); cpu != nil {
		_ = writeReport(stdout, Report{CPU: &CPUFailure{Exception: cpu.Exception, Message: cpu.Message}})
	}
	if mode == kernels.ModeCPU || !f.Device() {
		if err := kernels.WriteCPUFailure(stderr, f); err != nil {
			return harness("writing the failure: %v", err)
		}
		return 1
	}
	blocking := strings.TrimSpace(env("CUDA_LAUNCH_BLOCKING")) == "1"
	o := kernels.TextOptions{LaunchBlocking: blocking, Frames: stepFrames(op, f, blocking)}
	if err := kernels.WriteCUDAFailure(stderr, f, o); err != nil {
		return harness("writing the failure: %v", err)
	}
	if *abort {
		// The caching allocator's teardown meets the sticky error at exit.
		fmt.Fprintf(stderr, "terminate called after throwing an instance of 'c10::Error'\n"+
			"  what():  CUDA error: device-side assert triggered\n"+
			"Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:31 (most recent call first):\n")
		if fl, ok := stderr.(interface{ Sync() error }); ok {
			fl.Sync()
		}
		dieBySignal(syscall.SIGABRT)
	}
	return 1
}

// readView builds the candidate a viewRequest on r describes from the
// mapped source (fixtures.ReadSource, fixtures.Batch.Apply).
func readView(r io.Reader) (*fixtures.Batch, error) {
	var req viewRequest
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		return nil, fmt.Errorf("--view: the request on stdin: %w", err)
	}
	if req.Source == "" || req.View == nil {
		return nil, fmt.Errorf("--view: the request on stdin names no source or no view")
	}
	src, err := fixtures.ReadSource(req.Source)
	if err != nil {
		return nil, err
	}
	return src.Apply(req.View)
}

// Where the emulated training step's frames say the error surfaced. A
// device-side assert is reported asynchronously: at the next call that
// synchronizes (here loss.item()), unless launches are blocking, when it is
// the op's own call (and torch's frames under it).
const torchDir = "/usr/lib/python3/dist-packages/torch"

func stepFrames(op *kernels.Op, f *kernels.Failure, blocking bool) []kernels.Frame {
	frames := []kernels.Frame{{File: "<replay>", Line: 1, Func: "<module>", Source: "train_step(batch)"}}
	if !blocking && f.Async {
		return append(frames, kernels.Frame{File: "<replay>", Line: 9, Func: "train_step",
			Source: `print(f"loss {loss.item():.4f}")`})
	}
	call := op.Signature
	if i := strings.IndexByte(call, '('); i >= 0 {
		call = call[:i] + "(**batch)"
	}
	frames = append(frames, kernels.Frame{File: "<replay>", Line: 6, Func: "train_step", Source: "loss = " + call})
	for _, fr := range f.Frames {
		fr.File = strings.Replace(fr.File, "$TORCH", torchDir, 1)
		frames = append(frames, fr)
	}
	return frames
}

// writeSummary prints one line per output: name, dtype, shape, up to four
// values in row-major order, their sum and the CRC-32 of the values'
// little-endian bytes in row-major order (the same for any layout). It
// returns the outputs as a Report gives them, from the same pass over
// their elements, sorted by name; one with a NaN or an infinity (or a sum
// past float64's range) is left out.
func writeSummary(w io.Writer, op string, mode kernels.Mode, res *kernels.Result) []Output {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	var out []Output
	for _, n := range slices.Sorted(maps.Keys(res.Outputs)) {
		t := res.Outputs[n]
		if t == nil {
			continue
		}
		var first []string
		o := Output{Name: n, DType: t.DType.String(), Shape: append([]int64{}, t.Shape...)}
		finite := true
		h := crc32.NewIEEE()
		es := int64(t.DType.Size())
		t.Each(func(_ []int64, e int64) {
			v := t.LoadFloat(e)
			o.Sum += v
			if len(first) < 4 {
				first = append(first, strconv.FormatFloat(v, 'g', 6, 64))
			}
			h.Write(t.Data[e*es : (e+1)*es])
			finite = finite && !math.IsNaN(v) && !math.IsInf(v, 0)
			o.SumAbs += math.Abs(v)
			if len(o.Values) < MaxReportValues {
				o.Values = append(o.Values, v)
			}
		})
		fmt.Fprintf(bw, "ok %s (%s): %s %s%v first=[%s] sum=%s crc32=%08x\n", op, mode, n, t.DType, t.Shape,
			strings.Join(first, " "), strconv.FormatFloat(o.Sum, 'g', 8, 64), h.Sum32())
		if t.Numel() > MaxReportValues {
			o.Values = nil
		}
		if finite && !math.IsInf(o.Sum, 0) && !math.IsInf(o.SumAbs, 0) {
			out = append(out, o)
		}
	}
	for _, note := range res.Notes {
		fmt.Fprintf(bw, "note: %s\n", note)
	}
	return out
}

// dieBySignal ends the process by sig with the kernel's default action, as
// a C++ abort() does: Go's own handler would print a goroutine dump and
// exit 2. Core dumps are disabled first. It does not return (it exits with
// 128+sig if the signal somehow does not kill).
func dieBySignal(sig syscall.Signal) {
	syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	// struct kernel_sigaction {handler, flags, restorer, mask}: handler 0
	// is SIG_DFL.
	var sa struct {
		handler  uintptr
		flags    uint64
		restorer uintptr
		mask     uint64
	}
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
	runtime.LockOSThread()
	var set unix.Sigset_t
	n := uint(sig) - 1
	set.Val[n/64] |= 1 << (n % 64)
	unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	time.Sleep(2 * time.Second)
	os.Exit(128 + int(sig))
}
