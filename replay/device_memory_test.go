package replay

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/kernels"
)

// embeddingBatch is an embedding batch of n samples of length tokens each,
// over a table of 100×dim float32: the op allocates n·length·dim·4 bytes of
// output.
func embeddingBatch(n, length, dim int64) *fixtures.Batch {
	input := kernels.MustNew(kernels.Int64, n, length)
	for i := int64(0); i < n*length; i++ {
		binary.LittleEndian.PutUint64(input.Data[i*8:], uint64(i*7%100))
	}
	weight := kernels.MustNew(kernels.Float32, 100, dim)
	return &fixtures.Batch{
		Samples: n, Op: "embedding",
		Tensors: []*fixtures.Entry{
			{Name: "input", BatchDim: fixtures.Dim(0), Tensor: input},
			{Name: "weight", Tensor: weight},
		},
	}
}

// With --device-memory, an op whose output does not fit fails as torch does
// out of memory, with one strict signature whatever the sizes; the go
// worker and real torch agree on the largest batch that fits (1 MiB of
// output per sample, a limit of 47.5 MiB: 47 samples pass, 48 fail). The
// candidates are the first n samples of one batch.
func TestDeviceMemoryGoMatchesTorch(t *testing.T) {
	t.Parallel()
	const limit = 47<<20 + 512<<10
	batch := embeddingBatch(64, 64, 4096)
	cpuOpts := goOptions(t, "cpu")
	cpuOpts.DeviceMemory = limit
	cudaOpts := goOptions(t, "cuda")
	cudaOpts.DeviceMemory = limit
	gcpu, gcuda := newBackend(t, cpuOpts, batch), newBackend(t, cudaOpts, batch)
	tmp := t.TempDir()
	to := torchOptions(t, tmp)
	to.DeviceMemory = limit
	tb := newBackend(t, to, batch)
	to.NoZygote = true
	tn := newBackend(t, to, batch)

	var firstOOM signature.Signature
	for _, n := range []int64{1, 46, 47, 48, 49, 64} {
		b := keep(first(n))
		wantPass := n <= 47
		bes := []Backend{gcpu, tb}
		if n == 47 || n == 48 {
			bes = append(bes, tn) // an interpreter per replay: a second each
		}
		for _, be := range bes {
			v := replayOK(t, be, b)
			s := v.Signature
			switch {
			case wantPass && s.Family != signature.FamilyPass:
				t.Errorf("%s, %d samples: %v, want a pass\n%s", be.Kind(), n, s, v.Result.Stderr)
			case !wantPass && (s.Family != signature.FamilyOOM || s.Backend != signature.BackendCPU || s.Class() != signature.ClassHostOOM):
				t.Errorf("%s, %d samples: %v, want a host oom\n%s", be.Kind(), n, s, v.Result.Stderr)
			case !wantPass && firstOOM.Family == "":
				firstOOM = s
			case !wantPass && !s.Matches(firstOOM, signature.MatchStrict):
				t.Errorf("%s, %d samples: %v does not match %v strictly", be.Kind(), n, s, firstOOM)
			}
		}
		// CUDA emulation: the caching allocator rounds a large request to
		// 2 MiB, so 47 MiB of output takes a 48 MiB segment.
		v := replayOK(t, gcuda, b)
		if wantCUDA := n <= 46; wantCUDA != (v.Signature.Family == signature.FamilyPass) ||
			!wantCUDA && (v.Signature.Family != signature.FamilyOOM || v.Signature.Backend != signature.BackendCUDA) {
			t.Errorf("go cuda, %d samples: %v\n%s", n, v.Signature, v.Result.Stderr)
		}
	}
	for _, be := range []Backend{tb, tn} {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	}
	emptyDir(t, tmp)
}

// Without a limit the same batch passes; a negative limit is an error of
// New, and so is a limit for exec (the user's command sees no flag).
func TestDeviceMemoryOptions(t *testing.T) {
	t.Parallel()
	if v := replayOK(t, newBackend(t, goOptions(t, "cpu"), embeddingBatch(48, 64, 4096)), whole); v.Signature.Family != signature.FamilyPass {
		t.Errorf("no limit: %v\n%s", v.Signature, v.Result.Stderr)
	}
	o := goOptions(t, "cpu")
	o.DeviceMemory, o.Batch = -1, embeddingBatch(1, 64, 4096)
	if _, err := New(o); err == nil {
		t.Error("New with DeviceMemory -1: no error")
	}
	if _, err := New(Options{Batch: o.Batch, Kind: KindExec, Replay: "true {batch}", DeviceMemory: 1 << 20}); err == nil {
		t.Error("New exec with DeviceMemory: no error")
	}
}

// The go worker's emulated OOMs parse as the real texts do: CUDA mode as
// torch 1.13's caching allocator message (corpus oom_old_cuda_class), CPU
// mode as DefaultCPUAllocator's (cpu_alloc_oom), strictly.
func TestDeviceMemoryTextsMatchCorpus(t *testing.T) {
	t.Parallel()
	for device, name := range map[string]string{"cuda": "oom_old_cuda_class", "cpu": "cpu_alloc_oom"} {
		o := goOptions(t, device)
		o.DeviceMemory = 1 << 20
		v := replayOK(t, newBackend(t, o, embeddingBatch(4, 64, 4096)), whole)
		want := corpusSignature(t, name)
		if !v.Signature.Matches(want, signature.MatchStrict) || !want.Matches(v.Signature, signature.MatchStrict) || v.Signature.Exception != want.Exception {
			t.Errorf("go %s: %v, want %v (%s)\n%s", device, v.Signature, want, name, v.Result.Stderr)
		}
	}
}

// corpusSignature is the signature of a file of the signature package's
// corpus of real outputs (its stderr section, read with its exit section).
func corpusSignature(t testing.TB, name string) signature.Signature {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "internal", "signature", "testdata", "stderr", name+".txt"))
	require.NoError(t, err)
	head, stderr, ok := bytes.Cut(data, []byte("-- stderr --\n"))
	require.True(t, ok, "%s: no stderr section", name)
	_, exit, ok := strings.Cut(string(head), "-- exit --\n")
	require.True(t, ok, "%s: no exit section", name)
	exit, _, _ = strings.Cut(exit, "\n-- ")
	var info signature.ExitInfo
	require.NoError(t, json.Unmarshal([]byte(exit), &info), "%s: exit", name)
	return signature.Parse(stderr, info)
}
