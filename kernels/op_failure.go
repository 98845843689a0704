package kernels

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Failure is a PyTorch error that a run reproduced.
//
// A host-side failure (CPU mode, or a check CUDA does on the host) has no
// Asserts: Exception and Message are what Python prints as the last line of
// the traceback, "Exception: Message".
//
// A device-side failure (CUDA mode) has Asserts: one per GPU thread whose
// CUDA_KERNEL_ASSERT failed, in the order they are printed. Its Exception is
// "RuntimeError" and its Message CUDAErrorMessage ("CUDA error: device-side
// assert triggered" and c10's two advice lines; Line gives the first).
// Device-side failures are asynchronous: the assert lines are printed when the
// kernel runs, but the RuntimeError surfaces at the next call that
// synchronises with the device (a .item(), a copy to the CPU, the next kernel
// launch's error check), unless CUDA_LAUNCH_BLOCKING=1; and the CUDA context
// is then unusable for the rest of the process (cudaErrorAssert is sticky).
// Async is true for them; emulating where the error surfaces is the caller's
// business.
type Failure struct {
	// Op is the op that failed.
	Op string
	// Exception is the Python class: IndexError, RuntimeError, ValueError,
	// AssertionError.
	Exception string
	// Message is str(exception), exactly as torch 1.13 prints it.
	Message string
	// Asserts are the failing device threads (CUDA mode only), all of them;
	// WriteCUDAFailure caps how many it prints.
	Asserts []DeviceAssert
	// AssertThreads counts the failing threads; Asserts holds the first
	// MaxStoredAsserts of them.
	AssertThreads int64
	// Async reports a device-side failure whose Python error is raised at a
	// later synchronising call.
	Async bool
	// Frames are the Python frames inside torch that raise, outermost
	// first (empty for builtins such as torch.gather).
	Frames []Frame
	// Class is the failure's class id: the one package signature's Class
	// gives its printed text ("nll_loss.target_bounds", "gather.bounds",
	// "oom.device", ...), or "" where it gives none. A device assert takes
	// its Site's class; a host failure, the class its constructor names.
	// The op declares it with the check that raises the failure, because
	// kernels may not import signature; TestOpClasses (in
	// internal/signature) renders every op's failures as CPU and CUDA
	// print them and checks that the two agree. Where signature has no
	// rule for a check's text the class is "" (index_select's
	// check_indexarray_range, a Byte target printed as a non-digit
	// character), and a one_hot failure on CUDA is scatter's
	// (gather.bounds): each says what the text shows.
	Class string
}

// Device reports whether the failure is a device-side assert.
func (f *Failure) Device() bool { return len(f.Asserts) > 0 }

// Line is the last line of the traceback: "IndexError: Target 4 is out of
// bounds.". For messages of several lines it is the first of them.
func (f *Failure) Line() string {
	msg := f.Message
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if msg == "" {
		return f.Exception
	}
	return f.Exception + ": " + msg
}

// Error makes a Failure usable as an error.
func (f *Failure) Error() string { return f.Line() }

// Frame is one Python traceback frame.
type Frame struct {
	File   string
	Line   int
	Func   string
	Source string // the source line, without indentation; may be empty
}

// DeviceAssert is one failing CUDA thread.
type DeviceAssert struct {
	Site
	Block  [3]int64
	Thread [3]int64
	// Tensor names the argument holding the bad value; Index is the
	// element's index in it and Value its value.
	Tensor string
	Index  []int64
	Value  float64
}

// Site is where a CUDA_KERNEL_ASSERT sits in PyTorch's source tree.
type Site struct {
	// File is the path inside the source tree,
	// "aten/src/ATen/native/cuda/Loss.cu"; builds print it behind a prefix
	// ("../" for the official wheels).
	File string
	// Line is __LINE__ in the release named by Release.
	Line int
	// Kernel is __func__: the kernel's name, or "operator()" for an assert
	// inside a device lambda.
	Kernel string
	// Expr is the asserted condition as the preprocessor stringifies it.
	Expr string
	// Release says where the line number was seen (or that it is estimated).
	Release string
	// Class is the class id of the check the assert belongs to, as
	// package signature classes its expression (see Failure.Class).
	Class string
}

// The class ids of the checks the ops raise, spelled as package
// signature's Class constants spell them (kernels may not import it;
// TestOpClasses in internal/signature keeps the two in step).
const (
	classNLLTargetBounds = "nll_loss.target_bounds"
	classIndexSelect     = "index_select.bounds"
	classGatherBounds    = "gather.bounds"
	classIndexBounds     = "index.bounds"
	classBCEInputRange   = "bce.input_range"
	classOneHotRange     = "one_hot.class_range"
	classNLLBatchSize    = "nll_loss.batch_size"
	classNLLTargetDim    = "nll_loss.target_dim"
	classNLLTargetSize   = "nll_loss.target_size"
	classScalarType      = "dtype.expected_scalar_type"
	classDeviceOOM       = "oom.device"
	classHostOOM         = "oom.host"
)

// The assert sites of torch 1.13-era builds. File, kernel and expression come
// from PyTorch's sources (aten/src/ATen/native/cuda/*.cu of the 1.13 branch:
// the 2-D reduce kernel then ran in one block of NLL_LOSS_THREADS=32 threads,
// and the no-reduce 4-D kernel had no assert at all, pytorch/pytorch#49882).
// Line numbers move between releases; each names where it was seen. "1.13.1
// conda" lines were read off logs printed by the conda build
// pytorch_1670525541702/pytorch_1670525552843 (December 2022, torch 1.13.1).
var (
	SiteNLLReduce2D = Site{
		File: "aten/src/ATen/native/cuda/Loss.cu", Line: 271,
		Kernel: "nll_loss_forward_reduce_cuda_kernel_2d", Expr: "t >= 0 && t < n_classes",
		Release: "1.12.0 (conda build pytorch_1656352660876); the 1.13 line is not confirmed",
		Class:   classNLLTargetBounds,
	}
	SiteNLLReduce1D = Site{
		File: "aten/src/ATen/native/cuda/Loss.cu", Line: 232,
		Kernel: "nll_loss_forward_reduce_cuda_kernel_1d", Expr: "t >= 0 && t < n_classes",
		Release: "estimated (the 1-D kernel precedes the 2-D one in Loss.cu)",
		Class:   classNLLTargetBounds,
	}
	SiteNLLNoReduce = Site{
		File: "aten/src/ATen/native/cuda/Loss.cu", Line: 208,
		Kernel: "nll_loss_forward_no_reduce_cuda_kernel", Expr: "cur_target >= 0 && cur_target < n_classes",
		Release: "estimated (the no-reduce kernel precedes the 1-D one in Loss.cu)",
		Class:   classNLLTargetBounds,
	}
	SiteNLL2D = Site{
		File: "aten/src/ATen/native/cuda/NLLLoss2d.cu", Line: 104,
		Kernel: "nll_loss2d_forward_kernel", Expr: "t >= 0 && t < n_classes",
		Release: "1.13.1 conda",
		Class:   classNLLTargetBounds,
	}
	SiteIndexSelectSmall = Site{
		File: "aten/src/ATen/native/cuda/Indexing.cu", Line: 1093,
		Kernel: "indexSelectSmallIndex", Expr: "srcIndex < srcSelectDimSize",
		Release: "seen in a public log of a ../aten wheel build; release not confirmed",
		Class:   classIndexSelect,
	}
	SiteIndexSelectLarge = Site{
		File: "aten/src/ATen/native/cuda/Indexing.cu", Line: 1141,
		Kernel: "indexSelectLargeIndex", Expr: "srcIndex < srcSelectDimSize",
		Release: "seen in a public log of a ../aten wheel build; release not confirmed",
		Class:   classIndexSelect,
	}
	SiteScatterGather = Site{
		File: "aten/src/ATen/native/cuda/ScatterGatherKernel.cu", Line: 144,
		Kernel: "operator()", Expr: `idx_dim >= 0 && idx_dim < index_size && "index out of bounds"`,
		Release: "1.13.1 conda",
		Class:   classGatherBounds,
	}
	// SiteScatterFill is the scatter-with-a-value kernel's (one_hot's
	// scatter_). Its class is scatter's, not one_hot's: CUDA's one_hot has
	// no check of its own, so the text of a one_hot failure on CUDA is
	// scatter's assert, and a CPU replay of the same batch raises
	// one_hot.class_range instead (a gap signature documents too).
	SiteScatterFill = Site{
		File: "aten/src/ATen/native/cuda/ScatterGatherKernel.cu", Line: 312,
		Kernel: "operator()", Expr: `idx_dim >= 0 && idx_dim < index_size && "index out of bounds"`,
		Release: "seen in a 2022 Windows (1.12-era) build log; the 1.13 line is not confirmed",
		Class:   classGatherBounds,
	}
	SiteIndex = Site{
		File: "aten/src/ATen/native/cuda/IndexKernel.cu", Line: 91,
		Kernel: "operator()", Expr: `index >= -sizes[i] && index < sizes[i] && "index out of bounds"`,
		Release: "seen in a public log of a ../aten wheel build; release not confirmed",
		Class:   classIndexBounds,
	}
	SiteBCE = Site{
		File: "aten/src/ATen/native/cuda/Loss.cu", Line: 92,
		Kernel: "operator()", Expr: "input_val >= zero && input_val <= one",
		Release: "1.13.1 conda",
		Class:   classBCEInputRange,
	}
)

// Sites lists the assert sites the ops use.
func Sites() []Site {
	return []Site{SiteNLLReduce2D, SiteNLLReduce1D, SiteNLLNoReduce, SiteNLL2D,
		SiteIndexSelectSmall, SiteIndexSelectLarge, SiteScatterGather, SiteScatterFill, SiteIndex, SiteBCE}
}

// TextOptions shape the text WriteCPUFailure and WriteCUDAFailure print.
type TextOptions struct {
	// Frames replace the traceback's frames (outermost first). When nil the
	// traceback has a caller frame (File "<replay>", line 1, in <module>)
	// then the failure's own frames.
	Frames []Frame
	// NoTraceback prints the exception line(s) alone.
	NoTraceback bool
	// TorchDir is where the frames' torch package lives; default
	// "/usr/lib/python3/dist-packages/torch" (Debian's torch 1.13, whose
	// functional.py the frames' line numbers come from).
	TorchDir string

	// CUDA only.

	// PathPrefix goes before each assert's File; default "../" (the
	// official wheels). Conda builds print
	// "/opt/conda/conda-bld/pytorch_<ts>/work/"; with a prefix holding a
	// backslash (Windows builds) the File's slashes become backslashes.
	PathPrefix string
	// MaxLines caps the assert lines: 0 means 128, negative means all. A real
	// GPU prints every failing thread (up to its printf buffer); the cap keeps
	// logs readable and is documented here, not PyTorch behaviour.
	MaxLines int
	// LaunchBlocking emulates CUDA_LAUNCH_BLOCKING=1, under which 1.13 prints
	// no advice lines after the error.
	LaunchBlocking bool
	// NoFunction drops the kernel name, as MSVC builds print the lines.
	NoFunction bool
}

const defaultTorchDir = "/usr/lib/python3/dist-packages/torch"

// CUDAErrorMessage is str(RuntimeError) for a device-side assert in torch
// 1.13, with CUDA_LAUNCH_BLOCKING unset: c10's CUDA check appends the advice,
// with the missing space after "call," that 1.10 to 1.13 print.
const CUDAErrorMessage = "CUDA error: device-side assert triggered\n" +
	"CUDA kernel errors might be asynchronously reported at some other API call,so the stacktrace below might be incorrect.\n" +
	"For debugging consider passing CUDA_LAUNCH_BLOCKING=1."

// FormatAssert renders one assert line as CUDA's __assert_fail prints it.
func FormatAssert(a DeviceAssert, o TextOptions) string {
	prefix := o.PathPrefix
	if prefix == "" {
		prefix = "../"
	}
	fn := a.Kernel + ": "
	if o.NoFunction {
		fn = ""
	}
	file := a.File
	if strings.Contains(prefix, `\`) {
		file = strings.ReplaceAll(file, "/", `\`)
	}
	return fmt.Sprintf("%s%s:%d: %sblock: [%d,%d,%d], thread: [%d,%d,%d] Assertion `%s` failed.",
		prefix, file, a.Line, fn,
		a.Block[0], a.Block[1], a.Block[2], a.Thread[0], a.Thread[1], a.Thread[2], a.Expr)
}

// WriteCPUFailure prints f as Python prints an uncaught torch exception: a
// traceback ending in "IndexError: Target 4 is out of bounds.".
func WriteCPUFailure(w io.Writer, f *Failure) error {
	return WriteCPUFailureOptions(w, f, TextOptions{})
}

// WriteCPUFailureOptions is WriteCPUFailure with options.
func WriteCPUFailureOptions(w io.Writer, f *Failure, o TextOptions) error {
	bw := bufio.NewWriter(w)
	writeTraceback(bw, f, o)
	fmt.Fprintf(bw, "%s: %s\n", f.Exception, f.Message)
	return bw.Flush()
}

// WriteCUDAFailure prints f as a torch 1.13 CUDA process prints it: the
// device's assert lines (at most o.MaxLines), then the traceback and the
// RuntimeError with c10's advice lines. A host-side failure prints as on CPU.
func WriteCUDAFailure(w io.Writer, f *Failure, o TextOptions) error {
	if !f.Device() {
		return WriteCPUFailureOptions(w, f, o)
	}
	bw := bufio.NewWriter(w)
	max := o.MaxLines
	if max == 0 {
		max = 128
	}
	for i, a := range f.Asserts {
		if max > 0 && i >= max {
			break
		}
		fmt.Fprintln(bw, FormatAssert(a, o))
	}
	writeTraceback(bw, f, o)
	msg := CUDAErrorMessage
	if o.LaunchBlocking {
		msg = "CUDA error: device-side assert triggered"
	}
	fmt.Fprintf(bw, "RuntimeError: %s\n", msg)
	return bw.Flush()
}

func writeTraceback(w io.Writer, f *Failure, o TextOptions) {
	if o.NoTraceback {
		return
	}
	frames := o.Frames
	if frames == nil {
		dir := o.TorchDir
		if dir == "" {
			dir = defaultTorchDir
		}
		frames = append(frames, Frame{File: "<replay>", Line: 1, Func: "<module>"})
		for _, fr := range f.Frames {
			fr.File = strings.Replace(fr.File, "$TORCH", dir, 1)
			frames = append(frames, fr)
		}
	}
	fmt.Fprintln(w, "Traceback (most recent call last):")
	for _, fr := range frames {
		fmt.Fprintf(w, "  File %q, line %d, in %s\n", fr.File, fr.Line, fr.Func)
		if fr.Source != "" {
			fmt.Fprintf(w, "    %s\n", fr.Source)
		}
	}
}

// Python frames inside torch 1.13 (functional.py and _reduction.py as
// Debian's 1.13 ships them; line numbers differ by a few in other builds).
var (
	frameCrossEntropy = Frame{File: "$TORCH/nn/functional.py", Line: 3026, Func: "cross_entropy",
		Source: "return torch._C._nn.cross_entropy_loss(input, target, weight, _Reduction.get_enum(reduction), ignore_index, label_smoothing)"}
	frameNLLLoss = Frame{File: "$TORCH/nn/functional.py", Line: 2701, Func: "nll_loss",
		Source: "return torch._C._nn.nll_loss_nd(input, target, weight, _Reduction.get_enum(reduction), ignore_index)"}
	frameEmbedding = Frame{File: "$TORCH/nn/functional.py", Line: 2210, Func: "embedding",
		Source: "return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)"}
	frameEmbeddingPadPos = Frame{File: "$TORCH/nn/functional.py", Line: 2192, Func: "embedding",
		Source: `assert padding_idx < weight.size(0), "Padding_idx must be within num_embeddings"`}
	frameEmbeddingPadNeg = Frame{File: "$TORCH/nn/functional.py", Line: 2194, Func: "embedding",
		Source: `assert padding_idx >= -weight.size(0), "Padding_idx must be within num_embeddings"`}
	frameBCE = Frame{File: "$TORCH/nn/functional.py", Line: 3095, Func: "binary_cross_entropy",
		Source: "return torch._C._nn.binary_cross_entropy(input, target, weight, reduction_enum)"}
	frameBCESize = Frame{File: "$TORCH/nn/functional.py", Line: 3086, Func: "binary_cross_entropy",
		Source: "raise ValueError("}
	frameBCEWeight = Frame{File: "$TORCH/nn/functional.py", Line: 3092, Func: "binary_cross_entropy",
		Source: "new_size = _infer_size(target.size(), weight.size())"}
	frameBCEReduction = Frame{File: "$TORCH/nn/functional.py", Line: 3084, Func: "binary_cross_entropy",
		Source: "reduction_enum = _Reduction.get_enum(reduction)"}
	frameGetEnum = Frame{File: "$TORCH/nn/_reduction.py", Line: 19, Func: "get_enum",
		Source: `raise ValueError("{} is not a valid value for reduction".format(reduction))`}
)
