package signature

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Signature identifies a failure well enough to tell whether a replay
// reproduced the recorded one or slipped onto a different bug. Parse builds
// it from a replay's stderr and exit status with the volatile parts (thread
// and block ids, paths, line numbers, addresses, pids, rank prefixes, sizes,
// generated Inductor names) normalized away.
//
// Fields:
//
//   - Family is one of the Family* constants.
//   - Backend is "cuda", "hip", "cpu", "triton" (Inductor/Triton generated
//     kernels) or "", derived from markers in the text (see Parse). It is
//     informational: no match level compares it, so a CUDA and a HIP build
//     of the same assert match.
//   - Kernel is the device kernel's function name for device asserts
//     (nll_loss_forward_reduce_cuda_kernel_2d), the torch.nn.functional
//     function for CPU exceptions raised inside it (cross_entropy), the op
//     of a device mismatch (addmm), the autograd Function of a NaN anomaly
//     (MulBackward0), or "" when unknown.
//   - Expression is the part that says which check failed: the assert's
//     source expression for device asserts, "<ExceptionClass>: <message with
//     every integer replaced by N>" for host exceptions, a canonical text for
//     the CUDA error families, "killed by SIGSEGV" for signals.
//   - File is set only for a device assert whose text does not show the
//     assert itself but names the source file that reported it (THC's
//     "cuda runtime error (59) : device-side assert triggered at
//     .../SpatialClassNLLCriterion.cu:111", an assert line cut before its
//     expression): the file's base name, when the file is one that raises
//     asserts (Classes maps it to the asserts it can raise). Partial
//     information, never a wildcard.
//   - Exception is the exception class as printed (RuntimeError,
//     torch.AcceleratorError, torch.cuda.OutOfMemoryError, c10::Error) or the
//     signal name for signal families. Informational: not compared, since
//     the class of one failure changes between releases.
//
// In JSON, empty fields other than family are left out.
type Signature struct {
	Family     Family `json:"family"`
	Backend    string `json:"backend,omitempty"`
	Kernel     string `json:"kernel,omitempty"`
	Expression string `json:"expression,omitempty"`
	File       string `json:"file,omitempty"`
	Exception  string `json:"exception,omitempty"`
}

// Family is a failure's kind: one of the constants below, a closed set
// (Families lists it). It is a string in JSON and on the command line.
type Family string

// Failure families.
const (
	// FamilyDeviceAssert: a kernel assert fired on the device
	// (CUDA_KERNEL_ASSERT, HIP "Device-side assertion", Triton/Inductor
	// bounds asserts, THC "cuda runtime error (59)"). With no assert line
	// in the text it is a device assert of unknown kind (Expression and
	// File empty), or of its file's kinds (File set).
	FamilyDeviceAssert Family = "device_assert"
	// FamilyIllegalAddress: CUDA error 700, "an illegal memory access was
	// encountered".
	FamilyIllegalAddress Family = "illegal_address"
	// FamilyLaunchFailure: CUDA error 719 / HIP "unspecified launch failure"
	// with no assert line to say more.
	FamilyLaunchFailure Family = "launch_failure"
	// FamilyMisaligned: CUDA error 716, "misaligned address".
	FamilyMisaligned Family = "misaligned"
	// FamilyROCmMemFault: the ROCm runtime's "Memory access fault by GPU
	// node-N ... Reason: ..." (the process then aborts).
	FamilyROCmMemFault Family = "rocm_memfault"
	// FamilyOOM: device ("CUDA out of memory", torch.cuda.OutOfMemoryError,
	// torch.OutOfMemoryError, THC's "cuda runtime error (2) : out of
	// memory", "HIP out of memory") or host (DefaultCPUAllocator,
	// std::bad_alloc, MemoryError) allocation failure; Expression tells the
	// two apart, for information: at strict an OOM reproduces any OOM.
	FamilyOOM Family = "oom"
	// FamilyCUBLASError: cuBLAS (or hipBLAS) returned a status other than
	// success: "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling
	// `cublasSgemm( handle, ...)`", THC's "cublas runtime error : the GPU
	// program failed to execute". Expression is the status
	// (CUBLAS_STATUS_EXECUTION_FAILED); the call is dropped.
	// CUBLAS_STATUS_ALLOC_FAILED is one too, not oom: cublasCreate fails
	// so when the context or driver is broken as often as when memory is
	// short.
	FamilyCUBLASError Family = "cublas_error"
	// FamilyCUDNNError: cuDNN returned a status other than success:
	// "cuDNN error: CUDNN_STATUS_EXECUTION_FAILED". Expression is the
	// status (CUDNN_STATUS_ALLOC_FAILED included).
	FamilyCUDNNError Family = "cudnn_error"
	// FamilyCUDAError: a CUDA (or HIP) runtime error that no other family
	// claims: THC's "cuda runtime error (N) : <message>" and "CUDA error:
	// <message>" for codes other than the device assert (59, 710), out of
	// memory (2), illegal address (77, 700), launch failure (4, 719),
	// misaligned address (74, 716) and the infra ones (no device, no kernel
	// image, driver too old). Expression is the message ("invalid
	// configuration argument"), without the code (which changed between
	// CUDA versions) and the file.
	FamilyCUDAError Family = "cuda_error"
	// FamilyHostCheck: an exception raised on the host: shape, dtype and
	// bounds checks of CPU kernels (see Parse for why CPU bounds errors are
	// here and not under device_assert), and every exception that no other
	// family claims. Expression carries "<class>: <normalized message>".
	FamilyHostCheck Family = "host_check"
	// FamilyNaNAnomaly: a value went NaN or infinite and something checked:
	// autograd anomaly mode ("Function 'MulBackward0' returned nan values in
	// its 0th output."), or a finiteness check that raised (the user's own,
	// "FloatingPointError: loss is nan"; clip_grad_norm_'s
	// error_if_nonfinite). Expression carries "<class>: <normalized
	// message>" for a check, as for a host check.
	FamilyNaNAnomaly Family = "nan_anomaly"
	// FamilyDeviceMismatch: "Expected all tensors to be on the same device".
	FamilyDeviceMismatch Family = "device_mismatch"
	// FamilyAbortSignal: killed by SIGABRT with nothing more specific in the
	// text (an uncaught C++ exception of unknown meaning, os.abort()).
	FamilyAbortSignal Family = "abort_signal"
	// FamilyCrashSignal: killed by SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGTRAP.
	FamilyCrashSignal Family = "crash_signal"
	// FamilyTimeout: the runner killed the replay at its deadline.
	FamilyTimeout Family = "timeout"
	// FamilyPass: exit status 0.
	FamilyPass Family = "pass"
	// FamilyInfra: the replay could not be judged: the harness failed, the
	// environment is broken (import errors, no GPU, no kernel image for the
	// device), or the process was killed from outside (SIGKILL, SIGTERM, ...).
	FamilyInfra Family = "infra"
)

// Backends, the values of Signature.Backend besides "".
const (
	BackendCUDA   = "cuda"
	BackendHIP    = "hip"
	BackendCPU    = "cpu"
	BackendTriton = "triton"
)

// Families returns every family, failing ones first.
func Families() []Family {
	out := make([]Family, len(families))
	for i, f := range families {
		out[i] = f.family
	}
	return out
}

// families are what is fixed per family, failing ones first: whether it is
// a failure of the device itself (deviceSide: one that leaves the context
// broken, so that a crash or an abort at teardown after it is its
// consequence rather than another bug), and its class when the family has
// one for every signature of it (a family whose checks have classes of
// their own, by op or by expression, says "" and is handled in Class).
// A family is its constant, its line here, the texts parse.go reads as it,
// and its first checks in report.md.
var families = []struct {
	family     Family
	deviceSide bool
	class      string
}{
	{FamilyDeviceAssert, true, ""},
	{FamilyIllegalAddress, true, ClassIllegalAddress},
	{FamilyLaunchFailure, true, ClassLaunchFailure},
	{FamilyMisaligned, true, ClassMisalignedAccess},
	{FamilyROCmMemFault, true, ClassMemoryFault},
	{FamilyOOM, false, ""},
	{FamilyCUBLASError, false, ""},
	{FamilyCUDNNError, false, ""},
	{FamilyCUDAError, true, ""},
	{FamilyHostCheck, false, ""},
	{FamilyNaNAnomaly, false, ""},
	{FamilyDeviceMismatch, false, ClassDeviceMismatch},
	{FamilyAbortSignal, false, ""},
	{FamilyCrashSignal, false, ""},
	{FamilyTimeout, false, ""},
	{FamilyPass, false, ""},
	{FamilyInfra, false, ""},
}

// Failing reports whether s is a failure that can stand for a reproduction:
// any non-empty family except pass, timeout and infra. A timeout is not
// counted because a slow candidate is no evidence of the bug; infra is not a
// verdict on the candidate at all.
func Failing(s Signature) bool {
	switch s.Family {
	case "", FamilyPass, FamilyTimeout, FamilyInfra:
		return false
	}
	return true
}

// String renders s on one line:
// "family(backend) kernel: expression [exception]", leaving out empty parts.
func (s Signature) String() string {
	var b strings.Builder
	b.WriteString(string(s.Family))
	if b.Len() == 0 {
		b.WriteString("unknown")
	}
	if s.Backend != "" {
		b.WriteString("(" + s.Backend + ")")
	}
	if s.Kernel != "" {
		b.WriteString(" " + s.Kernel)
		if s.Expression != "" {
			b.WriteString(":")
		}
	}
	if s.Expression != "" {
		b.WriteString(" " + s.Expression)
	}
	if s.File != "" {
		b.WriteString(" at " + s.File)
	}
	if s.Exception != "" {
		b.WriteString(" [" + s.Exception + "]")
	}
	return b.String()
}

// MatchLevel says how closely a replay's signature must agree with the
// recorded one to count as a reproduction.
type MatchLevel string

const (
	// MatchStrict (the default): the same failure: the same known check
	// (Class) whatever the build printed it, else (see Judge.Rule) the
	// same family, kernel, expression and file (Matches).
	MatchStrict MatchLevel = "strict"
	// MatchFamily: same family, or what strict accepts (a CPU exception
	// for a device assert of the same class).
	MatchFamily MatchLevel = "family"
	// MatchAny: the candidate is Failing (any family except pass, timeout
	// and infra), whatever the recorded failure was.
	MatchAny MatchLevel = "any"
)

// MatchLevels lists the valid levels, the default first.
func MatchLevels() []MatchLevel { return []MatchLevel{MatchStrict, MatchFamily, MatchAny} }

// String returns the flag spelling of l.
func (l MatchLevel) String() string { return string(l) }

// ErrMatchLevel is wrapped by ParseMatchLevel's errors.
var ErrMatchLevel = errors.New("invalid match level")

// ParseMatchLevel parses a --match flag value: "strict", "family" or "any"
// (case-insensitive, surrounding space ignored); "" means strict.
func ParseMatchLevel(s string) (MatchLevel, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == "" {
		return MatchStrict, nil
	}
	for _, l := range MatchLevels() {
		if v == string(l) {
			return l, nil
		}
	}
	return "", fmt.Errorf("%w %q: valid levels are strict (the default), family and any", ErrMatchLevel, s)
}

// Matches reports whether s, a replay's signature, agrees with want, the
// recorded one, at level, by their texts alone. When want itself is not
// Failing (a recorded timeout, pass or infra) every level asks for the same
// family, so that a recorded hang is reduced to candidates that hang. An
// unknown level is treated as MatchStrict.
//
// At MatchStrict: same family, same expression, same file, and same kernel.
// A kernel left empty on either side (an MSVC build prints no function
// name; a CPU exception may show no torch frame; old Triton prints
// "unknown") matches any kernel; kernel names are compared after folding
// known aliases (THC-era names onto ATen ones, indexSelectSmallIndex onto
// indexSelectLargeIndex: which of the two runs depends on the number of
// indices, so removing samples can switch it). An empty expression is no
// wildcard: a device assert that names no assert (only "device-side assert
// triggered") matches only another that names none; see Judge.Rule for the
// classes, and refines for what a Judge allows when the recording
// names no assert.
//
// The backend and the exception class are never compared: the same assert
// from a CUDA and a HIP build, or raised as RuntimeError before 2.8 and as
// torch.AcceleratorError after, is the same failure.
func (s Signature) Matches(want Signature, level MatchLevel) bool {
	if !Failing(want) {
		return s.Family == want.Family
	}
	switch level {
	case MatchAny:
		return Failing(s)
	case MatchFamily:
		return s.Family == want.Family
	}
	if s.Family != want.Family || s.Expression != want.Expression || fileStem(s.File) != fileStem(want.File) {
		return false
	}
	return s.Kernel == "" || want.Kernel == "" || canonicalKernel(s.Kernel) == canonicalKernel(want.Kernel)
}

// kernelAliases folds kernel names that stand for one check. THC-era
// (PyTorch <= 1.4) THCUNN kernels fold onto their ATen successors.
var kernelAliases = map[string]string{
	"indexSelectSmallIndex":                             "indexSelectLargeIndex",
	"cunn_ClassNLLCriterion_updateOutput_kernel":        "nll_loss_forward_reduce_cuda_kernel_2d",
	"cunn_SpatialClassNLLCriterion_updateOutput_kernel": "nll_loss2d_forward_kernel",
}

func canonicalKernel(k string) string {
	if a, ok := kernelAliases[k]; ok {
		return a
	}
	return k
}

// ExitInfo is how a replay process ended, as the runner saw it.
//
//   - Code is the exit status. Go's (*os.ProcessState).ExitCode() gives -1
//     for a process killed by a signal; Python's subprocess gives -N; a shell
//     wrapper gives 128+N. All three are understood when Signal is 0 (a Code
//     of -1 alone means "unknown" and is infra).
//   - Signal is the number of the signal that killed the process, 0 if it
//     exited (syscall.WaitStatus.Signal()).
//   - TimedOut is set when the runner killed it at its deadline.
//   - Harness is set when the worker reported a harness failure (its
//     reserved exit code, replay.HarnessExitCode): the replay did not run the
//     candidate.
//   - Canceled is set when the runner interrupted the process for a reason
//     of its own (its context was done): the outcome says nothing about the
//     candidate.
//   - Fault, when set, says how the worker itself died or ended early (the
//     go worker's runtime out of memory, a worker that exited 0 before the
//     step returned): a harness fault, never the candidate's failure.
//
// From the Runner's Result: ExitInfo{Code: r.ExitCode, Signal:
// int(r.Signal), TimedOut: r.TimedOut, Harness: r.Harness, Canceled:
// r.Canceled}.
type ExitInfo struct {
	Code     int    `json:"code"`
	Signal   int    `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	Harness  bool   `json:"harness,omitempty"`
	Canceled bool   `json:"canceled,omitempty"`
	Fault    string `json:"fault,omitempty"`
}

// signal returns the signal that ended the process, or 0.
func (e ExitInfo) signal() int {
	switch {
	case e.Signal > 0:
		return e.Signal
	case e.Code < -1 && e.Code >= -64:
		return -e.Code
	case e.Code > 128 && e.Code <= 128+64:
		return e.Code - 128
	}
	return 0
}

var signalNames = map[int]string{
	int(syscall.SIGHUP): "SIGHUP", int(syscall.SIGINT): "SIGINT", int(syscall.SIGQUIT): "SIGQUIT",
	int(syscall.SIGILL): "SIGILL", int(syscall.SIGTRAP): "SIGTRAP", int(syscall.SIGABRT): "SIGABRT",
	int(syscall.SIGBUS): "SIGBUS", int(syscall.SIGFPE): "SIGFPE", int(syscall.SIGKILL): "SIGKILL",
	int(syscall.SIGSEGV): "SIGSEGV", int(syscall.SIGPIPE): "SIGPIPE", int(syscall.SIGALRM): "SIGALRM",
	int(syscall.SIGTERM): "SIGTERM",
}

func signalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return fmt.Sprintf("signal %d", n)
}

// signalNumber maps "SIGSEGV" (or "SEGV") to its number, or 0.
func signalNumber(name string) int {
	name = strings.ToUpper(name)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	for n, s := range signalNames {
		if s == name {
			return n
		}
	}
	return 0
}

func isCrashSignal(n int) bool {
	switch syscall.Signal(n) {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGTRAP:
		return true
	}
	return false
}

// deviceSide reports whether family is a failure of the device itself: one
// that leaves the context broken, so that a crash at teardown is its
// consequence rather than another bug.
func deviceSide(family Family) bool {
	for _, f := range families {
		if f.family == family {
			return f.deviceSide
		}
	}
	return false
}

// inductorCPUCheck starts the normalized message of the bound check in
// Inductor's generated C++ (torch/_inductor/codegen/cpp.py: TORCH_CHECK with
// "index out of bounds: 0 <= tmpN < size", prefixed by the kernel's file),
// and inductorCPUThrow its uncaught C++ form's expression.
const (
	inductorCPUCheck = "kernel, torchinductor, index out of bounds: "
	inductorCPUThrow = "std::runtime_error: " + inductorCPUCheck
)

// Parse builds the signature of one replay from its stderr and how it ended.
//
// Exit status first:
//
//   - TimedOut → timeout; Harness, Fault or Canceled → infra (whatever the
//     text says; a Fault is the Expression).
//   - Code 0 and no signal → pass. The exit status is the authority on
//     whether the run failed; the text only says how. A run that exits 0 is
//     a pass even when it printed garbage, warnings or a traceback it
//     recovered from (a Dynamo fallback, a retried DataLoader worker).
//   - SIGKILL → infra: as in Go's internal/fuzz, a SIGKILL is not taken for
//     a crash of the candidate. It comes from outside: the kernel's OOM
//     killer, a person, a scheduler. (A runner's own deadline kill is
//     reported as TimedOut.) Other signals that come from outside (SIGTERM,
//     SIGINT, SIGHUP, SIGQUIT, SIGPIPE, ...) → infra as well.
//   - SIGABRT → the family the text shows when it shows something specific
//     (a CUDA assert or error carried by "terminate called after throwing an
//     instance of 'c10::Error'", a ROCm memory fault, an OOM): the abort is
//     how the C++ runtime reports it. Otherwise abort_signal, with the C++
//     exception class and its normalized what() message when printed.
//   - SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP → crash_signal, unless the
//     text shows a device-side failure first (device_assert,
//     illegal_address, launch_failure, misaligned, rocm_memfault): a broken
//     CUDA context often crashes at teardown.
//   - Any other non-zero exit → the family the text shows; with nothing
//     recognizable, host_check with Expression "exit status N" (a user
//     command may signal its failure by exit status alone).
//
// A torchrun or torch.multiprocessing parent that reports a child killed by
// a signal ("Signal 11 (SIGSEGV) received by PID ...", "process 0 terminated
// with signal SIGSEGV") is treated as killed by that signal when its text
// shows nothing more specific.
//
// Then the text, line by line after stripping ANSI colours, carriage returns
// and rank prefixes ([rank3]:, [default0]:, "0: ", "[1,0]<stderr>:"):
//
//   - The FIRST device assert line gives kernel and expression (the first
//     failing thread; thousands may follow): CUDA
//     "<path>:<line>: <kernel>: block: [x,y,z], thread: [x,y,z] Assertion
//     `<expr>` failed." (MSVC builds print no kernel), HIP "<path>:<line>:
//     <kernel>: Device-side assertion `<expr>' failed.", Triton
//     "unknown:0: unknown: block: ..." or a torchinductor_<user>/... path.
//     Kernel names lose return types, template and parameter lists, "[with
//     ...]" and namespaces (THC printed "void
//     cunn_ClassNLLCriterion_updateOutput_kernel(Dtype *, ...) [with Dtype =
//     float]"); Inductor names lose their trailing "_<n>"; "unknown" is "".
//     Expressions keep their numbers (they are source text, and a bound like
//     the 32000 of "0 <= tmp4 < 32000" is a shared dimension that does not
//     change when samples are removed) but generated tmpN names become tmp.
//     Lines that threads printing at once cut and mixed are reassembled:
//     the expression is read between "Assertion `" and the first "`
//     failed", another thread's ids or path glued to its end are dropped,
//     and the kernel and file come from the last intact "<path>:<line>:
//     <kernel>: block: [" of the line or from a cut line's start printed
//     before it (",0,0], thread: [60,0:115,0] Assertion `...` failed." is
//     gather's assert). A cut start alone gives kernel and File, no
//     expression.
//   - With no assert line, a device assert names the file that reported it
//     when THC or c10 says where ("cuda runtime error (59) :
//     device-side assert triggered at .../SpatialClassNLLCriterion.cu:111",
//     "THCudaCheck FAIL file=...", "Exception raised from ... at
//     .../ScatterGatherKernel.cu") and that file raises asserts (Classes);
//     a file that only noticed an asynchronous error (THCTensorMath.cu,
//     CUDAException.cpp) names nothing, and the assert is of unknown kind.
//   - Otherwise the exception of the LAST Python traceback (a launcher's
//     wrapper, torchrun's ChildFailedError or torch.multiprocessing's
//     ProcessExitedException / ProcessRaisedException, is passed over for
//     the traceback before it, or for the child's traceback nested in its
//     message) and the what() of "terminate called after throwing an
//     instance of 'X'" are classified (a specific family from either beats
//     host_check from the other, the traceback first); with neither, the
//     last bare "SomethingError: message" line is. A message is classified
//     by its class and first line: device-side assert triggered /
//     cuda runtime error (59) / Triton Error / Inductor's "index out of
//     bounds: 0 <= tmpN < ..." on a line of its own → device_assert;
//     CUDA/HIP errors 700 (THC's 77), 719 (4), 716 → illegal_address,
//     launch_failure, misaligned; out of memory texts and classes (THC's
//     "cuda runtime error (2) : out of memory", CUDA's and HIP's "out of
//     memory", torch.cuda.OutOfMemoryError, torch.OutOfMemoryError, the
//     CPU allocator's) → oom; CUBLAS_STATUS_* (and THC's "cublas runtime
//     error : <message>", read as its status) → cublas_error; cuDNN's
//     CUDNN_STATUS_* → cudnn_error; any other "cuda runtime error (N) :
//     <message>" or "CUDA error: <message>" → cuda_error, after the infra
//     ones below; "returned nan values" →
//     nan_anomaly; "Expected all tensors to be on the same device" →
//     device_mismatch; ModuleNotFoundError, ImportError, SyntaxError,
//     KeyboardInterrupt, "no CUDA GPUs are available", "no kernel image is
//     available", "Torch not compiled with CUDA enabled" and the like →
//     infra; a finiteness check → nan_anomaly, with the Expression a host
//     check would have: a FloatingPointError, or a ValueError,
//     RuntimeError, AssertionError, ArithmeticError, OverflowError or a
//     user's own ...Error class whose message has "nan", "inf",
//     "infinity", "non-finite", "nonfinite", "not finite", "is infinite",
//     "isfinite", "isnan" or "isinf" as a word (the user's "loss is nan",
//     clip_grad_norm_'s "... is non-finite, so it cannot be clipped",
//     Lightning's "The loss returned in `training_step` is nan."), unless
//     it is a torch op's check with a class of its own (multinomial's
//     "contains either `inf`, `nan` or element < 0" stays host_check, the
//     CPU side of a device assert), GradScaler's "No inf checks were
//     recorded" or an "infinity norm"; anything else → host_check.
//   - With no exception at all, the first line anywhere that carries one of
//     those markers (a ROCm "Memory access fault by GPU node-N", a CUDA
//     error in a log line; never a "...Warning:" line) decides, when it
//     shows a family other than host_check.
//
// CPU exceptions and host_check. PyTorch's CPU kernels check bounds on the
// host and raise (IndexError: Target 4 is out of bounds.; index out of range
// in self; index 9 is out of bounds for dimension 1 with size 4; Class values
// must be smaller than num_classes.; all elements of input should be between
// 0 and 1). They are the CPU counterparts of the device asserts, but they
// are exceptions raised by a host-side check, recoverable, with no device
// context to break, so they are host_check — as are the shape and dtype
// checks (Expected input batch_size (3) to match target batch_size (2).).
// Calling them device_assert would make a CPU run look like a GPU one; the
// link between the two is Class, which maps both the CUDA assert and the
// CPU message of one op to one class id (nll_loss.target_bounds). The
// strict key of a host_check is its Expression, "<class>: <message>" with
// every integer replaced by N (targets, indices and sizes all change when
// samples are removed), so "Target 4" and "Target 7" match while the
// IndexError of x[idx] and the RuntimeError of gather, whose messages are
// otherwise the same, do not. Kernel is the torch.nn.functional (or
// torch.functional) function of the innermost traceback frame when that
// frame is one, else "".
//
// CPU exceptions of earlier eras are host checks too, and Class maps them
// onto the same classes: THNN's "Assertion `cur_target >= 0 && cur_target
// < n_classes' failed.  at .../ClassNLLCriterion.c:93" (<= 1.4), TH's
// "index out of range: Tried to access index 10 out of table with 9 rows.
// at .../THTensorEvenMoreMath.cpp:418", "Invalid index in gather".
//
// Backend: triton when the text shows Triton or Inductor (Triton Error,
// torchinductor_ paths, triton_ kernels, "unknown:0: unknown:" asserts); hip
// for HIP markers (HIP error, .hip paths, Device-side assertion, Memory
// access fault by GPU, AMD_SERIALIZE_KERNEL); cuda for CUDA markers (CUDA
// error, .cu paths, cuda runtime error, CUDA out of memory, cuda:N devices,
// wrapper_CUDA_ methods); otherwise cpu for host_check, nan_anomaly,
// device_mismatch and a host OOM, and "" for the rest (pass, timeout, infra,
// bare signals, a device OOM of another accelerator). A host check
// raised for CUDA tensors prints no CUDA marker and so reads as cpu: the
// backend is best effort, and no match level compares it.
//
// Parse never fails and is deterministic; input beyond 2 MiB is read as its
// first and last MiB.
func Parse(stderr []byte, exit ExitInfo) Signature {
	if exit.TimedOut {
		return Signature{Family: FamilyTimeout}
	}
	if exit.Fault != "" {
		return Signature{Family: FamilyInfra, Expression: exit.Fault}
	}
	if exit.Harness {
		return Signature{Family: FamilyInfra, Expression: "harness failure"}
	}
	if exit.Canceled {
		return Signature{Family: FamilyInfra, Expression: "canceled"}
	}
	if exit.Code == 0 && exit.Signal == 0 {
		return Signature{Family: FamilyPass}
	}
	t := analyze(stderr)
	found, specific := t.sig.Family != "", t.sig.Family != "" && t.sig.Family != FamilyHostCheck
	sig := exit.signal()
	if sig == 0 && t.childSignal != 0 && !specific {
		sig = t.childSignal
	}
	switch {
	case sig == int(syscall.SIGKILL):
		return Signature{Family: FamilyInfra, Expression: "killed by SIGKILL", Exception: "SIGKILL"}
	case sig == int(syscall.SIGABRT):
		if specific {
			return t.sig
		}
		if rest, ok := strings.CutPrefix(t.abortExpr, inductorCPUThrow); ok && t.abortClass == "std::runtime_error" {
			// Inductor's C++ bound check throws inside the kernel's OpenMP
			// region when it runs on more than one thread, which ends in
			// terminate; on one thread the same check raises RuntimeError.
			// One check: judged as its raise (the recording's, when the
			// process that aborted recorded nothing).
			return Signature{Family: FamilyHostCheck, Backend: BackendCPU, Expression: "RuntimeError: " + inductorCPUCheck + rest, Exception: "RuntimeError"}
		}
		s := Signature{Family: FamilyAbortSignal, Backend: t.backend, Exception: "SIGABRT"}
		switch {
		case t.abortClass != "":
			s.Kernel, s.Expression, s.Exception = t.abortKernel, t.abortExpr, t.abortClass
		case found:
			s.Kernel, s.Expression, s.Exception = t.sig.Kernel, t.sig.Expression, t.sig.Exception
		}
		return s
	case isCrashSignal(sig):
		if deviceSide(t.sig.Family) {
			return t.sig
		}
		return Signature{Family: FamilyCrashSignal, Expression: "killed by " + signalName(sig), Exception: signalName(sig)}
	case sig != 0:
		return Signature{Family: FamilyInfra, Expression: "killed by " + signalName(sig), Exception: signalName(sig)}
	}
	if found {
		return t.sig
	}
	if exit.Code < 0 {
		return Signature{Family: FamilyInfra, Expression: "unknown exit status"}
	}
	return Signature{Family: FamilyHostCheck, Expression: fmt.Sprintf("exit status %d", exit.Code)}
}

// refines reports whether got, a replay's signature, says more about the
// failure recorded as recorded than recorded itself does, so that the
// reduction should keep got as the failure it matches candidates against:
// recorded is a device assert that names no assert (the recorder keeps the
// exception's text, "CUDA error: device-side assert triggered", while the
// assert line went to the process's output), or only the file that
// reported it; and got is a device assert that names its check, of one of
// that file's classes when recorded names a file (or names the file, when
// recorded names nothing).
func refines(got, recorded Signature) bool {
	if recorded.Family != FamilyDeviceAssert || got.Family != FamilyDeviceAssert || recorded.Expression != "" {
		return false
	}
	if got.Expression == "" && (got.File == "" || recorded.File != "") {
		return false // no more than the recording says
	}
	if recorded.File == "" {
		return true
	}
	set := recorded.Classes()
	if len(set) == 0 {
		return got.File == recorded.File
	}
	return anyClassIn(got.Classes(), set)
}

// Partial says, for a device assert that does not name its check, what it
// does name ("names no assert (only \"device-side assert triggered\")",
// "names only the file SpatialClassNLLCriterion.cu (nll_loss.target_bounds)"),
// and "" for any other signature. Reports put it after "the recording" or
// "the failure".
func (s Signature) Partial() string {
	if s.Family != FamilyDeviceAssert || s.Expression != "" {
		return ""
	}
	if s.File == "" {
		return `names no assert (only "device-side assert triggered")`
	}
	if cs := s.Classes(); len(cs) > 0 {
		return "names only the file " + s.File + " (" + strings.Join(cs, ", ") + ")"
	}
	return "names only the file " + s.File
}

// Recorded is the signature of a failure recorded as text (a batch file's
// error): the recorder keeps the error's text, not the process's exit, so
// it is read as an uncaught exception's (exit status 1).
func Recorded(text string) Signature {
	return Parse([]byte(text), ExitInfo{Code: 1})
}
