package signature

import (
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 14, "Signatures that hold across builds": one check is one
// failure whatever build printed it (Reproduces at strict), partial
// information is never a wildcard, interleaved assert lines are
// reassembled, out of memory is one failure, library errors have families
// of their own.

// tb starts the traceback of an uncaught exception.
const tb = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"

// buildGroups are corpus files (testdata/stderr) grouped by the failure
// they show: every pair inside a group reproduces the other at strict,
// both ways; no pair across groups does.
var buildGroups = map[string][]string{
	"nll": {"cuda_nll_loss_2d_aten", "cuda_nll_loss_113_pytorch_path", "cuda_nll_loss_windows_msvc", "cuda_nll_loss_accelerator_error",
		"cuda_nll_no_reduce", "cuda_nll_loss2d", "hip_nll_loss", "thc_nll_loss", "thc_nll_spatial_file_only", "thnn_nll_cpu",
		"cpu_nll_target_4", "cpu_nll_target_7_torch2", "cpu_nll2d", "cpu_nll_none_target"},
	"index_select": {"cuda_index_select_large", "cuda_index_select_small", "hip_index_select", "c10_error_abort_assert",
		"th_index_select_cpu", "cpu_embedding", "cpu_index_select_torch2"},
	"gather":      {"cuda_gather", "cuda_gather_interleaved", "cuda_gather_interleaved_fragment", "cpu_gather_9", "cpu_gather_12_torch2"},
	"index":       {"cuda_index_kernel", "cpu_index_tensor", "cpu_index_tensor_torch2"},
	"bce":         {"cuda_bce", "thcunn_bce", "cpu_bce_range", "cpu_bce_range_torch2"},
	"multinomial": {"cuda_multinomial", "cpu_multinomial", "cpu_multinomial_torch2"},
	"inductor":    {"inductor_old", "inductor_new"},
	// Inductor's C++ bound check: raised on one thread, thrown out of the
	// kernel's OpenMP region (terminate) on more.
	"inductor_cpu": {"inductor_cpu_raise", "inductor_cpu_terminate"},
	"oom": {"oom_old_runtimeerror", "oom_old_cuda_class", "oom_new_cuda_class", "oom_new_torch_class", "thc_oom",
		"cpu_alloc_oom", "cpu_alloc_oom_embedding_torch2"},
	"cublas.execution_failed":          {"cublas_sgemm_execution_failed", "cublas_gemmex_execution_failed", "thc_cublas_execution_failed"},
	"cudnn.execution_failed":           {"cudnn_execution_failed"},
	"cuda_error.invalid_configuration": {"cuda_error_invalid_config", "thc_error_invalid_config"},
	"unknown_assert":                   {"thc_no_assert_line"},
	"illegal_address":                  {"illegal_address", "c10_cudaerror_abort_illegal"},
	"launch_failure":                   {"launch_failure", "hip_launch_failure"},
	"one_hot.upper":                    {"cpu_one_hot_big", "cpu_one_hot_big_torch2"},
	"one_hot.lower":                    {"cpu_one_hot_neg", "cpu_one_hot_neg_torch2"},
	"batch_size":                       {"cpu_batch_size", "cpu_batch_size_torch2"},
}

func TestReproducesAcrossBuilds(t *testing.T) {
	cases := loadCorpus(t)
	type entry struct {
		name, group string
		sig         Signature
	}
	var all []entry
	for g, names := range buildGroups {
		for _, n := range names {
			c := cases[n]
			if c == nil {
				t.Fatalf("no corpus file %s.txt", n)
			}
			all = append(all, entry{n, g, Parse(c.stderr, c.exit)})
		}
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			ab, ba := reproduces(a.sig, b.sig, MatchStrict), reproduces(b.sig, a.sig, MatchStrict)
			if a.group == b.group && (!ab || !ba) {
				t.Errorf("%s and %s (%s) must reproduce each other: %v, %v\n  %s\n  %s", a.name, b.name, a.group, ab, ba, a.sig, b.sig)
			}
			if a.group != b.group && (ab || ba) {
				t.Errorf("%s (%s) and %s (%s) must not match: %v, %v\n  %s\n  %s", a.name, a.group, b.name, b.group, ab, ba, a.sig, b.sig)
			}
			// --match family stays coarser than strict.
			if ab && !reproduces(a.sig, b.sig, MatchFamily) {
				t.Errorf("%s reproduces %s at strict but not at family", a.name, b.name)
			}
		}
	}
}

// TestReproducesClasses: over the whole corpus, two failures of different
// known classes never match at strict, and two of one class always do
// (one_hot's two host messages aside: they name different halves).
func TestReproducesClasses(t *testing.T) {
	cases := loadCorpus(t)
	names := sortedNames(cases)
	for i, an := range names {
		a := Parse(cases[an].stderr, cases[an].exit)
		for _, bn := range names[i+1:] {
			b := Parse(cases[bn].stderr, cases[bn].exit)
			ac, bc := a.Class(), b.Class()
			if ac == "" || bc == "" || !Failing(a) || !Failing(b) {
				continue
			}
			got := reproduces(a, b, MatchStrict) || reproduces(b, a, MatchStrict)
			want := sameClass(ac, bc) && !otherSide(a, b)
			if got != want {
				t.Errorf("%s (%s) and %s (%s): match %v, want %v", an, ac, bn, bc, got, want)
			}
		}
	}
}

// TestPartialInformation: a text that names only a file matches the
// asserts that file can raise and nothing else; one that names nothing
// matches only another that names nothing.
func TestPartialInformation(t *testing.T) {
	assertOf := func(expr string) Signature {
		return Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Kernel: "k", Expression: expr}
	}
	named := map[string]Signature{
		ClassNLLTargetBounds: assertOf("t >= 0 && t < n_classes"),
		ClassIndexSelect:     assertOf("srcIndex < srcSelectDimSize"),
		ClassGatherBounds:    assertOf(`idx_dim >= 0 && idx_dim < index_size && "scatter gather kernel index out of bounds"`),
		ClassIndexBounds:     assertOf(`-sizes[i] <= index && index < sizes[i] && "index out of bounds"`),
		ClassBCEInputRange:   assertOf("input_val >= zero && input_val <= one"),
		ClassBCETargetRange:  assertOf("target_val >= zero && target_val <= one"),
		ClassMultinomialProb: assertOf("probability tensor contains either `inf`, `nan` or element < 0"),
		ClassInductorBounds:  assertOf("index out of bounds: 0 <= tmp < 32000"),
	}
	unknown := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Exception: "RuntimeError"}
	fileOnly := func(f string) Signature {
		return Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, File: f, Exception: "RuntimeError"}
	}
	for file, classes := range fileClasses {
		for _, ext := range []string{".cu", ".hip"} {
			partial := fileOnly(file + ext)
			for class, s := range named {
				want := false
				for _, c := range classes {
					want = want || c == class
				}
				if got := reproduces(s, partial, MatchStrict); got != want {
					t.Errorf("%s assert against a text naming only %s%s: %v, want %v", class, file, ext, got, want)
				}
				if got := reproduces(partial, s, MatchStrict); got != want {
					t.Errorf("a text naming only %s%s against a %s assert: %v, want %v", file, ext, class, got, want)
				}
			}
			if reproduces(unknown, partial, MatchStrict) || reproduces(partial, unknown, MatchStrict) {
				t.Errorf("%s: a file-only text matches an assert of unknown kind", file)
			}
			if !reproduces(fileOnly(file+".cu"), partial, MatchStrict) {
				t.Errorf("%s: the .cu and %s texts of one file do not match", file, ext)
			}
		}
	}
	for class, s := range named {
		if reproduces(s, unknown, MatchStrict) || reproduces(unknown, s, MatchStrict) || s.Matches(unknown, MatchStrict) {
			t.Errorf("an assert of unknown kind matches the %s assert", class)
		}
		for other, o := range named {
			if class != other && (reproduces(s, o, MatchStrict) || reproduces(s, o, MatchStrict)) {
				t.Errorf("%s matches %s", class, other)
			}
		}
		if !reproduces(s, unknown, MatchFamily) {
			t.Errorf("--match family: the %s assert does not match an assert of unknown kind", class)
		}
	}
	if !reproduces(unknown, unknown, MatchStrict) {
		t.Error("an assert of unknown kind does not match itself")
	}
	// A file that raises no assert (where THC noticed an asynchronous
	// error) names nothing: parsed, it leaves File empty.
	s := Parse([]byte("RuntimeError: cuda runtime error (59) : device-side assert triggered at /pytorch/aten/src/THC/generic/THCTensorMath.cu:26\n"), ExitInfo{Code: 1})
	if s.Family != FamilyDeviceAssert || s.File != "" || s.Expression != "" {
		t.Errorf("THCTensorMath.cu: %s, want an assert of unknown kind", s)
	}
	for _, p := range []Signature{unknown, fileOnly("SpatialClassNLLCriterion.cu"), fileOnly("THCTensorIndex.cu")} {
		if p.Partial() == "" {
			t.Errorf("%s: Partial() is empty", p)
		}
	}
	if named[ClassGatherBounds].Partial() != "" {
		t.Error("a named assert is partial")
	}
}

func TestRefines(t *testing.T) {
	nll := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Kernel: "nll_loss2d_forward_kernel", Expression: "t >= 0 && t < n_classes"}
	idx := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Kernel: "indexSelectLargeIndex", Expression: "srcIndex < srcSelectDimSize"}
	unknown := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Exception: "RuntimeError"}
	nllFile := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, File: "SpatialClassNLLCriterion.cu"}
	indexFile := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, File: "THCTensorIndex.cu"}
	cpuNLL := Signature{Family: FamilyHostCheck, Backend: BackendCPU, Expression: "IndexError: Target N is out of bounds."}
	tests := []struct {
		name          string
		got, recorded Signature
		want          bool
	}{
		{"unknown kind, any named assert", nll, unknown, true},
		{"unknown kind, another named assert", idx, unknown, true},
		{"unknown kind, a file-only replay", nllFile, unknown, true},
		{"unknown kind, unknown replay: nothing more", unknown, unknown, false},
		{"file, an assert it raises", nll, nllFile, true},
		{"file, an assert it does not raise", idx, nllFile, false},
		{"index file, index_select", idx, indexFile, true},
		{"named recording: never refined", idx, nll, false},
		{"a CPU exception is no device assert", cpuNLL, unknown, false},
		{"not a device assert recorded", nll, Signature{Family: FamilyOOM, Expression: exprDeviceOOM}, false},
	}
	for _, tc := range tests {
		if got := refines(tc.got, tc.recorded); got != tc.want {
			t.Errorf("%s: refines(%s, %s) = %v, want %v", tc.name, tc.got, tc.recorded, got, tc.want)
		}
	}
}

// TestParseBuildForms: each era's form of a check, as text, parses to the
// family and class of that check.
func TestParseBuildForms(t *testing.T) {
	tests := []struct {
		name, text string
		family     Family
		class      string
	}{
		// source: aten/src/THNN/generic/ClassNLLCriterion.c (THAssert, <= 1.4), as pasted in public issue logs
		{"THNN nll", tb + "RuntimeError: Assertion `cur_target >= 0 && cur_target < n_classes' failed.  at /pytorch/aten/src/THNN/generic/ClassNLLCriterion.c:93\n", FamilyHostCheck, ClassNLLTargetBounds},
		// source: aten/src/THNN/generic/SpatialClassNLLCriterion.c (THAssert, <= 1.4)
		{"THNN nll2d", tb + "RuntimeError: Assertion `t >= 0 && t < n_classes' failed.  at /pytorch/aten/src/THNN/generic/SpatialClassNLLCriterion.c:111\n", FamilyHostCheck, ClassNLLTargetBounds},
		// source: aten/src/THCUNN/ClassNLLCriterion.cu (<= 1.4), the no-reduce kernel's assert
		{"THCUNN nll no reduce", "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:57: void ClassNLLCriterion_updateOutput_no_reduce_kernel(int, THCDeviceTensor<Dtype, 2, int, DefaultPtrTraits>, THCDeviceTensor<long, 1, int, DefaultPtrTraits>, THCDeviceTensor<Dtype, 1, int, DefaultPtrTraits>, Dtype *, int, int) [with Dtype = float]: block: [0,0,0], thread: [3,0,0] Assertion `cur_target >= 0 && cur_target < n_classes` failed.\n" + tb + "RuntimeError: CUDA error: device-side assert triggered\n", FamilyDeviceAssert, ClassNLLTargetBounds},
		// source: aten/src/THNN/generic/BCECriterion.c (THAssertMsg, <= 1.4)
		{"THNN bce", tb + "RuntimeError: Assertion `x >= 0. && x <= 1.' failed. input value should be between 0~1, but got 1.500000 at /pytorch/aten/src/THNN/generic/BCECriterion.c:62\n", FamilyHostCheck, ClassBCEInputRange},
		// source: aten/src/TH/generic/THTensorEvenMoreMath.cpp (<= 1.1: "index out of range"; pytorch/pytorch#21535)
		{"TH index_select, oldest", tb + "RuntimeError: index out of range at ../aten/src/TH/generic/THTensorEvenMoreMath.cpp:191\n", FamilyHostCheck, ClassIndexSelect},
		// source: https://github.com/ramzan1990/sequence2vec/issues/2 (TH, 1.2-1.4)
		{"TH index_select", tb + "RuntimeError: index out of range: Tried to access index 32730 out of table with 28995 rows. at /tmp/pip-req-build-ufslq_a9/aten/src/TH/generic/THTensorEvenMoreMath.cpp:418\n", FamilyHostCheck, ClassIndexSelect},
		// source: aten/src/TH/generic/THTensorEvenMoreMath.cpp (THError "Invalid index in gather", <= 1.4)
		{"TH gather", tb + "RuntimeError: Invalid index in gather at /pytorch/aten/src/TH/generic/THTensorEvenMoreMath.cpp:457\n", FamilyHostCheck, ClassGatherBounds},
		// source: aten/src/THC/THCTensorScatterGather.cu (CUDA_KERNEL_ASSERT(indexValue >= 0 && indexValue < src.sizes[dim]), <= 1.4)
		{"THC gather", "/pytorch/aten/src/THC/THCTensorScatterGather.cu:97: void THCudaTensor_gatherKernel(TensorInfo<Real, IndexType>, TensorInfo<Real, IndexType>, TensorInfo<long, IndexType>, int, IndexType) [with IndexType = unsigned int, Real = float, Dims = 2]: block: [0,0,0], thread: [1,0,0] Assertion `indexValue >= 0 && indexValue < src.sizes[dim]` failed.\n", FamilyDeviceAssert, ClassGatherBounds},
		// source: aten/src/ATen/native/cuda/ScatterGatherKernel.cu (2.1+: "scatter gather kernel index out of bounds")
		{"ATen gather, newest", "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:144: operator(): block: [0,0,0], thread: [0,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && \"scatter gather kernel index out of bounds\"` failed.\n", FamilyDeviceAssert, ClassGatherBounds},
		// source: aten/src/THCUNN/BCECriterion.cu (assert(input >= 0. && input <= 1.), <= 1.4)
		{"THCUNN bce", "/pytorch/aten/src/THCUNN/BCECriterion.cu:42: Acctype bce_functor<Dtype, Acctype>::operator()(Tuple) [with Tuple = T, Dtype = float, Acctype = float]: block: [0,0,0], thread: [0,0,0] Assertion `input >= 0. && input <= 1.` failed.\n", FamilyDeviceAssert, ClassBCEInputRange},
		// source: aten/src/ATen/native/hip/Indexing.hip (a C10_USE_ROCM_KERNEL_ASSERT build), shared/reference/pytorch-failures.md
		{"HIP index_select", "/pytorch/aten/src/ATen/native/hip/Indexing.hip:1292: indexSelectLargeIndex: Device-side assertion `srcIndex < srcSelectDimSize' failed.\n", FamilyDeviceAssert, ClassIndexSelect},
		// source: THC's __THCudaCheck (aten/src/THC/THCGeneral.cpp) naming the THCUNN launcher's file (the slip)
		{"THCUNN file only", tb + "RuntimeError: cuda runtime error (59) : device-side assert triggered at /pytorch/aten/src/THCUNN/generic/SpatialClassNLLCriterion.cu:111\n", FamilyDeviceAssert, ClassNLLTargetBounds},
		// source: c10::Error's "Exception raised from <fn> at <file>" (c10/util/Exception.cpp, 1.6+) naming an ATen kernel file
		{"c10 raised from a kernel's file", "RuntimeError: CUDA error: device-side assert triggered\nException raised from gather_kernel at ../aten/src/ATen/native/cuda/ScatterGatherKernel.cu:210 (most recent call first):\n", FamilyDeviceAssert, ClassGatherBounds},
	}
	for _, tc := range tests {
		got := Parse([]byte(tc.text), ExitInfo{Code: 1})
		if got.Family != tc.family || got.Class() != tc.class {
			t.Errorf("%s: Parse = %s (class %q); want family %s, class %q", tc.name, got, got.Class(), tc.family, tc.class)
		}
	}
}

// TestParseInterleaved: assert lines cut and mixed by threads printing at
// once give the assert's expression, and its file and kernel where they
// survive.
func TestParseInterleaved(t *testing.T) {
	const gather = "idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\""
	const exc = "RuntimeError: CUDA error: device-side assert triggered\n"
	tests := []struct {
		name, text   string
		kernel, expr string
		file         string
	}{
		// source: the pasted line (two threads' starts glued)
		{"glued starts", "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:312: operator(): block: [3,0,0/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:312: operator(): block: [3,0,0], thread: [60,0,0] Assertion `" + gather + "` failed.\n" + exc,
			"operator()", gather, ""},
		// source: the pasted fragment (thread ids of two threads mixed)
		{"mixed ids", ",0,0/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu], thread: [60,0:115,0] Assertion `" + gather + "` failed.\n" + exc,
			"", gather, ""},
		{"tail after a cut head", "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [1\n,0,0] Assertion `t >= 0 && t < n_classes` failed.\n" + exc,
			"nll_loss_forward_reduce_cuda_kernel_2d", "t >= 0 && t < n_classes", ""},
		{"two asserts on one line: the first", "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [1,0,0] Assertion `t >= 0 && t < n_classes` failed.../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [2,0,0] Assertion `t >= 0 && t < n_classes` failed.\n" + exc,
			"nll_loss_forward_reduce_cuda_kernel_2d", "t >= 0 && t < n_classes", ""},
		{"only a cut head: kernel and file", "../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [12,0,0], thread: [3\n" + exc,
			"indexSelectLargeIndex", "", "Indexing.cu"},
	}
	for _, tc := range tests {
		got := Parse([]byte(tc.text), ExitInfo{Code: 1})
		if got.Family != FamilyDeviceAssert || got.Kernel != tc.kernel || got.Expression != tc.expr || got.File != tc.file {
			t.Errorf("%s: Parse = %#v; want kernel %q, expression %q, file %q", tc.name, got, tc.kernel, tc.expr, tc.file)
		}
	}
	// A glibc assert of the host (quote, not backtick, and no block) is not
	// a device assert, cut or not.
	host := Parse([]byte("python3: /src/ext.cpp:12: void check(int): Assertion `n > 0' failed.\n"), ExitInfo{Signal: int(syscall.SIGABRT)})
	if host.Family != FamilyAbortSignal {
		t.Errorf("glibc assert: %s", host)
	}
}

// TestOOMAcrossForms: every allocator's out of memory is one failure.
func TestOOMAcrossForms(t *testing.T) {
	texts := map[string]string{
		// source: https://github.com/jiesutd/NCRFpp/issues/121 (THC, PyTorch 0.x)
		"THC THCStorage": tb + "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/torch/lib/THC/generic/THCStorage.cu:58\n",
		// source: https://github.com/rowanz/neural-motifs/issues/58 (THC, PyTorch 1.0)
		"THC THCTensorRandom": tb + "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCTensorRandom.cu:25\n",
		// source: aten/src/THC/THCCachingAllocator.cpp via THCGeneral.cpp's __THCudaCheck (<= 1.0)
		"THC caching allocator": tb + "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510\n",
		// source: c10/cuda/CUDACachingAllocator.cpp (1.x), shared/reference/pytorch-failures.md
		"1.x": tb + "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.21 GiB already allocated; 3.75 MiB free; 14.70 GiB reserved in total by PyTorch)\n",
		// source: c10/cuda/CUDACachingAllocator.cpp (1.13-2.4: torch.cuda.OutOfMemoryError)
		"2.x cuda class": tb + "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 15.78 GiB of which 3.75 MiB is free.\n",
		// source: c10/cuda/CUDACachingAllocator.cpp (2.5+: torch.OutOfMemoryError)
		"2.5 torch class": tb + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.2 GiB is free.\n",
		// source: the HIP build's hipified CUDACachingAllocator.cpp
		"HIP": tb + "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 GiB of which 1.2 GiB is free.\n",
		// source: c10/core/impl/alloc_cpu.cpp (real torch 1.13, testdata/stderr/cpu_alloc_oom.txt)
		"CPU": tb + "RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 281474976710656 bytes. Error code 12 (Cannot allocate memory)\n",
		// source: c10/core/impl/alloc_cpu.cpp (Windows: "not enough memory")
		"CPU Windows": tb + "RuntimeError: [enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:72] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes.\n",
	}
	var sigs []Signature
	var names []string
	for name, text := range texts {
		s := Parse([]byte(text), ExitInfo{Code: 1})
		if s.Family != FamilyOOM {
			t.Errorf("%s: Parse = %s, want oom", name, s)
		}
		sigs, names = append(sigs, s), append(names, name)
	}
	for i := range sigs {
		for j := range sigs {
			if !reproduces(sigs[i], sigs[j], MatchStrict) {
				t.Errorf("%s does not reproduce %s:\n  %s\n  %s", names[i], names[j], sigs[i], sigs[j])
			}
		}
	}
}

// TestLibraryFamilies: cuBLAS, cuDNN and other CUDA runtime errors have
// families of their own, keyed by their status.
func TestLibraryFamilies(t *testing.T) {
	tests := []parseCase{
		// source: https://github.com/wentaoyuan/deepgmr/issues/9
		{"cublas sgemm", tb + "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`\n", ExitInfo{Code: 1}, FamilyCUBLASError, "CUBLAS_STATUS_EXECUTION_FAILED"},
		// source: aten/src/ATen/cuda/CUDABlas.cpp (TORCH_CUDABLAS_CHECK, 1.x/2.x)
		{"cublas not supported", tb + "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmStridedBatchedExFix(handle, opa, opb, m, n, k, (void*)&falpha, a, CUDA_R_16BF, lda, stridea, b, CUDA_R_16BF, ldb, strideb, (void*)&fbeta, c, CUDA_R_16BF, ldc, stridec, num_batches, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`\n", ExitInfo{Code: 1}, FamilyCUBLASError, "CUBLAS_STATUS_NOT_SUPPORTED"},
		// source: aten/src/THC/THCGeneral.cpp (__THCublasCheck, <= 1.4)
		{"THC cublas", tb + "RuntimeError: cublas runtime error : an internal operation failed at /pytorch/aten/src/THC/THCBlas.cu:258\n", ExitInfo{Code: 1}, FamilyCUBLASError, "CUBLAS_STATUS_INTERNAL_ERROR"},
		// source: aten/src/THC/THCGeneral.cpp (__THCublasCheck: ALLOC_FAILED's message)
		{"THC cublas alloc", tb + "RuntimeError: cublas runtime error : resource allocation failed at /pytorch/aten/src/THC/THCGeneral.cpp:228\n", ExitInfo{Code: 1}, FamilyCUBLASError, "CUBLAS_STATUS_ALLOC_FAILED"},
		// source: aten/src/ATen/cuda/CublasHandlePool.cpp (TORCH_CUDABLAS_CHECK(cublasCreate(&handle)), 1.x/2.x)
		{"cublas alloc", tb + "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n", ExitInfo{Code: 1}, FamilyCUBLASError, "CUBLAS_STATUS_ALLOC_FAILED"},
		// source: https://github.com/jianweif/OptimalGradCheckpointing/issues/5
		{"cudnn", tb + "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED\n", ExitInfo{Code: 1}, FamilyCUDNNError, "CUDNN_STATUS_EXECUTION_FAILED"},
		// source: https://github.com/tbepler/protein-sequence-embedding-iclr2019/issues/6 (0.4: no "cuDNN error:" prefix)
		{"cudnn 0.4", tb + "RuntimeError: CUDNN_STATUS_EXECUTION_FAILED\n", ExitInfo{Code: 1}, FamilyCUDNNError, "CUDNN_STATUS_EXECUTION_FAILED"},
		// source: aten/src/ATen/cudnn/Exceptions.h (AT_CUDNN_CHECK, 1.x: the status and a hint)
		{"cudnn not supported", tb + "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.\n", ExitInfo{Code: 1}, FamilyCUDNNError, "CUDNN_STATUS_NOT_SUPPORTED"},
		// source: https://github.com/open-mmlab/mmdetection/issues/1830 (THC form)
		{"THC runtime error", tb + "RuntimeError: cuda runtime error (9) : invalid configuration argument at mmdet/ops/roi_pool/src/roi_pool_kernel.cu:101\n", ExitInfo{Code: 1}, FamilyCUDAError, "invalid configuration argument"},
		// source: https://github.com/pytorch/pytorch/issues/48573
		{"ATen runtime error", tb + "RuntimeError: CUDA error: invalid configuration argument\n", ExitInfo{Code: 1}, FamilyCUDAError, "invalid configuration argument"},
		// source: THC's "(59) : device-side assert triggered", shared/reference/pytorch-failures.md
		{"THC 59 is a device assert", tb + "RuntimeError: cuda runtime error (59) : device-side assert triggered at /pytorch/aten/src/THC/generic/THCTensorCopy.cpp:20\n", ExitInfo{Code: 1}, FamilyDeviceAssert, ""},
		// source: THC's "(77) : an illegal memory access was encountered" (CUDA < 10.1's code for 700)
		{"THC 77 is an illegal address", tb + "RuntimeError: cuda runtime error (77) : an illegal memory access was encountered at /pytorch/aten/src/THC/THCCachingHostAllocator.cpp:265\n", ExitInfo{Code: 1}, FamilyIllegalAddress, exprIllegal},
		// source: THC's "(4) : unspecified launch failure" (CUDA < 10.1's code for 719)
		{"THC 4 is a launch failure", tb + "RuntimeError: cuda runtime error (4) : unspecified launch failure at /pytorch/aten/src/THC/generic/THCTensorCopy.cpp:20\n", ExitInfo{Code: 1}, FamilyLaunchFailure, exprLaunch},
		// source: THC's "(48) : no kernel image is available for execution on the device" (infra)
		{"THC 48 is infra", tb + "RuntimeError: cuda runtime error (48) : no kernel image is available for execution on the device at /pytorch/aten/src/THC/generic/THCTensorMath.cu:14\n", ExitInfo{Code: 1}, FamilyInfra, "cuda runtime error (N) : no kernel image is available for execution on the device at THCTensorMath.cu"},
	}
	for _, tc := range tests {
		got := tc.check(t)
		if strings.Contains(got.Expression, "cublasSgemm") || strings.Contains(got.Expression, "handle") {
			t.Errorf("%s: the call is in the expression: %q", tc.name, got.Expression)
		}
	}
}

// TestVectorizedGatherEitherCheck: torch 2.x's vectorized_gather_kernel
// assert (a real capture of an embedding on an H200) is raised by
// index_select, which embedding calls, and by indexing: it reproduces a
// recording of either, on the CPU or on CUDA, both ways, and nothing else.
func TestVectorizedGatherEitherCheck(t *testing.T) {
	cases := loadCorpus(t)
	sig := func(name string) Signature {
		c := cases[name]
		require.NotNil(t, c, "no corpus file %s.txt", name)
		return Parse(c.stderr, c.exit)
	}
	v := sig("cuda_embedding_vectorized_gather_torch211")
	assert.Empty(t, v.Class(), "the text does not say which check")
	assert.ElementsMatch(t, []string{ClassIndexSelect, ClassIndexBounds}, v.Classes())
	assert.Equal(t, CauseValue, v.Cause(), "both checks say a value is out of range")
	for _, name := range append(buildGroups["index_select"], buildGroups["index"]...) {
		other := sig(name)
		assert.True(t, reproduces(v, other, MatchStrict), "it reproduces %s (%s)", name, other)
		assert.True(t, reproduces(other, v, MatchStrict), "%s (%s) reproduces it", name, other)
	}
	for _, group := range []string{"nll", "gather", "bce", "oom", "unknown_assert"} {
		for _, name := range buildGroups[group] {
			other := sig(name)
			assert.False(t, reproduces(v, other, MatchStrict), "it reproduces %s (%s)", name, other)
			assert.False(t, reproduces(other, v, MatchStrict), "%s (%s) reproduces it", name, other)
		}
	}
}
