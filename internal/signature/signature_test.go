package signature

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// corpusCase is one file of testdata/stderr: "# " header lines (at least one
// "# source: ..."), then sections "-- exit --" (ExitInfo JSON), "-- want --"
// (Signature JSON), optionally "-- class --" (the expected Class()) and
// "-- raised --" (the expected RaisedAt, JSON), and last "-- stderr --",
// whose body is the rest of the file, byte for byte.
type corpusCase struct {
	name   string
	source []string
	exit   ExitInfo
	want   Signature
	class  *string
	raised *Raise
	stderr []byte
}

func loadCorpus(t testing.TB) map[string]*corpusCase {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "stderr", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no corpus files in testdata/stderr")
	}
	cases := make(map[string]*corpusCase, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseCorpusFile(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		c.name = strings.TrimSuffix(filepath.Base(p), ".txt")
		cases[c.name] = c
	}
	return cases
}

func parseCorpusFile(data []byte) (*corpusCase, error) {
	const stderrMark = "-- stderr --\n"
	i := bytes.Index(data, []byte(stderrMark))
	if i < 0 {
		return nil, errors.New("no -- stderr -- section")
	}
	c := &corpusCase{stderr: data[i+len(stderrMark):]}
	section := ""
	bodies := map[string]string{}
	for _, l := range strings.Split(string(data[:i]), "\n") {
		switch {
		case l == "":
		case strings.HasPrefix(l, "-- ") && strings.HasSuffix(l, " --"):
			section = strings.TrimSuffix(strings.TrimPrefix(l, "-- "), " --")
		case section == "" && strings.HasPrefix(l, "# "):
			if strings.HasPrefix(l, "# source: ") {
				c.source = append(c.source, strings.TrimPrefix(l, "# source: "))
			}
		case section == "":
			return nil, errors.New("header line without '# ': " + l)
		default:
			bodies[section] += l + "\n"
		}
	}
	if len(c.source) == 0 {
		return nil, errors.New("no '# source:' header line")
	}
	for name, body := range bodies {
		var err error
		switch name {
		case "exit":
			err = strictUnmarshal(body, &c.exit)
		case "want":
			err = strictUnmarshal(body, &c.want)
		case "class":
			s := strings.TrimSpace(body)
			c.class = &s
		case "raised":
			c.raised = &Raise{}
			err = strictUnmarshal(body, c.raised)
		default:
			err = errors.New("unknown section " + name)
		}
		if err != nil {
			return nil, errors.New(name + ": " + err.Error())
		}
	}
	if _, ok := bodies["exit"]; !ok {
		return nil, errors.New("no -- exit -- section")
	}
	if _, ok := bodies["want"]; !ok {
		return nil, errors.New("no -- want -- section")
	}
	return c, nil
}

func strictUnmarshal(s string, v any) error {
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

func sortedNames(cases map[string]*corpusCase) []string {
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestParseCorpus(t *testing.T) {
	cases := loadCorpus(t)
	for _, name := range sortedNames(cases) {
		c := cases[name]
		t.Run(name, func(t *testing.T) {
			got := Parse(c.stderr, c.exit)
			if got != c.want {
				t.Errorf("Parse:\n got %s\n     %#v\nwant %s\n     %#v", got, got, c.want, c.want)
			}
			if c.class != nil {
				if cl := got.Class(); cl != *c.class {
					t.Errorf("Class() = %q, want %q", cl, *c.class)
				}
			}
			if !got.Matches(c.want, MatchStrict) {
				t.Errorf("signature does not match itself strictly")
			}
			// Same input, same answer.
			if again := Parse(bytes.Clone(c.stderr), c.exit); again != got {
				t.Errorf("not deterministic: %v then %v", got, again)
			}
		})
	}
}

// TestParseCorpusCoverage checks that the corpus holds every family and the
// forms the design lists, so that a file removed by mistake is noticed.
func TestParseCorpusCoverage(t *testing.T) {
	cases := loadCorpus(t)
	seen := map[Family]bool{}
	for _, c := range cases {
		seen[c.want.Family] = true
	}
	for _, f := range Families() {
		if !seen[f] {
			t.Errorf("no corpus file of family %s", f)
		}
	}
	for _, name := range []string{
		"cuda_nll_loss_2d_aten", "cuda_nll_loss_113_pytorch_path", "cuda_nll_loss_conda_path",
		"cuda_nll_loss_windows_msvc", "cuda_nll_loss_accelerator_error", "cuda_nll_loss_many_threads",
		"hip_nll_loss", "hip_index_select", "thc_nll_loss", "inductor_old", "inductor_new",
		"oom_old_runtimeerror", "oom_old_cuda_class", "oom_new_cuda_class", "oom_new_torch_class", "cpu_alloc_oom", "cpu_alloc_oom_embedding",
		"illegal_address", "launch_failure", "misaligned", "rocm_memfault",
		"device_mismatch_old", "device_mismatch_new", "cpu_nan_anomaly", "c10_error_abort_assert",
		"cpu_segfault", "cpu_timeout", "cpu_pass_warning", "cpu_pass_garbage",
		"torchrun_tee_default_prefix", "torchrun_rank_prefix", "torchrun_label_prefix",
		"cpu_batch_size", "cpu_multi_target", "cpu_dtype", "cpu_nll_target_4", "cpu_nll_target_7",
		"cpu_nan_loss_check", "cpu_nan_value_error", "cpu_nan_assert", "cpu_nan_runtime_inf", "cpu_nan_user_class",
		"cpu_clip_grad_nonfinite", "cpu_lightning_finite_loss", "cpu_grad_scaler_no_inf_checks",
		// Issue 14: the forms of other eras, partial and interleaved texts,
		// library errors.
		"thnn_nll_cpu", "thcunn_bce", "th_index_select_cpu", "thc_nll_spatial_file_only", "thc_index_file_only",
		"cuda_gather_interleaved", "cuda_gather_interleaved_fragment", "thc_oom", "cublas_sgemm_execution_failed",
		"thc_cublas_execution_failed", "cudnn_execution_failed", "cuda_error_invalid_config", "thc_error_invalid_config",
	} {
		if cases[name] == nil {
			t.Errorf("corpus file %s.txt is missing", name)
		}
	}
}

// TestMatchCorpusPairs: pairs of corpus files that are one failure and must
// match strictly (both ways), and pairs that are different failures and
// must not.
func TestMatchCorpusPairs(t *testing.T) {
	cases := loadCorpus(t)
	sig := func(name string) Signature {
		t.Helper()
		c := cases[name]
		if c == nil {
			t.Fatalf("no corpus file %s", name)
		}
		return Parse(c.stderr, c.exit)
	}
	same := [][2]string{
		// One nll_loss assert from CUDA builds of different eras, paths,
		// lines, blocks and threads, MSVC, HIP, THC, and the 2.8+ class.
		{"cuda_nll_loss_2d_aten", "cuda_nll_loss_113_pytorch_path"},
		{"cuda_nll_loss_2d_aten", "cuda_nll_loss_conda_path"},
		{"cuda_nll_loss_2d_aten", "cuda_nll_loss_windows_msvc"},
		{"cuda_nll_loss_2d_aten", "cuda_nll_loss_accelerator_error"},
		{"cuda_nll_loss_2d_aten", "cuda_nll_loss_many_threads"},
		{"cuda_nll_loss_2d_aten", "hip_nll_loss"},
		{"cuda_nll_loss_2d_aten", "thc_nll_loss"},
		{"hip_nll_loss", "thc_nll_loss"},
		{"cuda_index_select_large", "hip_index_select"},
		{"cuda_index_select_large", "cuda_index_select_small"},
		{"cuda_index_select_large", "c10_error_abort_assert"},
		{"inductor_old", "inductor_new"},
		// The same CPU error with other numbers, through other launchers.
		{"cpu_nll_target_4", "cpu_nll_target_7"},
		{"cpu_nll_target_4", "cpu_nll2d"},
		{"cpu_nll_target_4", "cpu_mp_spawn"},
		{"cpu_nll_target_4", "torchrun_tee_default_prefix"},
		{"cpu_nll_target_4", "torchrun_rank_prefix"},
		{"cpu_nll_target_4", "torchrun_label_prefix"},
		{"cpu_nll_target_4", "manifest_error_text"},
		{"cpu_gather_9", "cpu_gather_12"},
		{"cpu_embedding", "cpu_index_select"},
		{"cpu_one_hot_big", "cpu_one_hot_big"},
		// Other families.
		{"oom_old_runtimeerror", "oom_old_cuda_class"},
		{"oom_old_runtimeerror", "oom_new_cuda_class"},
		{"oom_old_runtimeerror", "oom_new_torch_class"},
		// DefaultCPUAllocator with other byte counts, through other frames
		// (--device-memory's OOM of a batch size, as real torch gives it).
		{"cpu_alloc_oom", "cpu_alloc_oom_embedding"},
		{"device_mismatch_old", "device_mismatch_new"},
		{"device_mismatch_old", "cpu_device_mismatch_meta"},
		{"rocm_memfault", "rocm_memfault_node2"},
		{"illegal_address", "c10_cudaerror_abort_illegal"},
		{"cpu_segfault", "torchrun_child_segfault"},
	}
	for _, p := range same {
		a, b := sig(p[0]), sig(p[1])
		if !a.Matches(b, MatchStrict) || !b.Matches(a, MatchStrict) {
			t.Errorf("%s and %s must match strictly:\n  %s\n  %s", p[0], p[1], a, b)
		}
	}
	different := [][2]string{
		{"cuda_nll_loss_2d_aten", "cuda_index_select_large"}, // nll_loss vs index_select assert
		{"hip_nll_loss", "hip_index_select"},
		{"cuda_nll_loss_2d_aten", "cuda_nll_loss2d"}, // another kernel, same expression
		{"cuda_gather", "cuda_index_kernel"},         // both operator(), other expressions
		{"cuda_nll_loss_2d_aten", "oom_new_torch_class"},
		{"oom_new_torch_class", "cuda_nll_loss_2d_aten"},
		{"oom_old_cuda_class", "cpu_alloc_oom"}, // device vs host OOM
		{"cpu_batch_size", "cpu_nll_target_4"},  // host_check shape vs target bounds
		{"cpu_nll_target_4", "cpu_batch_size"},
		{"cpu_multi_target", "cpu_dtype"},
		{"cpu_gather_9", "cpu_index_tensor"}, // same message skeleton, other exception class
		{"cpu_one_hot_big", "cpu_one_hot_neg"},
		{"cpu_nll_target_4", "cpu_exit1_silent"},
		{"cpu_exit1_silent", "cpu_nll_target_4"},
		{"cpu_nll_target_4", "cpu_embedding"},
		{"illegal_address", "launch_failure"},
		{"launch_failure", "misaligned"},
		{"hip_launch_failure", "hip_nll_loss"},
		{"cuda_nll_loss_2d_aten", "inductor_new"},
		{"c10_error_abort_assert", "cxx_terminate_unknown"},
		{"cpu_segfault", "cpu_abort"},
		{"cpu_nll_target_4", "cpu_timeout"},
		{"cpu_nll_target_4", "cpu_sigkill"},
		{"cpu_nll_target_4", "cpu_pass_garbage"},
		{"cuda_nll_loss_2d_aten", "cpu_nll_target_4"}, // one op, but CUDA assert vs CPU exception: only Class agrees
		// Finiteness checks: anomaly mode vs the user's, and one user check
		// vs another.
		{"cpu_nan_anomaly", "cpu_nan_loss_check"},
		{"cpu_nan_loss_check", "cpu_nan_anomaly"},
		{"cpu_nan_loss_check", "cpu_nan_runtime_inf"},
		{"cpu_nan_loss_check", "cpu_clip_grad_nonfinite"},
	}
	for _, p := range different {
		a, b := sig(p[0]), sig(p[1])
		if a.Matches(b, MatchStrict) {
			t.Errorf("%s must not match %s strictly:\n  %s\n  %s", p[0], p[1], a, b)
		}
	}
	// The CUDA assert and the CPU exception of one op share a class.
	for _, p := range [][2]string{
		{"cuda_nll_loss_2d_aten", "cpu_nll_target_4"},
		{"thc_nll_loss", "cpu_nll2d"},
		{"cuda_nll_no_reduce", "cpu_nll_none_target"},
		{"hip_index_select", "cpu_embedding"},
		{"cuda_gather", "cpu_gather_9"},
		{"cuda_index_kernel", "cpu_index_tensor"},
		{"cuda_bce", "cpu_bce_range"},
		{"cuda_multinomial", "cpu_multinomial"},
	} {
		a, b := sig(p[0]), sig(p[1])
		if a.Class() == "" || a.Class() != b.Class() {
			t.Errorf("%s and %s: classes %q and %q, want one non-empty class", p[0], p[1], a.Class(), b.Class())
		}
	}
	// Anomaly mode and a finiteness check are other checks: a replay on
	// another device that shows one does not reproduce the other.
	if a, b := sig("cpu_nan_anomaly"), sig("cpu_nan_loss_check"); a.Class() == b.Class() {
		t.Errorf("cpu_nan_anomaly and cpu_nan_loss_check: one class %q", a.Class())
	}
}

// TestCorpusTorchVersions: a file NAME_torch2.txt is torch 2.x's text of the
// CPU failure that NAME.txt holds from torch 1.13, captured by running the
// same program (testdata/capture_torch.py), and parses to a signature that
// matches NAME.txt's strictly, both ways, with the same class: reduce
// recognizes a failure recorded under one torch when it replays under the
// other. The failures listed below must have such a pair.
func TestCorpusTorchVersions(t *testing.T) {
	cases := loadCorpus(t)
	const suffix = "_torch2"
	for _, name := range []string{
		"cpu_nll_target_4", "cpu_nll_target_7", "cpu_nll2d", "cpu_nll_none_target", "cpu_embedding",
		"cpu_gather_9", "cpu_gather_12", "cpu_index_select", "cpu_index_tensor", "cpu_one_hot_big",
		"cpu_one_hot_neg", "cpu_bce_range", "cpu_alloc_oom", "cpu_alloc_oom_embedding", "cpu_nan_anomaly",
		"cpu_nan_loss_check", "cpu_nan_value_error", "cpu_nan_assert", "cpu_nan_runtime_inf", "cpu_nan_user_class",
		"cpu_clip_grad_nonfinite",
	} {
		if cases[name+suffix] == nil {
			t.Errorf("corpus file %s%s.txt is missing", name, suffix)
		}
	}
	pairs := 0
	for _, name := range sortedNames(cases) {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		pairs++
		c, old := cases[name], cases[base]
		if old == nil {
			t.Errorf("%s: no %s.txt, the failure it is another torch's text of", name, base)
			continue
		}
		if !strings.HasPrefix(c.source[0], "real torch 2.") || !strings.HasPrefix(old.source[0], "real torch 1.13") {
			t.Errorf("%s and %s: sources %q and %q, want real torch 2.x and 1.13", name, base, c.source[0], old.source[0])
		}
		a, b := Parse(c.stderr, c.exit), Parse(old.stderr, old.exit)
		if !a.Matches(b, MatchStrict) || !b.Matches(a, MatchStrict) || a.Class() != b.Class() {
			t.Errorf("%s and %s must match strictly with one class:\n  %s (%s)\n  %s (%s)", name, base, a, a.Class(), b, b.Class())
		}
	}
	if pairs == 0 {
		t.Error("no *" + suffix + ".txt files")
	}
}

func TestMatchLevels(t *testing.T) {
	nll := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Kernel: "nll_loss_forward_reduce_cuda_kernel_2d", Expression: "t >= 0 && t < n_classes"}
	idx := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Kernel: "indexSelectLargeIndex", Expression: "srcIndex < srcSelectDimSize"}
	// nll2d differs from nll in the kernel only: the expression alone must
	// not make them match.
	nll2d := nll
	nll2d.Kernel = "nll_loss2d_forward_kernel"
	// nllOther differs from nll in the expression only.
	nllOther := nll
	nllOther.Expression = "cur_target >= 0 && cur_target < n_classes"
	bare := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Exception: "RuntimeError"}
	oom := Signature{Family: FamilyOOM, Backend: BackendCUDA, Expression: exprDeviceOOM}
	host := Signature{Family: FamilyHostCheck, Backend: BackendCPU, Expression: "IndexError: Target N is out of bounds."}
	pass := Signature{Family: FamilyPass}
	timeout := Signature{Family: FamilyTimeout}
	infra := Signature{Family: FamilyInfra, Expression: "killed by SIGKILL"}
	tests := []struct {
		name      string
		got, want Signature
		level     MatchLevel
		match     bool
	}{
		{"strict same", nll, nll, MatchStrict, true},
		{"strict other kernel", nll2d, nll, MatchStrict, false},
		{"strict other expression", nllOther, nll, MatchStrict, false},
		{"strict other kernel and expression", idx, nll, MatchStrict, false},
		{"family other kernel", nll2d, nll, MatchFamily, true},
		{"any other family", oom, nll, MatchAny, true},
		{"family other family", oom, nll, MatchFamily, false},
		{"recorded without expression is no wildcard", nll, bare, MatchStrict, false},
		{"recorded without expression matches one without", bare, bare, MatchStrict, true},
		{"candidate without expression does not confirm", bare, nll, MatchStrict, false},
		{"any: pass is no reproduction", pass, nll, MatchAny, false},
		{"any: timeout is no reproduction", timeout, nll, MatchAny, false},
		{"any: infra is no reproduction", infra, nll, MatchAny, false},
		{"any: host check counts", host, nll, MatchAny, true},
		{"recorded timeout: timeout matches", timeout, timeout, MatchStrict, true},
		{"recorded timeout: a crash does not", nll, timeout, MatchAny, false},
		{"recorded pass", pass, pass, MatchFamily, true},
		{"unknown level is strict", idx, nll, MatchLevel("bogus"), false},
		{"backend not compared", Signature{Family: nll.Family, Backend: BackendHIP, Kernel: nll.Kernel, Expression: nll.Expression}, nll, MatchStrict, true},
		{"exception not compared", Signature{Family: nll.Family, Kernel: nll.Kernel, Expression: nll.Expression, Exception: "torch.AcceleratorError"}, nll, MatchStrict, true},
	}
	for _, tc := range tests {
		if got := tc.got.Matches(tc.want, tc.level); got != tc.match {
			t.Errorf("%s: %v.Matches(%v, %s) = %v, want %v", tc.name, tc.got, tc.want, tc.level, got, tc.match)
		}
	}
}

func TestParseMatchLevel(t *testing.T) {
	for in, want := range map[string]MatchLevel{"strict": MatchStrict, "family": MatchFamily, "any": MatchAny, "": MatchStrict, " Family ": MatchFamily} {
		got, err := ParseMatchLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseMatchLevel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := ParseMatchLevel("loose")
	if err == nil {
		t.Fatal("ParseMatchLevel(loose) did not fail")
	}
	if !errors.Is(err, ErrMatchLevel) {
		t.Errorf("error %v does not wrap ErrMatchLevel", err)
	}
	for _, s := range []string{`"loose"`, "strict", "family", "any"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
}

func TestSignatureFailing(t *testing.T) {
	for _, f := range Families() {
		want := f != FamilyPass && f != FamilyTimeout && f != FamilyInfra
		if got := Failing(Signature{Family: f}); got != want {
			t.Errorf("Failing(%s) = %v, want %v", f, got, want)
		}
	}
	if Failing(Signature{}) {
		t.Error("Failing(empty signature) = true")
	}
}

func TestSignatureStringAndJSON(t *testing.T) {
	s := Signature{Family: FamilyDeviceAssert, Backend: BackendCUDA, Kernel: "k", Expression: "a == b", Exception: "RuntimeError"}
	if got, want := s.String(), "device_assert(cuda) k: a == b [RuntimeError]"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := (Signature{Family: FamilyPass}).String(), "pass"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"family":"device_assert","backend":"cuda","kernel":"k","expression":"a == b","exception":"RuntimeError"}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back Signature
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Errorf("round trip: %v, %v", back, err)
	}
}

// parseCase is a small inline text, how its process ended, and the family
// and expression Parse must give it.
type parseCase struct {
	name   string
	stderr string
	exit   ExitInfo
	family Family
	expr   string
}

// TestParseExit covers the exit-status rules on small inline texts.
func TestParseExit(t *testing.T) {
	const assertText = "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [1,0,0] Assertion `t >= 0 && t < n_classes` failed.\n" +
		"terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: device-side assert triggered\n"
	const pyExc = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nIndexError: Target 3 is out of bounds.\n"
	tests := []parseCase{
		{"exit 0 with an error text is a pass", pyExc, ExitInfo{Code: 0}, FamilyPass, ""},
		{"timeout wins over text", pyExc, ExitInfo{Code: -1, Signal: 9, TimedOut: true}, FamilyTimeout, ""},
		{"harness", pyExc, ExitInfo{Code: 86, Harness: true}, FamilyInfra, "harness failure"},
		{"canceled", pyExc, ExitInfo{Code: -1, Signal: 2, Canceled: true}, FamilyInfra, "canceled"},
		{"SIGKILL is infra even with text", assertText, ExitInfo{Code: -1, Signal: 9}, FamilyInfra, "killed by SIGKILL"},
		{"shell 137 is SIGKILL", "", ExitInfo{Code: 137}, FamilyInfra, "killed by SIGKILL"},
		{"python -9 is SIGKILL", "", ExitInfo{Code: -9}, FamilyInfra, "killed by SIGKILL"},
		{"SIGTERM is infra", "", ExitInfo{Code: -1, Signal: 15}, FamilyInfra, "killed by SIGTERM"},
		{"SIGABRT with assert is the assert", assertText, ExitInfo{Code: -1, Signal: 6}, FamilyDeviceAssert, "t >= 0 && t < n_classes"},
		{"shell 134 with assert", assertText, ExitInfo{Code: 134}, FamilyDeviceAssert, "t >= 0 && t < n_classes"},
		{"SIGABRT bare", "", ExitInfo{Code: -1, Signal: 6}, FamilyAbortSignal, ""},
		{"SIGABRT after a python exception", pyExc, ExitInfo{Code: -1, Signal: 6}, FamilyAbortSignal, "IndexError: Target N is out of bounds."},
		{"SIGABRT glibc assert", "python3: /src/ext.cpp:12: void check(int): Assertion `n > 0' failed.\n", ExitInfo{Code: -1, Signal: 6}, FamilyAbortSignal, "Assertion `n > 0' failed."},
		{"SIGSEGV with assert is the assert", assertText, ExitInfo{Code: -1, Signal: 11}, FamilyDeviceAssert, "t >= 0 && t < n_classes"},
		{"SIGSEGV after a python exception", pyExc, ExitInfo{Code: 139}, FamilyCrashSignal, "killed by SIGSEGV"},
		{"SIGBUS", "", ExitInfo{Code: -1, Signal: 7}, FamilyCrashSignal, "killed by SIGBUS"},
		{"SIGFPE", "", ExitInfo{Code: -1, Signal: 8}, FamilyCrashSignal, "killed by SIGFPE"},
		{"SIGILL", "", ExitInfo{Code: -1, Signal: 4}, FamilyCrashSignal, "killed by SIGILL"},
		{"exit 1 garbage", "\x00\xff\xfe garbage ]]] 0x1234\n", ExitInfo{Code: 1}, FamilyHostCheck, "exit status 1"},
		{"exit 3 silent", "", ExitInfo{Code: 3}, FamilyHostCheck, "exit status 3"},
		{"unknown exit", "", ExitInfo{Code: -1}, FamilyInfra, "unknown exit status"},
		{"python exception", pyExc, ExitInfo{Code: 1}, FamilyHostCheck, "IndexError: Target N is out of bounds."},
		{"warning only", "/x/y.py:3: UserWarning: CUDA initialization: Found no NVIDIA driver on your system.\n", ExitInfo{Code: 1}, FamilyHostCheck, "exit status 1"},
		{"no GPU", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nRuntimeError: No CUDA GPUs are available\n", ExitInfo{Code: 1}, FamilyHostCheck, "RuntimeError: No CUDA GPUs are available"},
		{"no GPU, torch text", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nRuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver\n", ExitInfo{Code: 1}, FamilyInfra, "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver"},
		{"keyboard interrupt", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nKeyboardInterrupt\n", ExitInfo{Code: 1}, FamilyInfra, "KeyboardInterrupt"},
		{"CRLF and ANSI", "\x1b[31mTraceback (most recent call last):\r\n  File \"x.py\", line 1, in <module>\r\nIndexError: Target 3 is out of bounds.\x1b[0m\r\n", ExitInfo{Code: 1}, FamilyHostCheck, "IndexError: Target N is out of bounds."},
		{"memfault log line then exit 1", "some log\nMemory access fault by GPU node-4 (Agent handle: 0xabc) on address 0xdef. Reason: Unknown.\n", ExitInfo{Code: 1}, FamilyROCmMemFault, "Memory access fault by GPU: Unknown."},
		{"chained exceptions: last wins", pyExc + "\nDuring handling of the above exception, another exception occurred:\n\n" +
			"Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nValueError: Expected input batch_size (3) to match target batch_size (2).\n", ExitInfo{Code: 1}, FamilyHostCheck, "ValueError: Expected input batch_size (N) to match target batch_size (N)."},
		{"process exited with signal", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\ntorch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGSEGV\n", ExitInfo{Code: 1}, FamilyCrashSignal, "killed by SIGSEGV"},
		{"subprocess child died", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nsubprocess.CalledProcessError: Command '['python3', 'w.py']' died with <Signals.SIGBUS: 7>.\n", ExitInfo{Code: 1}, FamilyCrashSignal, "killed by SIGBUS"},
		{"OOM retried then assert", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" + assertText, ExitInfo{Code: 1}, FamilyDeviceAssert, "t >= 0 && t < n_classes"},
		{"bad alloc", "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n", ExitInfo{Code: -1, Signal: 6}, FamilyOOM, exprHostOOM},
		{"python MemoryError", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nMemoryError\n", ExitInfo{Code: 1}, FamilyOOM, exprHostOOM},
		{"anomaly, other output", "RuntimeError: Function 'DivBackward0' returned nan values in its 1th output.\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "Function 'DivBackward0' returned nan values in its 1th output."},
		{"is not on the expected device", "RuntimeError: Tensor on device meta is not on the expected device cpu!\n", ExitInfo{Code: 1}, FamilyDeviceMismatch, exprSameDevice},
	}
	for _, tc := range tests {
		tc.check(t)
	}
}

// check parses tc's text and reports a family or expression other than
// tc's; it returns the signature.
func (tc parseCase) check(t *testing.T) Signature {
	t.Helper()
	got := Parse([]byte(tc.stderr), tc.exit)
	if got.Family != tc.family || got.Expression != tc.expr {
		t.Errorf("%s: Parse = %s; want family %s, expression %q", tc.name, got, tc.family, tc.expr)
	}
	return got
}

// TestParseNonFinite: a finiteness check that raises is nan_anomaly, with
// the Expression a host check would have; the texts that only look like one
// keep their families.
func TestParseNonFinite(t *testing.T) {
	const assertLine = "../aten/src/ATen/native/cuda/MultinomialKernel.cu:112: operator(): block: [0,0,0], thread: [0,0,0] Assertion `probability tensor contains either `inf`, `nan` or element < 0` failed.\n"
	tests := []parseCase{
		// What counts.
		{"FloatingPointError, any message", tb + "FloatingPointError: overflow encountered in exp\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "FloatingPointError: overflow encountered in exp"},
		{"FloatingPointError, the project's", tb + "FloatingPointError: loss is nan\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "FloatingPointError: loss is nan"},
		{"ValueError, numbers normalized", tb + "ValueError: Loss is NaN at step 3\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "ValueError: Loss is NaN at step N"},
		{"AssertionError", tb + "AssertionError: non-finite loss\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "AssertionError: non-finite loss"},
		{"RuntimeError inf", tb + "RuntimeError: loss is inf\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "RuntimeError: loss is inf"},
		{"RuntimeError -inf", tb + "RuntimeError: loss is -inf\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "RuntimeError: loss is -inf"},
		{"ArithmeticError not finite", tb + "ArithmeticError: gradient norm is not finite\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "ArithmeticError: gradient norm is not finite"},
		{"OverflowError is infinite", tb + "OverflowError: activation is infinite in float16\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "OverflowError: activation is infinite in float16"},
		{"OverflowError infinity", tb + "OverflowError: cannot convert float infinity to integer\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "OverflowError: cannot convert float infinity to integer"},
		{"nonfinite", tb + "RuntimeError: nonfinite gradients in layer 4\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "RuntimeError: nonfinite gradients in layer N"},
		{"isfinite", tb + "AssertionError: torch.isfinite(loss) failed\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "AssertionError: torch.isfinite(loss) failed"},
		{"NaNs, NaN/Inf", tb + "FloatingPointError: Non-finite tensor in logits: 3/8 values are NaN/Inf\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "FloatingPointError: Non-finite tensor in logits: N/N values are NaN/Inf"},
		{"user class", tb + "NaNLossError: loss contains NaNs\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "NaNLossError: loss contains NaNs"},
		{"user class in a module", tb + "trainer.errors.DivergenceError: weights are nan after step 12\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "trainer.errors.DivergenceError: weights are nan after step N"},
		{"Lightning's older text", tb + "ValueError: The loss returned in `training_step` is tensor(nan, grad_fn=<AddBackward0>).\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "ValueError: The loss returned in `training_step` is tensor(nan, grad_fn=<AddBackward0>)."},
		{"torch's own", tb + "RuntimeError: linalg.svd: The algorithm failed to converge because the input matrix contained non-finite values.\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "RuntimeError: linalg.svd: The algorithm failed to converge because the input matrix contained non-finite values."},
		{"bare line", "ValueError: Loss is NaN\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "ValueError: Loss is NaN"},
		{"after SIGABRT", tb + "FloatingPointError: loss is nan\n", ExitInfo{Code: 134}, FamilyNaNAnomaly, "FloatingPointError: loss is nan"},
		// What does not.
		{"nanoseconds", tb + "RuntimeError: step took 1200 nanoseconds\n", ExitInfo{Code: 1}, FamilyHostCheck, "RuntimeError: step took N nanoseconds"},
		{"banana", tb + "ValueError: banana is not a label\n", ExitInfo{Code: 1}, FamilyHostCheck, "ValueError: banana is not a label"},
		{"Nanjing", tb + "ValueError: unknown city Nanjing\n", ExitInfo{Code: 1}, FamilyHostCheck, "ValueError: unknown city Nanjing"},
		{"nan_to_num", tb + "ValueError: nan_to_num got an unexpected keyword\n", ExitInfo{Code: 1}, FamilyHostCheck, "ValueError: nan_to_num got an unexpected keyword"},
		{"info", tb + "RuntimeError: shape '[2, 3]' is invalid for input of size 5 (see info above)\n", ExitInfo{Code: 1}, FamilyHostCheck, "RuntimeError: shape '[N, N]' is invalid for input of size N (see info above)"},
		{"inference", tb + "RuntimeError: Inference tensors cannot be saved for backward.\n", ExitInfo{Code: 1}, FamilyHostCheck, "RuntimeError: Inference tensors cannot be saved for backward."},
		{"finfo", tb + "TypeError: torch.finfo() requires a floating point input type\n", ExitInfo{Code: 1}, FamilyHostCheck, "TypeError: torch.finfo() requires a floating point input type"},
		{"TypeError names isnan", tb + "TypeError: isnan(): argument 'input' (position 1) must be Tensor, not float\n", ExitInfo{Code: 1}, FamilyHostCheck, "TypeError: isnan(): argument 'input' (position N) must be Tensor, not float"},
		{"KeyError 'nan'", tb + "KeyError: 'nan'\n", ExitInfo{Code: 1}, FamilyHostCheck, "KeyError: 'nan'"},
		{"GradScaler", tb + "AssertionError: No inf checks were recorded for this optimizer.\n", ExitInfo{Code: 1}, FamilyHostCheck, "AssertionError: No inf checks were recorded for this optimizer."},
		{"infinity norm", tb + "RuntimeError: _foreach_norm cannot compute the infinity norm on an empty tensor because the operation does not have an identity\n", ExitInfo{Code: 1}, FamilyHostCheck, "RuntimeError: _foreach_norm cannot compute the infinity norm on an empty tensor because the operation does not have an identity"},
		{"multinomial keeps its class", tb + "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n", ExitInfo{Code: 1}, FamilyHostCheck, "RuntimeError: probability tensor contains either `inf`, `nan` or element < N"},
		{"torch's dynamo", tb + "torch._dynamo.exc.TorchRuntimeError: Failed running call_function <built-in method isnan of type object at 0x7f00>(*(FakeTensor(..., size=(2,)),), **{}):\n", ExitInfo{Code: 1}, FamilyHostCheck,
			"torch._dynamo.exc.TorchRuntimeError: Failed running call_function <built-in method isnan of type object at 0x?>(*(FakeTensor(..., size=(N,)),), **{}):"},
		{"a C++ class", "terminate called after throwing an instance of 'c10::Error'\n  what():  loss is nan\n", ExitInfo{Code: -1, Signal: 6}, FamilyAbortSignal, "c10::Error: loss is nan"},
		{"a log line", "step 3: loss is nan\n", ExitInfo{Code: 1}, FamilyHostCheck, "exit status 1"},
		{"the device assert first", assertLine + tb + "FloatingPointError: loss is nan\n", ExitInfo{Code: 1}, FamilyDeviceAssert, "probability tensor contains either `inf`, `nan` or element < 0"},
		{"OOM keeps its family", tb + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB; loss is nan\n", ExitInfo{Code: 1}, FamilyOOM, exprDeviceOOM},
		{"anomaly mode unchanged", tb + "RuntimeError: Function 'LogBackward0' returned nan values in its 0th output.\n", ExitInfo{Code: 1}, FamilyNaNAnomaly, "Function 'LogBackward0' returned nan values in its 0th output."},
	}
	for _, tc := range tests {
		got := tc.check(t)
		if got.Family == FamilyNaNAnomaly && got.Kernel == "" && got.Class() != ClassNonFinite {
			t.Errorf("%s: class %q, want %q", tc.name, got.Class(), ClassNonFinite)
		}
	}
}

func TestParseKernelNames(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"nll_loss_forward_reduce_cuda_kernel_2d", "nll_loss_forward_reduce_cuda_kernel_2d"},
		{"void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float *, float *, float *, const long *, const float *, bool, long, long, long, long)", "nll_loss_forward_reduce_cuda_kernel_2d"},
		{"void cunn_ClassNLLCriterion_updateOutput_kernel(Dtype *, Dtype *, Dtype *, long *, Dtype *, int, int, int, int, long) [with Dtype = float, Acctype = float]", "cunn_ClassNLLCriterion_updateOutput_kernel"},
		{"void indexSelectLargeIndex<T, IndexType, DstDim, SrcDim, IdxDim, IndexIsMajor>(cuda::detail::TensorInfo<T, IndexType>, cuda::detail::TensorInfo<T, IndexType>, cuda::detail::TensorInfo<long, IndexType>, int, int, IndexType, IndexType, long) [with T = float, IndexType = unsigned int, DstDim = 2, SrcDim = 2, IdxDim = -2, IndexIsMajor = true]", "indexSelectLargeIndex"},
		{"operator()", "operator()"},
		{"at::native::foo<int>::operator()(int) const", "operator()"},
		{"unknown", ""},
		{"triton_poi_fused_embedding_0", "triton_poi_fused_embedding"},
		{"triton_red_fused__log_softmax_nll_loss_forward_12", "triton_red_fused__log_softmax_nll_loss_forward"},
		{"", ""},
		{"f<<unbalanced", "f<<unbalanced"},
		{")(", ")("},
	}
	for _, tc := range tests {
		if got := cleanKernel(tc.raw); got != tc.want {
			t.Errorf("cleanKernel(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		// Rule 1 and 2: colours, CR, rank prefixes.
		{"\x1b[31m[rank3]: RuntimeError: x\r", "RuntimeError: x"},
		{"[default0]:  File \"a.py\", line 3, in f", "File \"a.py\", line N, in f"},
		{"0: IndexError: y", "IndexError: y"},
		{"[1,0]<stderr>:IndexError: y", "IndexError: y"},
		// 3: timestamps.
		{"time      : 2024-05-01_12:00:03", "time : TIME"},
		// 4: addresses.
		{"frame #0: c10::Error::Error + 0x96 (0x7f0e2a57a446 in libc10.so)", "frame #0: c10::Error::Error + 0x? (0x? in libc10.so)"},
		// 5 and 6: line numbers and paths.
		{"../aten/src/ATen/native/cuda/Loss.cu:250: k: x", "Loss.cu: k: x"},
		{"/opt/conda/conda-bld/pytorch_1680000000/work/aten/src/ATen/native/cuda/Loss.cu:242: k", "Loss.cu: k"},
		{`C:\actions-runner\_work\pytorch\pytorch\aten\src\ATen\native\cuda\Loss.cu:250: block: [0,0,0], thread: [5,0,0] Assertion`, "Loss.cu: Assertion"},
		{"[enforce fail at alloc_cpu.cpp:75] err == 0.", "[enforce fail at alloc_cpu.cpp] err == 0."},
		{"/tmp/torchinductor_user/ux/cuxq3ndx3b.py:30: triton_poi_fused_embedding_0: x", "torchinductor: triton_poi_fused_embedding_0: x"},
		// Inductor's C++ bound check, its cache in a TORCHINDUCTOR_CACHE_DIR of another name.
		{"kernel, /scratch/cache/rd/crdb4wqsltyllc5iv343t5chqvopbxbvtwjcy3lzyht7jq33kuqc.main.cpp:48, index out of bounds", "kernel, torchinductor, index out of bounds"},
		{"/scratch/cache/rd/not-a-hash.main.cpp:48: x", "not-a-hash.main.cpp: x"},
		{"error_file: <N/A> inf/nan", "error_file: <N/A> inf/nan"},
		{"THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCTensorMath.cu line=26 error=59 : x", "THCudaCheck FAIL file=THCTensorMath.cu line=N error=59 : x"},
		// 7: block and thread ids.
		{"Loss.cu: k: block: [3,0,0], thread: [95,0,0] Assertion `t` failed.", "Loss.cu: k: Assertion `t` failed."},
		// 8: pids, ranks, devices.
		{"exitcode  : 1 (pid: 48213) rank      : 1 (local_rank: 1)", "exitcode : 1 (pid: N) rank : N (local_rank: N)"},
		{"Signal 11 (SIGSEGV) received by PID 4242", "Signal 11 (SIGSEGV) received by PID N"},
		{"GPU 3 has a total capacity; cuda:1 and cpu; node-2", "GPU N has a total capacity; cuda:N and cpu; node-N"},
		// 9: sizes.
		{"Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity", "Tried to allocate N B (GPU N; N B total capacity"},
		{"you tried to allocate 281474976710656 bytes. Error code 12", "you tried to allocate N B. Error code 12"},
		// 10: Inductor temporaries.
		{"index out of bounds: 0 <= tmp4 < 32000", "index out of bounds: 0 <= tmp < 32000"},
		// 11: white space.
		{"  a \t  b  ", "a b"},
	}
	for _, tc := range tests {
		if got := Normalize(tc.in); got != tc.want {
			t.Errorf("Normalize(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestNormalizeMessage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Target 4 is out of bounds.", "Target N is out of bounds."},
		{"index 12 is out of bounds for dimension 1 with size 4", "index N is out of bounds for dimension N with size N"},
		{"Expected input batch_size (3) to match target batch_size (2).", "Expected input batch_size (N) to match target batch_size (N)."},
		{"0D or 1D target tensor expected", "ND or ND target tensor expected"},
		{"ignore_index -100, 1.5, float32, MulBackward0, 0x1f", "ignore_index N, N, float32, MulBackward0, 0x?"},
		{"index out of bounds: 0 <= tmp8 < 50265L", "index out of bounds: N <= tmp < NL"},
	}
	for _, tc := range tests {
		if got := normalizeMessage(tc.in); got != tc.want {
			t.Errorf("normalizeMessage(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseLargeInput(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.\n")
	line := "../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [1,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
	for b.Len() < 3*maxParse {
		b.WriteString(line)
	}
	b.WriteString("RuntimeError: CUDA error: device-side assert triggered\n")
	got := Parse(b.Bytes(), ExitInfo{Code: 1})
	if got.Kernel != "nll_loss_forward_reduce_cuda_kernel_2d" || got.Exception != "RuntimeError" {
		t.Errorf("Parse of %d bytes = %s", b.Len(), got)
	}
}

// TestFamilyTable: every failing family says its class in the family
// table, but for those whose classes are per check (device asserts and
// host checks, by op) or per expression (OOM: device or host; NaN anomaly:
// anomaly mode or a finiteness check), and the signals, which name no
// check; a family added without one fails here.
func TestFamilyTable(t *testing.T) {
	perCheck := map[Family]bool{FamilyDeviceAssert: true, FamilyHostCheck: true, FamilyOOM: true, FamilyNaNAnomaly: true,
		FamilyAbortSignal: true, FamilyCrashSignal: true,
		// Keyed by their status or message (Expression), not by a class.
		FamilyCUBLASError: true, FamilyCUDNNError: true, FamilyCUDAError: true}
	seen := map[Family]bool{}
	for _, f := range families {
		if seen[f.family] {
			t.Errorf("%s: twice in the table", f.family)
		}
		seen[f.family] = true
		s := Signature{Family: f.family}
		if Failing(s) && !perCheck[f.family] && s.Class() == "" {
			t.Errorf("%s: no class (give it one in the family table)", f.family)
		}
		if !Failing(s) && (f.deviceSide || f.class != "") {
			t.Errorf("%s: not a failure, but device-side or classed", f.family)
		}
	}
}
