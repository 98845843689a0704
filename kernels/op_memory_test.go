package kernels

import (
	"bytes"
	"strings"
	"testing"
)

func TestOpMemoryPlans(t *testing.T) {
	tokens := MustNew(Int64, 8, 512)
	transposed := MustNew(Int64, 512, 8)
	transposed.Shape, transposed.Strides = []int64{8, 512}, []int64{1, 8}
	table := MustNew(Float32, 100, 16)
	logits := MustNew(Float32, 32, 10)
	labels := MustNew(Int64, 32)
	probs := MustNew(Float64, 6, 4)
	oneHot := opTensor(Int64, []int64{4}, 0, 3, 1, 2)
	cases := []struct {
		op      string
		tensors map[string]*Tensor
		attrs   map[string]any
		want    []Allocation
	}{
		{"embedding", map[string]*Tensor{"input": tokens, "weight": table}, nil,
			[]Allocation{{"output", 8 * 512 * 16 * 4}}},
		// A non-contiguous index is flattened into a copy first.
		{"embedding", map[string]*Tensor{"input": transposed, "weight": table}, nil,
			[]Allocation{{"indices.reshape(-1)", 8 * 512 * 8}, {"output", 8 * 512 * 16 * 4}}},
		{"cross_entropy", map[string]*Tensor{"input": logits, "target": labels}, nil,
			[]Allocation{{"log_softmax", 32 * 10 * 4}, {"output", 4}, {"total_weight", 4}}},
		{"cross_entropy", map[string]*Tensor{"input": logits, "target": labels}, map[string]any{"reduction": "none"},
			[]Allocation{{"log_softmax", 32 * 10 * 4}, {"output", 32 * 4}}},
		{"nll_loss", map[string]*Tensor{"input": logits, "target": labels}, nil,
			[]Allocation{{"output", 4}, {"total_weight", 4}}},
		{"binary_cross_entropy", map[string]*Tensor{"input": probs, "target": probs}, nil,
			[]Allocation{{"loss", 6 * 4 * 8}, {"output", 8}}},
		{"gather", map[string]*Tensor{"input": logits, "index": MustNew(Int64, 32, 3)}, map[string]any{"dim": 1},
			[]Allocation{{"output", 32 * 3 * 4}}},
		{"index_select", map[string]*Tensor{"input": logits, "index": MustNew(Int64, 5)}, map[string]any{"dim": 0},
			[]Allocation{{"output", 5 * 10 * 4}}},
		{"one_hot", map[string]*Tensor{"tensor": oneHot}, nil, []Allocation{{"output", 4 * 4 * 8}}},
		{"one_hot", map[string]*Tensor{"tensor": oneHot}, map[string]any{"num_classes": 10}, []Allocation{{"output", 4 * 10 * 8}}},
		// Checks torch makes before it allocates: no plan.
		{"one_hot", map[string]*Tensor{"tensor": oneHot}, map[string]any{"num_classes": 3}, nil},
		{"embedding", map[string]*Tensor{"input": tokens, "weight": MustNew(Float32, 100)}, nil, nil},
	}
	for _, c := range cases {
		op, err := Lookup(c.op)
		if err != nil {
			t.Fatal(err)
		}
		got, err := op.Memory(c.tensors, c.attrs)
		if err != nil {
			t.Fatalf("%s: %v", c.op, err)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s %v: plan %v, want %v", c.op, c.attrs, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s %v: plan %v, want %v", c.op, c.attrs, got, c.want)
				break
			}
		}
	}
	op, _ := Lookup("embedding")
	if _, err := op.Memory(map[string]*Tensor{"input": tokens}, nil); err == nil {
		t.Error("Memory without weight: no error")
	}
}

// With DeviceMemory, the run fails as torch 1.13 does out of memory, at
// the allocation that does not fit; below the limit it runs as without one.
func TestOpDeviceMemory(t *testing.T) {
	op, _ := Lookup("embedding")
	in := map[string]*Tensor{"input": MustNew(Int64, 48, 64), "weight": MustNew(Float32, 100, 4096)}
	const limit = 47<<20 + 512<<10 // 48 MiB of output do not fit
	res, err := op.RunOptions(Options{Mode: ModeCPU, DeviceMemory: limit}, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := res.Failure
	if f == nil || f.Device() || f.Line() != "RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. "+
		"DefaultCPUAllocator: can't allocate memory: you tried to allocate 50331648 bytes. Error code 12 (Cannot allocate memory)" {
		t.Fatalf("cpu: %+v", f)
	}
	var buf bytes.Buffer
	if err := WriteCPUFailure(&buf, f); err != nil || !strings.Contains(buf.String(), "in embedding\n") {
		t.Errorf("cpu traceback: %v\n%s", err, buf.String())
	}
	res, _ = op.RunOptions(Options{Mode: ModeCUDA, DeviceMemory: limit}, in, nil)
	want := "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 48.00 MiB (GPU 0; 47.50 MiB total capacity; " +
		"0 bytes already allocated; 47.50 MiB free; 0 bytes reserved in total by PyTorch) If reserved memory is >> allocated " +
		"memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
	if res.Failure == nil || res.Failure.Line() != want {
		t.Errorf("cuda: %+v\nwant %s", res.Failure, want)
	}
	// 47 MiB of output fit on CPU; the caching allocator rounds a large
	// request to 2 MiB, so on CUDA 46 MiB is the most that fits.
	in["input"] = MustNew(Int64, 47, 64)
	if res, _ := op.RunOptions(Options{Mode: ModeCPU, DeviceMemory: limit}, in, nil); res.Failure != nil {
		t.Errorf("cpu, 47 MiB: %v", res.Failure)
	}
	if res, _ := op.RunOptions(Options{Mode: ModeCUDA, DeviceMemory: limit}, in, nil); res.Failure == nil {
		t.Error("cuda, 47 MiB in a 48 MiB segment: no failure")
	}
	in["input"] = MustNew(Int64, 46, 64)
	if res, _ := op.RunOptions(Options{Mode: ModeCUDA, DeviceMemory: limit}, in, nil); res.Failure != nil {
		t.Errorf("cuda, 46 MiB: %v", res.Failure)
	}
}

// The allocations add up; a later one that does not fit is reported with
// what was allocated before it.
func TestOpDeviceMemoryCumulative(t *testing.T) {
	op, _ := Lookup("cross_entropy")
	in := map[string]*Tensor{"input": MustNew(Float32, 1024, 1024), "target": MustNew(Int64, 1024)}
	res, _ := op.RunOptions(Options{Mode: ModeCPU, DeviceMemory: 4<<20 + 8}, in, nil)
	if res.Failure != nil {
		t.Errorf("4 MiB of log_softmax and two scalars in 4 MiB + 8: %v", res.Failure)
	}
	res, _ = op.RunOptions(Options{Mode: ModeCPU, DeviceMemory: 4<<20 + 8}, in, map[string]any{"reduction": "none"})
	if res.Failure == nil || !strings.Contains(res.Failure.Message, "you tried to allocate 4096 bytes") {
		t.Errorf("the output after log_softmax: %+v", res.Failure)
	}
	// CUDA: a request of 1 to 10 MiB takes a 20 MiB segment.
	res, _ = op.RunOptions(Options{Mode: ModeCUDA, DeviceMemory: 5 << 20}, in, nil)
	if res.Failure == nil || !strings.Contains(res.Failure.Message, "Tried to allocate 20.00 MiB (GPU 0; 5.00 MiB total capacity; 0 bytes already") {
		t.Errorf("cuda, 4 MiB: %+v", res.Failure)
	}
	// A 16 MiB log_softmax takes 16 MiB; the scalars then need a 2 MiB
	// segment of the small pool.
	in["input"], in["target"] = MustNew(Float32, 4096, 1024), MustNew(Int64, 4096)
	res, _ = op.RunOptions(Options{Mode: ModeCUDA, DeviceMemory: 17 << 20}, in, nil)
	want := "Tried to allocate 2.00 MiB (GPU 0; 17.00 MiB total capacity; 16.00 MiB already allocated; 1024.00 KiB free; 16.00 MiB reserved in total by PyTorch)"
	if res.Failure == nil || !strings.Contains(res.Failure.Message, want) {
		t.Errorf("cuda: %+v\nwant %s", res.Failure, want)
	}
	if res, _ := op.RunOptions(Options{Mode: ModeCUDA, DeviceMemory: 18 << 20}, in, nil); res.Failure != nil {
		t.Errorf("cuda, 18 MiB: %v", res.Failure)
	}
}

// one_hot on CPU checks its values before it allocates (the value error
// wins); on CUDA scatter's device assert comes after the output (the OOM
// wins).
func TestOpDeviceMemoryChecksFirst(t *testing.T) {
	op, _ := Lookup("one_hot")
	in := map[string]*Tensor{"tensor": opTensor(Int64, []int64{3}, 0, -1, 2)}
	attrs := map[string]any{"num_classes": 4}
	res, _ := op.RunOptions(Options{Mode: ModeCPU, DeviceMemory: 8}, in, attrs)
	if res.Failure == nil || res.Failure.Message != "Class values must be non-negative." {
		t.Errorf("cpu: %+v", res.Failure)
	}
	res, _ = op.RunOptions(Options{Mode: ModeCUDA, DeviceMemory: 8}, in, attrs)
	if res.Failure == nil || res.Failure.Exception != "torch.cuda.OutOfMemoryError" {
		t.Errorf("cuda: %+v", res.Failure)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 bytes", 1024: "1024 bytes", 1025: "1.00 KiB", 1 << 20: "1024.00 KiB", 1<<20 + 1: "1.00 MiB",
		20 << 20: "20.00 MiB", 1 << 30: "1024.00 MiB", 15<<30 + 800<<20: "15.78 GiB",
	} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
