package kernels

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// -update rewrites testdata/ops/*.golden. The flag is defined in init, after
// every package-level variable, so that a test file of the package that
// defines its own -update shares it instead of clashing.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite testdata/ops/*.golden")
	}
}

func updatingOpGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// opTensor is a contiguous tensor holding vals.
func opTensor(dt DType, shape []int64, vals ...float64) *Tensor {
	t := MustNew(dt, shape...)
	for i, v := range vals {
		t.StoreFloat(int64(i), v)
	}
	return t
}

func seqValues(n int, f func(i int) float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = f(i)
	}
	return v
}

func runOp(t *testing.T, mode Mode, name string, tensors map[string]*Tensor, attrs map[string]any) *Result {
	t.Helper()
	op, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := op.Run(mode, tensors, attrs)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func TestOpLookupAndBadInput(t *testing.T) {
	if _, err := Lookup("softmax"); !errors.Is(err, ErrUnknownOp) {
		t.Fatalf("Lookup(softmax) = %v, want ErrUnknownOp", err)
	}
	// The registry's names: sorted, each the name of its op. (The Python op
	// table is generated from the registry; TestPythonOpTable in replay
	// fails while it is stale.)
	names := OpNames()
	if len(names) == 0 || !sort.StringsAreSorted(names) {
		t.Fatalf("OpNames() = %v", names)
	}
	for _, n := range names {
		if op, err := Lookup(n); err != nil || op.Name != n {
			t.Fatalf("Lookup(%q) = %v, %v", n, op, err)
		}
	}
	op, _ := Lookup("cross_entropy")
	x := opTensor(Float32, []int64{2, 3}, 1, 2, 3, 4, 5, 6)
	y := opTensor(Int64, []int64{2}, 0, 1)
	cases := []struct {
		tensors map[string]*Tensor
		attrs   map[string]any
		want    error
		text    string
	}{
		{map[string]*Tensor{"input": x}, nil, ErrTensorArg, `missing tensor "target"`},
		{map[string]*Tensor{"input": x, "target": y, "bias": x}, nil, ErrTensorArg, `no tensor "bias"`},
		{map[string]*Tensor{"input": x, "target": y}, map[string]any{"reduce": true}, ErrAttr, `no attribute "reduce"`},
		{map[string]*Tensor{"input": x, "target": y}, map[string]any{"ignore_index": 1.5}, ErrAttr, "not an integer"},
		{map[string]*Tensor{"input": x, "target": y}, map[string]any{"reduction": 3}, ErrAttr, "want a string"},
		{map[string]*Tensor{"input": x, "target": y}, map[string]any{"label_smoothing": true}, ErrAttr, "got a bool"},
		{map[string]*Tensor{"input": {DType: Float32, Shape: []int64{4}, Strides: []int64{1}, Data: make([]byte, 8)}, "target": y}, nil, ErrTensorArg, "outside its storage"},
	}
	for i, c := range cases {
		_, err := op.Run(ModeCPU, c.tensors, c.attrs)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("case %d: err = %v, want %v containing %q", i, err, c.want, c.text)
		}
	}
	is, _ := Lookup("index_select")
	if _, err := is.Run(ModeCPU, map[string]*Tensor{"input": x, "index": y}, nil); !errors.Is(err, ErrAttr) {
		t.Errorf("index_select without dim: %v", err)
	}
	// Numbers in every form a worker may hold them; an explicit nil weight.
	for _, ii := range []any{json.Number("1"), int64(1), 1.0, 1, int32(1)} {
		res := runOp(t, ModeCPU, "cross_entropy", map[string]*Tensor{"input": x, "target": y, "weight": nil},
			map[string]any{"ignore_index": ii, "reduction": "sum", "label_smoothing": json.Number("0")})
		if res.Failure != nil {
			t.Fatalf("ignore_index %T: %v", ii, res.Failure)
		}
		// Target 1 is ignored: the loss is row 0's -log_softmax[0].
		want := -(1 - math.Log(math.Exp(1)+math.Exp(2)+math.Exp(3)))
		if got := res.Outputs["output"].LoadFloat(0); math.Abs(got-want) > 1e-6 {
			t.Fatalf("loss = %v, want %v", got, want)
		}
	}
	// one_hot takes "tensor", or "input" as an alias.
	res := runOp(t, ModeCPU, "one_hot", map[string]*Tensor{"input": y}, nil)
	if res.Failure != nil || !sameShape(res.Outputs["output"].Shape, []int64{2, 2}) {
		t.Fatalf("one_hot(input=...) = %+v", res)
	}
}

// TestOpCPUMessages pins torch 1.13's CPU texts (TestOpsAgainstTorch checks
// them against torch itself when it is installed).
func TestOpCPUMessages(t *testing.T) {
	x := opTensor(Float32, []int64{3, 4}, seqValues(12, func(i int) float64 { return float64(i) / 7 })...)
	cases := []struct {
		op      string
		tensors map[string]*Tensor
		attrs   map[string]any
		exc     string
		msg     string
	}{
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int64, []int64{3}, 0, 1, 4)}, nil,
			"IndexError", "Target 4 is out of bounds."},
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int64, []int64{2}, 0, 1)}, nil,
			"ValueError", "Expected input batch_size (3) to match target batch_size (2)."},
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int64, []int64{3, 2})}, nil,
			"RuntimeError", "0D or 1D target tensor expected, multi-target not supported"},
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int32, []int64{3})}, nil,
			"RuntimeError", "expected scalar type Long but found Int"},
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Float32, []int64{3})}, nil,
			"RuntimeError", "expected scalar type Long but found Float"},
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int64, []int64{3, 4})}, nil,
			"RuntimeError", "Expected floating point type for target with class probabilities, got Long"},
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int64, []int64{3})}, map[string]any{"reduction": "avg"},
			"ValueError", "avg is not a valid value for reduction"},
		{"nll_loss", map[string]*Tensor{"input": x, "target": opTensor(Uint8, []int64{3}, 0, 1, 65)}, map[string]any{"reduction": "none"},
			"IndexError", "Target A is out of bounds."},
		{"embedding", map[string]*Tensor{"input": opTensor(Int64, []int64{2}, 0, 5), "weight": x}, nil,
			"IndexError", "index out of range in self"},
		{"embedding", map[string]*Tensor{"input": opTensor(Float32, []int64{2}), "weight": x}, nil,
			"RuntimeError", "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got torch.FloatTensor instead (while checking arguments for embedding)"},
		{"index_select", map[string]*Tensor{"input": x, "index": opTensor(Int64, []int64{1}, 4)}, map[string]any{"dim": 1},
			"RuntimeError", "INDICES element is out of DATA bounds, id=4 axis_dim=4"},
		{"index_select", map[string]*Tensor{"input": x, "index": opTensor(Int64, []int64{1}, 3)}, map[string]any{"dim": 0},
			"IndexError", "index out of range in self"},
		{"gather", map[string]*Tensor{"input": x, "index": opTensor(Int64, []int64{1, 1}, 9)}, map[string]any{"dim": 1},
			"RuntimeError", "index 9 is out of bounds for dimension 1 with size 4"},
		{"gather", map[string]*Tensor{"input": x, "index": opTensor(Int32, []int64{1, 1})}, map[string]any{"dim": 1},
			"RuntimeError", "gather(): Expected dtype int64 for index"},
		{"scatter_add", map[string]*Tensor{"input": x, "index": opTensor(Int64, []int64{1, 1}, -1), "src": x}, map[string]any{"dim": 0},
			"RuntimeError", "index -1 is out of bounds for dimension 0 with size 3"},
		{"one_hot", map[string]*Tensor{"tensor": opTensor(Int64, []int64{2}, 0, 3)}, map[string]any{"num_classes": 3},
			"RuntimeError", "Class values must be smaller than num_classes."},
		{"one_hot", map[string]*Tensor{"tensor": opTensor(Int64, []int64{2}, 0, -3)}, nil,
			"RuntimeError", "Class values must be non-negative."},
		{"binary_cross_entropy", map[string]*Tensor{"input": opTensor(Float32, []int64{2}, 0.5, 1.5), "target": opTensor(Float32, []int64{2})}, nil,
			"RuntimeError", "all elements of input should be between 0 and 1"},
		{"index", map[string]*Tensor{"input": x, "index": opTensor(Int64, []int64{2}, 0, 10)}, map[string]any{"dim": 1},
			"IndexError", "index 10 is out of bounds for dimension 0 with size 4"},
	}
	for _, c := range cases {
		res := runOp(t, ModeCPU, c.op, c.tensors, c.attrs)
		if res.Failure == nil {
			t.Errorf("%s: no failure, want %s: %s", c.op, c.exc, c.msg)
			continue
		}
		if res.Failure.Exception != c.exc || res.Failure.Message != c.msg {
			t.Errorf("%s: %s: %q, want %s: %q", c.op, res.Failure.Exception, res.Failure.Message, c.exc, c.msg)
		}
		if res.Failure.Device() || res.Failure.Op != c.op {
			t.Errorf("%s: device %v, op %q", c.op, res.Failure.Device(), res.Failure.Op)
		}
	}
}

func TestOpWriteCPUFailure(t *testing.T) {
	x := opTensor(Float32, []int64{3, 4})
	res := runOp(t, ModeCPU, "cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int64, []int64{3}, 0, 1, 4)}, nil)
	var b bytes.Buffer
	if err := WriteCPUFailure(&b, res.Failure); err != nil {
		t.Fatal(err)
	}
	checkOpGolden(t, "cpu_cross_entropy", b.String())
	if !strings.HasSuffix(b.String(), "\nIndexError: Target 4 is out of bounds.\n") {
		t.Fatalf("traceback does not end in the exception:\n%s", b.String())
	}
	b.Reset()
	res = runOp(t, ModeCPU, "nll_loss", map[string]*Tensor{"input": x, "target": opTensor(Int64, []int64{3})}, map[string]any{"reduction": "avg"})
	if err := WriteCPUFailure(&b, res.Failure); err != nil {
		t.Fatal(err)
	}
	checkOpGolden(t, "cpu_nll_loss_reduction", b.String())
}

// cudaGolden is one device-assert case, printed by WriteCUDAFailure.
type cudaGolden struct {
	name    string
	op      string
	tensors map[string]*Tensor
	attrs   map[string]any
	opts    TextOptions
	site    Site
	threads int64
}

func TestOpCUDAGolden(t *testing.T) {
	x40 := opTensor(Float32, []int64{40, 5}, seqValues(200, func(i int) float64 { return math.Sin(float64(i)) })...)
	tgt40 := seqValues(40, func(i int) float64 { return float64(i % 5) })
	tgt40[3], tgt40[35], tgt40[36], tgt40[10] = 7, -1, 5, -100 // thread 3 fails at 3 (and 35), thread 4 at 36; 10 is ignored
	seg := opTensor(Float32, []int64{2, 3, 4, 4}, seqValues(96, func(i int) float64 { return math.Cos(float64(i)) })...)
	segT := seqValues(32, func(i int) float64 { return float64(i % 3) })
	segT[16+5], segT[16+6], segT[2] = 3, 255, -100
	w := opTensor(Float32, []int64{10, 4}, seqValues(40, func(i int) float64 { return float64(i) })...)
	idx6 := opTensor(Int64, []int64{2, 3}, 0, 1, 2, 9, 10, -1)
	idx20 := opTensor(Int64, []int64{20}, seqValues(20, func(i int) float64 {
		if i == 7 || i == 19 {
			return 10
		}
		return float64(i % 10)
	})...)
	cases := []cudaGolden{
		{name: "cuda_cross_entropy_2d", op: "cross_entropy", site: SiteNLLReduce2D, threads: 2,
			tensors: map[string]*Tensor{"input": x40, "target": opTensor(Int64, []int64{40}, tgt40...)}},
		{name: "cuda_nll_loss_none", op: "nll_loss", site: SiteNLLNoReduce, threads: 3,
			tensors: map[string]*Tensor{"input": x40, "target": opTensor(Int64, []int64{40}, tgt40...)},
			attrs:   map[string]any{"reduction": "none"}},
		{name: "cuda_nll_loss_1d", op: "nll_loss", site: SiteNLLReduce1D, threads: 1,
			tensors: map[string]*Tensor{"input": opTensor(Float32, []int64{5}), "target": opTensor(Int64, nil, 5)}},
		{name: "cuda_cross_entropy_segmentation", op: "cross_entropy", site: SiteNLL2D, threads: 2,
			tensors: map[string]*Tensor{"input": seg, "target": opTensor(Int64, []int64{2, 4, 4}, segT...)},
			attrs:   map[string]any{"ignore_index": 255}},
		{name: "cuda_embedding_small", op: "embedding", site: SiteIndexSelectSmall, threads: 4,
			tensors: map[string]*Tensor{"input": idx6, "weight": w}},
		{name: "cuda_embedding_large", op: "embedding", site: SiteIndexSelectLarge, threads: 8,
			tensors: map[string]*Tensor{"input": idx20, "weight": w}},
		{name: "cuda_index_select_dim1", op: "index_select", site: SiteIndexSelectLarge, threads: 4,
			tensors: map[string]*Tensor{"input": opTensor(Float32, []int64{2, 10}), "index": idx20}, attrs: map[string]any{"dim": 1}},
		{name: "cuda_gather", op: "gather", site: SiteScatterGather, threads: 2,
			tensors: map[string]*Tensor{"input": opTensor(Float32, []int64{3, 4}), "index": opTensor(Int64, []int64{3, 2}, 0, 9, 1, 1, -2, 3)},
			attrs:   map[string]any{"dim": 1}},
		{name: "cuda_scatter_add", op: "scatter_add", site: SiteScatterGather, threads: 1,
			tensors: map[string]*Tensor{"input": opTensor(Float32, []int64{3, 4}), "index": opTensor(Int64, []int64{2, 4}, 0, 1, 2, 0, 1, 2, 3, 0), "src": opTensor(Float32, []int64{2, 4})},
			attrs:   map[string]any{"dim": 0}},
		{name: "cuda_one_hot", op: "one_hot", site: SiteScatterFill, threads: 2,
			tensors: map[string]*Tensor{"tensor": opTensor(Int64, []int64{4}, 0, 3, 1, -1)}, attrs: map[string]any{"num_classes": 3}},
		{name: "cuda_binary_cross_entropy", op: "binary_cross_entropy", site: SiteBCE, threads: 3,
			tensors: map[string]*Tensor{
				"input": opTensor(Float32, []int64{600}, seqValues(600, func(i int) float64 {
					if i == 2 || i == 3 || i == 130 || i == 515 {
						return 1.25
					}
					return 0.5
				})...),
				"target": opTensor(Float32, []int64{600})}},
		{name: "cuda_index", op: "index", site: SiteIndex, threads: 3,
			tensors: map[string]*Tensor{"input": opTensor(Float32, []int64{3, 5}), "index": opTensor(Int64, []int64{2}, 0, 5)}, attrs: map[string]any{"dim": 1}},
		{name: "cuda_options", op: "gather", site: SiteScatterGather, threads: 6,
			tensors: map[string]*Tensor{"input": opTensor(Float32, []int64{3, 4}), "index": opTensor(Int64, []int64{3, 2}, 9, 9, 9, 9, 9, 9)},
			attrs:   map[string]any{"dim": 1},
			opts: TextOptions{MaxLines: 2, LaunchBlocking: true, NoFunction: true, NoTraceback: true,
				PathPrefix: `C:\actions-runner\_work\pytorch\pytorch\builder\windows\pytorch\`}},
	}
	for _, c := range cases {
		res := runOp(t, ModeCUDA, c.op, c.tensors, c.attrs)
		f := res.Failure
		if f == nil || !f.Device() {
			t.Errorf("%s: no device assert: %+v", c.name, res)
			continue
		}
		if f.Asserts[0].Site != c.site || f.AssertThreads != c.threads || !f.Async || f.Exception != "RuntimeError" {
			t.Errorf("%s: site %s:%d, %d threads, async %v; want %s:%d, %d threads", c.name,
				f.Asserts[0].File, f.Asserts[0].Line, f.AssertThreads, f.Async, c.site.File, c.site.Line, c.threads)
		}
		var b bytes.Buffer
		if err := WriteCUDAFailure(&b, f, c.opts); err != nil {
			t.Fatal(err)
		}
		checkOpGolden(t, c.name, b.String())
	}
}

func TestOpCUDAHostChecks(t *testing.T) {
	x := opTensor(Float32, []int64{3, 4})
	cases := []struct {
		op      string
		tensors map[string]*Tensor
		attrs   map[string]any
		msg     string
	}{
		// Shape checks raise on the host, as on CPU.
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int64, []int64{2})}, nil,
			"Expected input batch_size (3) to match target batch_size (2)."},
		// The CUDA kernels dispatch the target's dtype by name.
		{"cross_entropy", map[string]*Tensor{"input": x, "target": opTensor(Int32, []int64{3})}, nil,
			`"nll_loss_forward_reduce_cuda_kernel_2d_index" not implemented for 'Int'`},
		{"nll_loss", map[string]*Tensor{"input": x, "target": opTensor(Float32, []int64{3})}, map[string]any{"reduction": "none"},
			`"nll_loss_forward_no_reduce_cuda_kernel_index" not implemented for 'Float'`},
		{"embedding", map[string]*Tensor{"input": opTensor(Float32, []int64{2}), "weight": x}, nil,
			"Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got torch.cuda.FloatTensor instead (while checking arguments for embedding)"},
		{"one_hot", map[string]*Tensor{"tensor": opTensor(Int64, []int64{2}, 0, 1)}, map[string]any{"num_classes": 0},
			"num_classes should be positive"},
	}
	for _, c := range cases {
		res := runOp(t, ModeCUDA, c.op, c.tensors, c.attrs)
		if res.Failure == nil || res.Failure.Device() || res.Failure.Message != c.msg {
			t.Errorf("%s: %+v, want host error %q", c.op, res.Failure, c.msg)
		}
	}
	// Half runs on CUDA, and a 4-D reduction='none' loss has no device
	// check in 1.13: the bad target's output is undefined and noted.
	seg := opTensor(Float16, []int64{1, 3, 2, 2})
	res := runOp(t, ModeCUDA, "cross_entropy", map[string]*Tensor{"input": seg, "target": opTensor(Int64, []int64{1, 2, 2}, 0, 1, 7, 2)},
		map[string]any{"reduction": "none"})
	if res.Failure != nil || len(res.Notes) != 1 || !math.IsNaN(res.Outputs["output"].LoadFloat(2)) {
		t.Fatalf("4-D none on CUDA: %+v", res)
	}
	if got := res.Outputs["output"].LoadFloat(0); math.Abs(got-math.Log(3)) > 1e-3 {
		t.Fatalf("loss[0] = %v, want log 3", got)
	}
}

// TestOpNonContiguous runs the ops on the same values in several layouts.
func TestOpNonContiguous(t *testing.T) {
	base := opTensor(Float32, []int64{2, 3, 4, 5}, seqValues(120, func(i int) float64 { return math.Sin(float64(i) * 0.37) })...)
	// channels_last copy of base
	cl := &Tensor{DType: Float32, Shape: []int64{2, 3, 4, 5}, Strides: []int64{60, 1, 15, 3}, Data: make([]byte, 120*4)}
	base.Each(func(idx []int64, e int64) { cl.StoreFloat(storageIndex(cl, idx), base.LoadFloat(e)) })
	// offset copy
	off := &Tensor{DType: Float32, Shape: base.Shape, Strides: base.Strides, Offset: 7, Data: make([]byte, 127*4)}
	base.Each(func(idx []int64, e int64) { off.StoreFloat(storageIndex(off, idx), base.LoadFloat(e)) })
	tgt := opTensor(Int64, []int64{2, 4, 5}, seqValues(40, func(i int) float64 { return float64(i % 3) })...)
	var want []float64
	for i, in := range []*Tensor{base, cl, off} {
		res := runOp(t, ModeCPU, "cross_entropy", map[string]*Tensor{"input": in, "target": tgt}, map[string]any{"reduction": "none"})
		if res.Failure != nil {
			t.Fatal(res.Failure)
		}
		got := opTensorValues(res.Outputs["output"])
		if i == 0 {
			want = got
			continue
		}
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("layout %d: value %d = %v, want %v", i, j, got[j], want[j])
			}
		}
	}
}

func checkOpGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "ops", name+".golden")
	if updatingOpGolden() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from %s (run with -update to accept):\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

// TestOpsCUDAConsistency runs the differential generator's cases (no torch
// needed) in both modes: CUDA mode must not fail where CPU mode succeeds
// (except for dtypes only CUDA supports, which it must then accept), must
// agree on the values, and every device failure must carry asserts of one
// site with block and thread inside plausible launch bounds.
func TestOpsCUDAConsistency(t *testing.T) {
	cases := genOpCases(rand.New(rand.NewSource(7)), 800)
	device, host := 0, 0
	for _, c := range cases {
		op, _ := Lookup(c.Op)
		cpu, err := op.Run(ModeCPU, c.Tensors, c.GoAttrs)
		if err != nil {
			t.Fatalf("case %d: %v", c.ID, err)
		}
		gpu, err := op.Run(ModeCUDA, c.Tensors, c.GoAttrs)
		if err != nil {
			t.Fatalf("case %d: %v", c.ID, err)
		}
		if f := gpu.Failure; f != nil {
			if f.Device() {
				device++
				for _, a := range f.Asserts {
					if a.Site != f.Asserts[0].Site || a.Block[0] < 0 || a.Thread[0] < 0 || a.Thread[0] >= 1024 {
						t.Fatalf("case %d: bad assert %+v", c.ID, a)
					}
				}
				if cpu.Failure == nil {
					t.Errorf("case %d (%s): device assert where CPU succeeds: %s", c.ID, c.Op, c.describe())
				}
			} else {
				host++
			}
			continue
		}
		if cpu.Failure != nil {
			continue // a range or dtype check CUDA does not make
		}
		a, b := opTensorValues(cpu.Outputs["output"]), opTensorValues(gpu.Outputs["output"])
		if len(a) != len(b) {
			t.Fatalf("case %d: %d values on CPU, %d on CUDA", c.ID, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] && !(math.IsNaN(a[i]) && math.IsNaN(b[i])) {
				t.Fatalf("case %d (%s): value %d: CPU %v, CUDA %v", c.ID, c.Op, i, a[i], b[i])
			}
		}
	}
	t.Logf("%d cases: %d device asserts, %d host errors in CUDA mode", len(cases), device, host)
}
