package reduction_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/kernels"
	"reduce/replay"
)

// step is a replayed training step written as a Go function, as
// x/tools/cmd/bisect's tests replace its runner: the candidate batch in,
// what its process would have printed and how it ended out.
type step func(b *fixtures.Batch) signature.Signature

// stepBackend replays candidates by calling a step in this process, on
// the view applied to the batch it is bound to (as replay.New binds a
// backend to its batch: run binds it). It counts the replays of each batch
// (by content) so that tests can check that no candidate is replayed
// twice.
type stepBackend struct {
	step     step
	settings replay.Settings
	batch    *fixtures.Batch

	mu      sync.Mutex
	replays map[string]int  // by batch content
	passed  map[string]bool // by batch content: its last replay passed
	total   int             // replays that gave an answer
	calls   int
	// cancel, when set, is called at the cancelAt-th replay.
	cancel   func()
	cancelAt int
	// stderr, when set, is what the candidate's process printed (its
	// verdict's Result.Stderr); step says the same in a signature.
	stderr func(b *fixtures.Batch) []byte
}

func newStep(s step) *stepBackend {
	return &stepBackend{step: s, settings: replay.Settings{Kind: replay.KindGo, Device: "cpu"}, replays: map[string]int{}, passed: map[string]bool{}}
}

func (s *stepBackend) Kind() replay.Kind         { return s.settings.Kind }
func (s *stepBackend) Settings() replay.Settings { return s.settings }
func (s *stepBackend) Close() error              { return nil }

func (s *stepBackend) Replay(ctx context.Context, v *fixtures.View) (replay.Verdict, error) {
	b, err := s.batch.Apply(v)
	if err != nil {
		return replay.Verdict{}, err
	}
	var buf bytes.Buffer
	if _, err := fixtures.EncodeAs(&buf, b, fixtures.FormatBin); err != nil {
		return replay.Verdict{}, err
	}
	key := fmt.Sprintf("%x", sha256.Sum256(buf.Bytes()))
	s.mu.Lock()
	s.calls++
	if s.cancel != nil && s.calls == s.cancelAt {
		// Interrupted: this replay says nothing.
		s.mu.Unlock()
		s.cancel()
		return replay.Verdict{Signature: signature.Signature{Family: signature.FamilyInfra, Expression: "canceled"}}, context.Canceled
	}
	s.total++
	s.replays[key]++
	s.mu.Unlock()
	sig := s.step(b)
	s.mu.Lock()
	s.passed[key] = sig.Family == signature.FamilyPass
	s.mu.Unlock()
	verdict := replay.Verdict{Signature: sig, Backend: s.settings.Kind, Device: "cpu"}
	if s.stderr != nil {
		verdict.Result.Stderr = s.stderr(b)
	}
	return verdict, nil
}

// kernelStep runs the batch's built-in op on the CPU, in this process, and
// reads what it raises as a replay's stderr would say it.
func kernelStep(b *fixtures.Batch) signature.Signature { return kernelRun(kernels.ModeCPU, b) }

// cudaStep is kernelStep under CUDA emulation: range checks are
// device-side asserts (and float16 losses run, as on a GPU).
func cudaStep(b *fixtures.Batch) signature.Signature { return kernelRun(kernels.ModeCUDA, b) }

func kernelRun(mode kernels.Mode, b *fixtures.Batch) signature.Signature {
	op, err := kernels.Lookup(b.Op)
	if err != nil {
		return signature.Signature{Family: signature.FamilyInfra, Expression: "harness failure"}
	}
	res, err := op.RunOptions(kernels.Options{Mode: mode}, b.Named(), b.Attrs)
	if err != nil {
		return signature.Signature{Family: signature.FamilyInfra, Expression: "harness failure"}
	}
	if res.Failure == nil {
		return signature.Signature{Family: signature.FamilyPass}
	}
	var text bytes.Buffer
	if res.Failure.Device() {
		err = kernels.WriteCUDAFailure(&text, res.Failure, kernels.TextOptions{LaunchBlocking: true})
	} else {
		err = kernels.WriteCPUFailure(&text, res.Failure)
	}
	if err != nil {
		panic(err)
	}
	return signature.Parse(text.Bytes(), signature.ExitInfo{Code: 1})
}

// raise is the signature of a step that raised "Class: message".
func raise(line string) signature.Signature {
	return signature.Recorded("Traceback (most recent call last):\n  File \"step.py\", line 1, in <module>\n" + line + "\n")
}

var pass = signature.Signature{Family: signature.FamilyPass}

// crossEntropy is a cross_entropy batch of n samples over 4 classes, with
// target t at the samples of bad (the others valid), recorded as failing
// with the error of the CPU kernels.
func crossEntropy(t *testing.T, n int, bad map[int]int64) (*fixtures.Batch, string) {
	t.Helper()
	input := kernels.MustNew(kernels.Float32, int64(n), 4)
	target := kernels.MustNew(kernels.Int64, int64(n))
	for i := int64(0); i < int64(n); i++ {
		for c := int64(0); c < 4; c++ {
			input.StoreFloat(i*4+c, float64((i*7+c*3)%11)/11)
		}
		target.StoreInt(i, i%4)
	}
	for i, v := range bad {
		target.StoreInt(int64(i), v)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%03d", i)
	}
	b := &fixtures.Batch{Samples: int64(n), Op: "cross_entropy", SampleIDs: ids,
		Tensors: []*fixtures.Entry{{Name: "input", BatchDim: fixtures.Dim(0), Tensor: input}, {Name: "target", BatchDim: fixtures.Dim(0), Tensor: target}}}
	if len(bad) == 0 {
		path := filepath.Join(t.TempDir(), "passes.bin")
		require.NoError(t, fixtures.Write(path, b))
		return b, path
	}
	return b, record(t, b, kernels.ModeCPU)
}

// record writes b with the failure the kernels give it in mode, and
// returns the file's path.
func record(t *testing.T, b *fixtures.Batch, mode kernels.Mode) string {
	t.Helper()
	op, err := kernels.Lookup(b.Op)
	require.NoError(t, err)
	res, err := op.RunOptions(kernels.Options{Mode: mode}, b.Named(), b.Attrs)
	require.NoError(t, err)
	require.NotNil(t, res.Failure, "the batch fails")
	var text bytes.Buffer
	if res.Failure.Device() {
		require.NoError(t, kernels.WriteCUDAFailure(&text, res.Failure, kernels.TextOptions{LaunchBlocking: true}))
	} else {
		require.NoError(t, kernels.WriteCPUFailure(&text, res.Failure))
	}
	b.Error = &fixtures.Failure{Text: text.String(), Exception: res.Failure.Exception}
	path := filepath.Join(t.TempDir(), "crash.bin")
	require.NoError(t, fixtures.Write(path, b))
	return path
}

func reduce(t *testing.T, b *fixtures.Batch, path string, be replay.Backend, o reduction.Options) (*reduction.Result, error) {
	t.Helper()
	o.Source = path
	if o.Out == "" {
		o.Out = t.TempDir()
	}
	return run(context.Background(), b, be, o)
}

// run is reduction.Run with be bound to b when it is a stepBackend.
func run(ctx context.Context, b *fixtures.Batch, be replay.Backend, o reduction.Options) (*reduction.Result, error) {
	if s, ok := be.(*stepBackend); ok {
		s.batch = b
	}
	return reduction.Run(ctx, b, be, o)
}

func TestSamplesMode(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{11: 4})
	be := newStep(kernelStep)
	var events []reduction.Event
	var mu sync.Mutex
	res, err := reduce(t, b, path, be, reduction.Options{Events: func(ev reduction.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeSamples, res.Mode)
	require.Len(t, res.Findings, 1)
	f := res.Findings[0]
	assert.Equal(t, []int{11}, f.Indices)
	assert.Equal(t, []string{"s011"}, f.IDs)
	require.Len(t, f.Elements, 1)
	e := f.Elements[0]
	assert.Equal(t, "target", e.Tensor)
	assert.Equal(t, []int64{11}, e.Index)
	assert.Equal(t, 4.0, e.Value)
	require.NotNil(t, e.Passing)
	assert.Equal(t, 3.0, *e.Passing)
	assert.Equal(t, "target[11] = 4 triggers the failure; 3 passes (valid range [0, 4))", e.Diagnosis())
	assert.Equal(t, signature.Signature{Family: pass.Family}, kernelStep(f.Boundary), "the boundary batch passes")
	assert.NotEqual(t, pass, kernelStep(f.Batch), "the minimal batch fails")
	// Every replay is counted once, by phase, and no batch is replayed
	// twice: a candidate asked again is answered by the journal.
	total := 0
	for _, pc := range res.Phases {
		total += pc.Replays
	}
	assert.Equal(t, res.Replays, total)
	assert.Equal(t, be.total, res.Replays)
	orig := contentKey(t, b)
	assert.Equal(t, 2, be.replays[orig], "the original: the two confirmations")
	for k, n := range be.replays {
		if n > 1 && k != orig {
			assert.Failf(t, "a batch replayed twice", "%s: %d times", k, n)
		}
	}
	// One culprit among 16: ⌈log2 16⌉ + 1 answers to find it, one to see
	// that no other culprit is left.
	assert.LessOrEqual(t, res.Phases[reduction.PhaseSamples].Replays, 6)
	// The fixture: written, and its record says what was found.
	require.Len(t, res.Fixtures, 1)
	assert.FileExists(t, filepath.Join(res.Fixtures[0], regress.RecordFile))
	assert.FileExists(t, filepath.Join(res.Fixtures[0], regress.BoundaryFile))
	assert.NoFileExists(t, filepath.Join(filepath.Dir(res.Fixtures[0]), ".reduce-"+sha(t, path)[:12]+".journal"), "a completed reduction removes its journal")
	// The events: start, phases, replays, confirm, culprit, logs.
	kinds := map[string]int{}
	for _, ev := range events {
		kinds[fmt.Sprintf("%T", ev)]++
	}
	for _, k := range []string{"*reduction.Start", "*reduction.PhaseStarted", "*reduction.Replayed", "*reduction.Confirmed", "*reduction.CulpritFound", "*reduction.Log"} {
		assert.Positive(t, kinds[k], k)
	}
	assert.Equal(t, res.Replays, kinds["*reduction.Replayed"])
}

func contentKey(t *testing.T, b *fixtures.Batch) string {
	var buf bytes.Buffer
	_, err := fixtures.EncodeAs(&buf, b, fixtures.FormatBin)
	require.NoError(t, err)
	return fmt.Sprintf("%x", sha256.Sum256(buf.Bytes()))
}

func sha(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

func TestTwoCulpritSets(t *testing.T) {
	b, path := crossEntropy(t, 32, map[int]int64{5: 4, 27: -7})
	// -7 raises "Target -7 is out of bounds." as 4 does: one failure, two
	// independent culprits.
	res, err := reduce(t, b, path, newStep(kernelStep), reduction.Options{})
	require.NoError(t, err)
	require.Len(t, res.Findings, 2)
	var sets [][]int
	for _, f := range res.Findings {
		sets = append(sets, f.Indices)
	}
	assert.ElementsMatch(t, [][]int{{5}, {27}}, sets)
	assert.Len(t, res.Fixtures, 2)
	assert.NotEqual(t, res.Fixtures[0], res.Fixtures[1])
}

// TestNeutralizeMode: the step fails as recorded only when the batch holds
// the bad target AND at least 8 samples (a kernel bug at some sizes):
// dropping samples finds 8 that fail together, but only one holds a
// triggering value, so the size is kept and the others are neutralized.
func TestNeutralizeMode(t *testing.T) {
	b, path := crossEntropy(t, 16, map[int]int64{9: 4})
	sized := func(c *fixtures.Batch) signature.Signature {
		if c.Samples < 8 {
			return pass
		}
		return kernelStep(c)
	}
	res, err := reduce(t, b, path, newStep(sized), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeNeutralize, res.Mode, res.ModeReason)
	assert.Contains(t, res.ModeReason, "the failure needs 8 samples but only 1 of them for their values")
	require.Len(t, res.Findings, 1)
	assert.Equal(t, []int{9}, res.Findings[0].Indices)
	assert.Equal(t, int64(16), res.Findings[0].Batch.Samples, "the size is kept")
	require.Len(t, res.Findings[0].Elements, 1)
	assert.Equal(t, []int64{9}, res.Findings[0].Elements[0].Index)

	// A model that cannot run one sample (BatchNorm): the bad target
	// needs a companion only to run at all, and the reason says so.
	tiny := func(c *fixtures.Batch) signature.Signature {
		if c.Samples < 2 {
			return raise("ValueError: Expected more than 1 value per channel when training, got input size torch.Size([1, 16])")
		}
		return kernelStep(c)
	}
	res, err = reduce(t, b, path, newStep(tiny), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeNeutralize, res.Mode, res.ModeReason)
	assert.Contains(t, res.ModeReason, "1 of the 2 samples hold the triggering values; a smaller batch fails otherwise (ValueError: Expected more than")
	require.Len(t, res.Findings, 1)
	assert.Equal(t, []int{9}, res.Findings[0].Indices)
}

// TestSizeMode: an out-of-memory failure that needs 12 samples, with a
// different failure at exactly 11: the answer must be a batch that fails
// as recorded (12), not the 11 next to the largest pass (10).
func TestSizeMode(t *testing.T) {
	b, _ := crossEntropy(t, 20, nil)
	oom := "RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 134217728 bytes. Error code 12 (Cannot allocate memory)"
	b.Error = &fixtures.Failure{Text: oom}
	path := filepath.Join(t.TempDir(), "oom.bin")
	require.NoError(t, fixtures.Write(path, b))
	step := func(c *fixtures.Batch) signature.Signature {
		switch {
		case c.Samples >= 12:
			return raise(oom)
		case c.Samples == 11:
			return raise("ValueError: 11 is an unlucky batch size")
		}
		return pass
	}
	res, err := reduce(t, b, path, newStep(step), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeSize, res.Mode)
	require.NotNil(t, res.Size)
	assert.Equal(t, int64(12), res.Size.SmallestFailing)
	assert.Equal(t, int64(10), res.Size.LargestPassing)
	assert.Contains(t, res.ModeReason, "sizes 11 to 11 fail otherwise")
	require.Len(t, res.OtherFailures, 1)
	assert.Equal(t, "ValueError: N is an unlucky batch size", res.OtherFailures[0].Signature.Expression)
	assert.Equal(t, int64(10), res.Findings[0].Boundary.Samples)
}

// TestContentFree: a failure no value triggers. With one sample needed it
// is reported as a shape or dtype; with several, the size is searched.
func TestContentFree(t *testing.T) {
	b, _ := crossEntropy(t, 8, nil)
	shapeErr := "RuntimeError: expected scalar type Long but found Int"
	b.Error = &fixtures.Failure{Text: shapeErr}
	path := filepath.Join(t.TempDir(), "shape.bin")
	require.NoError(t, fixtures.Write(path, b))
	res, err := reduce(t, b, path, newStep(func(*fixtures.Batch) signature.Signature { return raise(shapeErr) }), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeSamples, res.Mode)
	assert.Contains(t, res.ModeReason, "the cause is a shape or dtype")
	require.Len(t, res.Findings, 1)
	assert.True(t, res.Findings[0].ContentFree)
	assert.Len(t, res.Findings[0].Indices, 1)

	atLeast3 := func(c *fixtures.Batch) signature.Signature {
		if c.Samples >= 3 {
			return raise(shapeErr)
		}
		return pass
	}
	res, err = reduce(t, b, path, newStep(atLeast3), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, reduction.ModeSize, res.Mode)
	assert.Contains(t, res.ModeReason, "the failure needs 3 samples but none of their values")
	assert.Equal(t, &regress.SizeResult{LargestPassing: 2, SmallestFailing: 3}, res.Size)
}

// TestFloatBoundaries: a probability of 1.5 among valid ones, in each
// float dtype: the passing value is exactly 1, the largest value the dtype
// holds that passes. Bisecting float32 bit patterns for a float16 tensor
// would report 1.00048828125 (the largest float32 that rounds to 1 in
// float16), for bfloat16 1.00390625.
func TestFloatBoundaries(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.Float16, kernels.BFloat16, kernels.Float32, kernels.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			input := kernels.MustNew(dt, 6)
			target := kernels.MustNew(dt, 6)
			for i, v := range []float64{0.25, 0.5, 0.75, 1.5, 0.125, 0.375} {
				input.StoreFloat(int64(i), v)
				target.StoreFloat(int64(i), float64(i%2))
			}
			b := &fixtures.Batch{Samples: 6, Op: "binary_cross_entropy",
				Tensors: []*fixtures.Entry{{Name: "input", BatchDim: fixtures.Dim(0), Tensor: input}, {Name: "target", BatchDim: fixtures.Dim(0), Tensor: target}}}
			// torch 1.13 has no CPU binary_cross_entropy for the 16-bit
			// dtypes: the failure is CUDA's device assert.
			path := record(t, b, kernels.ModeCUDA)
			res, err := reduce(t, b, path, newStep(cudaStep), reduction.Options{})
			require.NoError(t, err)
			require.Len(t, res.Findings, 1)
			require.Len(t, res.Findings[0].Elements, 1)
			e := res.Findings[0].Elements[0]
			assert.Equal(t, []int64{3}, e.Index)
			assert.Equal(t, 1.5, e.Value)
			require.NotNil(t, e.Passing)
			assert.Equal(t, 1.0, *e.Passing, "exact to the dtype's last bit")
			assert.Equal(t, pass, cudaStep(res.Findings[0].Boundary))
		})
	}
}

func TestNoRepro(t *testing.T) {
	b, path := crossEntropy(t, 4, map[int]int64{2: 4})
	out := t.TempDir()
	_, err := reduce(t, b, path, newStep(func(*fixtures.Batch) signature.Signature { return pass }), reduction.Options{Out: out})
	require.ErrorIs(t, err, reduction.ErrNoRepro)
	left, _ := os.ReadDir(out)
	assert.Empty(t, left, "a failed confirmation leaves no journal to resume: its passes would answer a retry")
	assert.Contains(t, err.Error(), "does not reproduce: wanted host_check(cpu) cross_entropy: IndexError: Target N is out of bounds.")
	assert.Contains(t, err.Error(), "it passed")
	assert.NotContains(t, err.Error(), "replayed as its code is now", "an op's replay has no code of the user's")

	// A recorded step that passes now: the likeliest reason is a fix
	// made since the recording, which the message says first.
	fixed := newStep(func(*fixtures.Batch) signature.Signature { return pass })
	fixed.settings.Step = "train:train_step"
	_, err = reduce(t, b, path, fixed, reduction.Options{Out: t.TempDir()})
	require.ErrorIs(t, err, reduction.ErrNoRepro)
	assert.Contains(t, err.Error(), "(the step is replayed as its code is now: if it was fixed since the recording, there is nothing to reduce; else try --match family")

	other := func(*fixtures.Batch) signature.Signature { return raise("ValueError: something else") }
	_, err = reduce(t, b, path, newStep(other), reduction.Options{})
	require.ErrorIs(t, err, reduction.ErrNoRepro)
	assert.Contains(t, err.Error(), "got host_check(cpu) ValueError: something else")

	b.Error = nil
	require.NoError(t, fixtures.Write(path, b))
	_, err = reduce(t, b, path, newStep(func(*fixtures.Batch) signature.Signature { return pass }), reduction.Options{})
	require.ErrorIs(t, err, reduction.ErrNoRepro)
	assert.Contains(t, err.Error(), "records no failure and none of 2 replays failed")

	_, err = reduce(t, &fixtures.Batch{}, path, newStep(kernelStep), reduction.Options{})
	require.ErrorIs(t, err, reduction.ErrUsage)
}

// flakyStep fails like kernelStep on the trials the hash of (batch, its
// n-th replay) selects, and passes otherwise: flaky, yet the same for
// every run that replays the same candidates in the same trials.
func flakyStep() step {
	seen := map[string]int{}
	var mu sync.Mutex
	return func(b *fixtures.Batch) signature.Signature {
		var buf bytes.Buffer
		fixtures.EncodeAs(&buf, b, fixtures.FormatBin)
		sum := sha256.Sum256(buf.Bytes())
		mu.Lock()
		k := fmt.Sprintf("%x", sum)
		n := seen[k]
		seen[k]++
		mu.Unlock()
		h := sha256.Sum256(append(sum[:], byte(n)))
		if h[0] < 64 { // a quarter of the failing replays pass
			return pass
		}
		return kernelStep(b)
	}
}

// TestResume: a reduction interrupted in the middle, then resumed, replays
// no candidate trial answered before and ends with the result of an
// uninterrupted one; with trials and several jobs too, where the trial of
// each answer must map back to its trial.
func TestResume(t *testing.T) {
	for _, o := range []reduction.Options{{}, {Trials: 2, Jobs: 2}} {
		t.Run(fmt.Sprintf("trials%d-jobs%d", o.Trials, o.Jobs), func(t *testing.T) {
			b, path := crossEntropy(t, 64, map[int]int64{37: 4})
			want, err := reduce(t, b, path, newStep(kernelStep), o)
			require.NoError(t, err)

			out := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			first := newStep(kernelStep)
			first.cancel, first.cancelAt = cancel, 9
			o.Source, o.Out = path, out
			res, err := run(ctx, b, first, o)
			require.ErrorIs(t, err, reduction.ErrInterrupted)
			require.NotNil(t, res)
			assert.True(t, res.Partial)
			require.Len(t, res.Fixtures, 1)
			m, err := fixtures.ReadManifest(filepath.Join(res.Fixtures[0], regress.BatchFile))
			require.NoError(t, err)
			assert.Equal(t, "true", m.Batch.Meta["partial"])
			journaled := journalKeys(t, filepath.Join(out, ".reduce-"+sha(t, path)[:12]+".journal"))
			require.NotEmpty(t, journaled)

			o.Resume = true
			var mu sync.Mutex
			var replayed, resumed []string
			o.Events = func(ev reduction.Event) {
				if e, ok := ev.(*reduction.Replayed); ok {
					mu.Lock()
					if e.Resumed {
						resumed = append(resumed, e.Key)
					} else {
						replayed = append(replayed, e.Key)
					}
					mu.Unlock()
				}
			}
			got, err := run(context.Background(), b, newStep(kernelStep), o)
			require.NoError(t, err)
			for _, k := range replayed {
				assert.False(t, journaled[k], "%s was answered before, and replayed again", k)
			}
			for _, k := range resumed {
				assert.True(t, journaled[k], "%s resumed but never answered", k)
			}
			assert.Equal(t, len(resumed), got.Resumed)
			// The answers used are those of one run: replayed now, or
			// taken from the journal.
			assert.Equal(t, want.Replays, got.Replays+got.Resumed)
			if o.Jobs <= 1 {
				// Without speculation, every answer journaled is used.
				assert.Len(t, resumed, len(journaled))
			}
			assert.Equal(t, want.Findings[0].Indices, got.Findings[0].Indices)
			assert.Equal(t, want.Findings[0].Elements, got.Findings[0].Elements)
			assert.Equal(t, filepath.Base(want.Fixtures[0]), filepath.Base(got.Fixtures[0]), "the same fixture")
			assert.Contains(t, got.RemovedPartials, res.Fixtures[0], "the partial fixture is superseded")

			// Without a journal, --resume is refused.
			_, err = run(context.Background(), b, newStep(kernelStep), o)
			require.ErrorIs(t, err, reduction.ErrResume)
			assert.Contains(t, err.Error(), "no journal at")
		})
	}
}

// journalKeys are the key#trial of every answer in the journal at path.
func journalKeys(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	keys := map[string]bool{}
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if i == 0 {
			continue // the header
		}
		var e struct {
			Key   string `json:"key"`
			Trial int    `json:"trial"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &e))
		keys[fmt.Sprintf("%s#%d", e.Key, e.Trial)] = true
	}
	return keys
}

// TestResumeOtherSettings: a journal is refused when anything its answers
// depend on differs, and accepted when the settings are the same however
// they were given.
func TestResumeOtherSettings(t *testing.T) {
	b, path := crossEntropy(t, 32, map[int]int64{3: 4})
	out := t.TempDir()
	interrupt := func() {
		ctx, cancel := context.WithCancel(context.Background())
		be := newStep(kernelStep)
		be.cancel, be.cancelAt = cancel, 5
		_, err := run(ctx, b, be, reduction.Options{Source: path, Out: out})
		require.ErrorIs(t, err, reduction.ErrInterrupted)
	}
	interrupt()
	for name, edit := range map[string]func(*reduction.Options, *replay.Settings){
		"trials":  func(o *reduction.Options, _ *replay.Settings) { o.Trials = 3 },
		"match":   func(o *reduction.Options, _ *replay.Settings) { o.Match = signature.MatchFamily },
		"seed":    func(_ *reduction.Options, s *replay.Settings) { seed := int64(9); s.Seed = &seed },
		"timeout": func(_ *reduction.Options, s *replay.Settings) { s.Timeout = 1 },
		"device":  func(_ *reduction.Options, s *replay.Settings) { s.Device = "cuda" },
		"backend": func(_ *reduction.Options, s *replay.Settings) { s.Kind = replay.KindTorch },
		"python":  func(_ *reduction.Options, s *replay.Settings) { s.Python = "/opt/python3" },
		"entry":   func(_ *reduction.Options, s *replay.Settings) { s.Entry = "train:step" },
		"replay":  func(_ *reduction.Options, s *replay.Settings) { s.Replay = "python step.py {batch}" },
		"device memory": func(_ *reduction.Options, s *replay.Settings) {
			s.DeviceMemory = 1 << 30
		},
	} {
		be := newStep(kernelStep)
		o := reduction.Options{Source: path, Out: out, Resume: true}
		edit(&o, &be.settings)
		_, err := run(context.Background(), b, be, o)
		require.ErrorIs(t, err, reduction.ErrResume, name)
		assert.Contains(t, err.Error(), "written for another reduction", name)
		assert.Zero(t, be.total, "%s: nothing replayed", name)
	}
	// The defaults given explicitly are the same settings.
	be := newStep(kernelStep)
	_, err := run(context.Background(), b, be, reduction.Options{Source: path, Out: out, Resume: true,
		Trials: 1, Confirm: 2, Match: signature.MatchStrict, Jobs: 1})
	require.NoError(t, err)
}

// TestFlakyTrials: with trials, a flaky failure still reduces to its
// culprit, and each (candidate, trial) is replayed at most once.
func TestFlakyTrials(t *testing.T) {
	b, path := crossEntropy(t, 32, map[int]int64{21: 4})
	be := newStep(flakyStep())
	res, err := reduce(t, b, path, be, reduction.Options{Trials: 3, Confirm: 3})
	require.NoError(t, err)
	require.NotEmpty(t, res.Findings)
	assert.Equal(t, []int{21}, res.Findings[0].Indices)
	assert.Equal(t, be.total, res.Replays)
}

func TestOptionsErrors(t *testing.T) {
	b, path := crossEntropy(t, 4, map[int]int64{2: 4})
	for _, o := range []reduction.Options{{Trials: -1}, {Jobs: -2}, {Confirm: -1}} {
		_, err := reduce(t, b, path, newStep(kernelStep), o)
		assert.ErrorIs(t, err, reduction.ErrUsage)
	}
	_, err := run(context.Background(), b, newStep(kernelStep), reduction.Options{Source: path})
	assert.ErrorIs(t, err, reduction.ErrUsage, "no Out")
	_, err = run(context.Background(), b, newStep(kernelStep), reduction.Options{Source: filepath.Join(t.TempDir(), "none.bin"), Out: t.TempDir()})
	assert.ErrorIs(t, err, reduction.ErrUsage)
	assert.True(t, strings.Contains(err.Error(), "none.bin"))
	assert.False(t, errors.Is(err, reduction.ErrNoRepro))
}

// TestTrialsCountedOnce: with --trials 3 and a deterministic failure, each
// candidate's trials are the engine's: a passing candidate is replayed
// exactly 3 times, a failing one once in the search (its first trial
// decides) and once more if it is a culprit set being reconfirmed, however
// many searches and phases ask for it.
func TestTrialsCountedOnce(t *testing.T) {
	b, path := crossEntropy(t, 32, map[int]int64{6: 4, 20: 9})
	be := newStep(kernelStep)
	res, err := reduce(t, b, path, be, reduction.Options{Trials: 3, Confirm: 3})
	require.NoError(t, err)
	require.Len(t, res.Findings, 2)
	orig := contentKey(t, b)
	assert.Equal(t, 3, be.replays[orig], "the original: three confirmations")
	var passing, failing int
	for k, n := range be.replays {
		switch {
		case k == orig:
		case be.passed[k]:
			passing++
			assert.Equal(t, 3, n, "a passing candidate: its three trials")
		default:
			failing++
			assert.Contains(t, []int{1, 2}, n, "a failing candidate: its first trial, and its reconfirmation")
		}
	}
	assert.Positive(t, passing)
	assert.Positive(t, failing)
}

// bareAssert is what the recorder keeps of a CUDA device assert: the
// exception's text; the assert line went to the process's output.
const bareAssert = "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n    print(loss.item())\n" +
	"RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"

// recordText writes b with the recorded error text and returns its path.
func recordText(t *testing.T, b *fixtures.Batch, text string) string {
	t.Helper()
	b.Error = &fixtures.Failure{Text: text}
	path := filepath.Join(t.TempDir(), "crash.bin")
	require.NoError(t, fixtures.Write(path, b))
	return path
}

// TestConfirmRefinesBareAssert: a recording that names no assert is
// reduced against the first replay's assert, and the result, the log and
// the Confirmed event say so.
func TestConfirmRefinesBareAssert(t *testing.T) {
	b, _ := crossEntropy(t, 16, map[int]int64{11: 4})
	path := recordText(t, b, bareAssert)
	var mu sync.Mutex
	var logs []string
	var confirmed *reduction.Confirmed
	res, err := reduce(t, b, path, newStep(cudaStep), reduction.Options{Events: func(ev reduction.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *reduction.Log:
			logs = append(logs, e.Text)
		case *reduction.Confirmed:
			confirmed = e
		}
	}})
	require.NoError(t, err)
	require.NotNil(t, res.Recorded)
	assert.Equal(t, signature.FamilyDeviceAssert, res.Recorded.Family)
	assert.Empty(t, res.Recorded.Expression, "the recording names no assert")
	assert.Equal(t, "t >= 0 && t < n_classes", res.Want.Expression, "the replay's assert is kept")
	assert.Equal(t, signature.ClassNLLTargetBounds, res.Want.Class())
	assert.Contains(t, res.WantNote, `names no assert (only "device-side assert triggered")`)
	assert.Contains(t, res.WantNote, "the replay's assert is one it allows; the first replay's is kept: "+res.Want.String())
	require.NotNil(t, confirmed)
	assert.Equal(t, res.WantNote, confirmed.Note)
	assert.Equal(t, confirmed.Replays, confirmed.Reproduced)
	assert.Contains(t, logs, "confirm: "+res.WantNote)
	require.Len(t, res.Findings, 1)
	assert.Equal(t, []int{11}, res.Findings[0].Indices)
}

// TestConfirmFileOnlyRecording: a recording that names only a file is
// reproduced by the asserts that file raises and by nothing else.
func TestConfirmFileOnlyRecording(t *testing.T) {
	const thc = "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n" +
		"RuntimeError: cuda runtime error (59) : device-side assert triggered at /pytorch/aten/src/THCUNN/generic/ClassNLLCriterion.cu:59\n"
	b, _ := crossEntropy(t, 8, map[int]int64{3: 9})
	res, err := reduce(t, b, recordText(t, b, thc), newStep(cudaStep), reduction.Options{})
	require.NoError(t, err)
	assert.Equal(t, signature.ClassNLLTargetBounds, res.Want.Class())
	assert.Equal(t, []int{3}, res.Findings[0].Indices)

	// The same recording's file is index_select's: the nll assert of the
	// replays is another failure.
	const index = "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n" +
		"RuntimeError: cuda runtime error (59) : device-side assert triggered at /pytorch/aten/src/THC/generic/THCTensorIndex.cu:434\n"
	b, _ = crossEntropy(t, 8, map[int]int64{3: 9})
	_, err = reduce(t, b, recordText(t, b, index), newStep(cudaStep), reduction.Options{})
	require.ErrorIs(t, err, reduction.ErrNoRepro)
}

// TestConfirmUnknownKindStays: when the replays name no assert either, the
// failure kept names none, and the result says what it matches.
func TestConfirmUnknownKindStays(t *testing.T) {
	b, _ := crossEntropy(t, 8, map[int]int64{5: 7})
	path := recordText(t, b, bareAssert)
	step := func(c *fixtures.Batch) signature.Signature {
		if s := cudaStep(c); s.Family != signature.FamilyDeviceAssert {
			return s
		}
		return signature.Recorded(bareAssert)
	}
	res, err := reduce(t, b, path, newStep(step), reduction.Options{})
	require.NoError(t, err)
	assert.Empty(t, res.Want.Expression)
	assert.Contains(t, res.WantNote, "it reproduces only replays that name none either")
	assert.Equal(t, []int{5}, res.Findings[0].Indices)
}
