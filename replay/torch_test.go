package replay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/internal/testenv"
)

// torchPython returns the Python with torch the tests use: $REDUCE_PYTHON,
// or the backend's own search (FindPython). Without one the test is
// skipped, or fails under REDUCE_REQUIRE_TORCH (testenv.Missing).
func torchPython(t testing.TB) string {
	t.Helper()
	want := os.Getenv("REDUCE_PYTHON")
	p, err := FindPython(want)
	if err == nil && want != "" {
		_, err = checkPython(p)
	}
	if err != nil {
		testenv.Missing(t, testenv.RequireTorch, fmt.Sprintf("no Python with torch (set REDUCE_PYTHON): %v", err))
	}
	return p
}

func entryDir(t testing.TB) string {
	d, err := filepath.Abs("testdata/entry")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func torchOptions(t testing.TB, tmp string) Options {
	return Options{Kind: KindTorch, Python: torchPython(t), TempRoot: tmp, Timeout: 60 * time.Second}
}

// replayBatch replays the view v of b on the torch backend be, whichever
// batch be is bound to: the zygote is be's, the source b's (a test seam,
// so that many batches share one zygote).
func replayBatch(t testing.TB, be Backend, b *fixtures.Batch, v *fixtures.View) Verdict {
	t.Helper()
	got, err := replayBatchErr(context.Background(), t, be, b, v)
	if err != nil {
		t.Fatalf("torch: Replay: %v", err)
	}
	return got
}

func replayBatchErr(ctx context.Context, t testing.TB, be Backend, b *fixtures.Batch, v *fixtures.View) (Verdict, error) {
	t.Helper()
	src, err := fixtures.NewSource("", b, "")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	return be.(*torchBackend).replay(ctx, src, v)
}

// withMeta is b with meta[key] = value.
func withMeta(b *fixtures.Batch, key, value string) *fixtures.Batch {
	nb := *b
	nb.Meta = map[string]string{}
	for k, v := range b.Meta {
		nb.Meta[k] = v
	}
	nb.Meta[key] = value
	return &nb
}

// The torch backend on CPU gives, for every example, the signature the go
// backend gives in CPU mode: same family, kernel, expression, class. An
// example recorded for a step of its own has no go replay: the torch
// backend alone must reproduce its recorded failure (torchStepExample).
func TestTorchMatchesGoOnExamples(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	o := torchOptions(t, tmp)
	o.Jobs = 2
	// One zygote for every example (replayBatch).
	shared := exampleBackend(t, o, "four_class_targets")
	for _, ex := range loadExamples(t) {
		t.Run(ex.name, func(t *testing.T) {
			if ex.batch.Op == "" {
				torchStepExample(t, ex)
				return
			}
			torch := func(v *fixtures.View) Verdict { return replayBatch(t, shared, ex.batch, v) }
			co, cu := goOptions(t, "cpu"), goOptions(t, "cuda")
			co.File, cu.File = ex.path, ex.path
			if m := ex.deviceMemory(t); m > 0 {
				// A failure of the batch size: replayed on an emulated
				// device of the recorded size (--device-memory).
				to := torchOptions(t, t.TempDir())
				to.DeviceMemory, to.File = m, ex.path
				tb := newBackend(t, to, ex.batch)
				torch = func(v *fixtures.View) Verdict { return replayOK(t, tb, v) }
				co.DeviceMemory, cu.DeviceMemory = m, m
			}
			gcpu, gcuda := newBackend(t, co, ex.batch), newBackend(t, cu, ex.batch)
			vt := torch(whole)
			vc := replayOK(t, gcpu, whole)
			vg := replayOK(t, gcuda, whole)
			if !vt.Zygote {
				t.Errorf("torch replay did not run in a zygote child")
			}
			st, sc := vt.Signature, vc.Signature
			if st.Family != sc.Family || st.Kernel != sc.Kernel || st.Expression != sc.Expression ||
				!st.Matches(sc, signature.MatchStrict) || !sc.Matches(st, signature.MatchStrict) {
				t.Errorf("torch cpu %v\n   go cpu %v\ntorch stderr:\n%s", st, sc, vt.Result.Stderr)
			}
			ct := kernelClass(t, st)
			cudaClass := kernelClass(t, vg.Signature)
			if ex.want.Mode == "size" && cudaClass == signature.ClassDeviceOOM {
				cudaClass = signature.ClassHostOOM // the emulated device runs out, not the host
			}
			if ex.batch.Op == "one_hot" && vg.Signature.Family == signature.FamilyDeviceAssert {
				// CUDA one_hot has no check of its own: scatter's device
				// assert, whose text is gather's (same file, kernel and
				// expression), so its class is gather.bounds.
				cudaClass = ct
			}
			if ct == "" || ct != kernelClass(t, sc) || ct != cudaClass {
				t.Errorf("classes: torch cpu %q, go cpu %q, go cuda %q (%v)", ct, kernelClass(t, sc), kernelClass(t, vg.Signature), vg.Signature)
			}
			if want := recordedSignature(ex.want.Error.Text); st.Expression != want.Expression {
				t.Errorf("torch cpu %v, recorded %v", st, want)
			}
			if ex.want.Mode == "size" {
				e := ex.want
				if v := torch(keep(first(e.LargestPassing))); v.Signature.Family != signature.FamilyPass {
					t.Errorf("torch, %d samples: %v\n%s", e.LargestPassing, v.Signature, v.Result.Stderr)
				}
				if v := torch(keep(first(e.SmallestFailing))); !v.Signature.Matches(st, signature.MatchStrict) {
					t.Errorf("torch, %d samples: %v, want %v\n%s", e.SmallestFailing, v.Signature, st, v.Result.Stderr)
				}
			}
			if ex.want.Culprits != nil {
				rest := keep(without(ex.batch.Samples, append(ex.otherSamples(), ex.want.Culprits...)))
				if v := torch(rest); v.Signature.Family != signature.FamilyPass || !bytes.Contains(v.Result.Stdout, []byte("reduce_batch: ok "+ex.batch.Op)) {
					t.Errorf("torch without the culprits: %v\nstdout %q\nstderr:\n%s", v.Signature, v.Result.Stdout, v.Result.Stderr)
				}
			}
			t.Logf("%-20s torch cpu: %v | go cpu: %v | go cuda: %v | class %s", ex.name, st, sc, vg.Signature, ct)
		})
	}
	if err := shared.Close(); err != nil {
		t.Error(err)
	}
	emptyDir(t, tmp)
}

// torchStepExample replays an example recorded for a step of its own
// (fixtures/examples/example_steps.py) on the torch backend, with the
// examples' folder on PYTHONPATH as their reductions have it: the batch
// fails as recorded; without its culprits it passes, and where every
// sample fails, one sample fails the same way.
func torchStepExample(t *testing.T, ex example) {
	t.Helper()
	dir, err := filepath.Abs("../fixtures/examples")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	o := torchOptions(t, tmp)
	o.Step = ex.batch.Step
	o.Env = []string{"PYTHONPATH=" + dir}
	// The examples are the project's own recordings (TestTorchStepTrust).
	o.Trusted = true
	o.File = ex.path
	if ex.want.Torch == "2" {
		out, err := exec.Command(testenv.Python(t, "torch"), "-c", "import torch; print(torch.__version__.split('.')[0])").Output()
		if err != nil {
			t.Fatal(err)
		}
		if major := strings.TrimSpace(string(out)); major != "2" {
			t.Skipf("fails only under torch 2, this is torch %s.x", major)
		}
	}
	tb := newBackend(t, o, ex.batch)
	want := recordedSignature(ex.want.Error.Text)
	v := replayOK(t, tb, whole)
	if !v.Zygote {
		t.Errorf("torch replay did not run in a zygote child")
	}
	if v.Signature.Family != want.Family || v.Signature.Expression != want.Expression || !v.Signature.Matches(want, signature.MatchStrict) {
		t.Errorf("torch cpu %v, recorded %v\nstderr:\n%s", v.Signature, want, v.Result.Stderr)
	}
	switch {
	case ex.want.Predates:
		// No sample is the cause: the batch fails against its state.
	case ex.want.Mode == "window":
		// The cause is in the window's earlier steps: the failing step's
		// batch alone, from the window's start, passes.
		none := make([][]int64, len(ex.batch.Window.Steps))
		for k := range none {
			none[k] = []int64{}
		}
		if r := replayOK(t, tb, &fixtures.View{Steps: none}); r.Signature.Family != signature.FamilyPass {
			t.Errorf("torch, the failing step's batch alone: %v, want a pass\n%s", r.Signature, r.Result.Stderr)
		}
	case ex.want.Culprits == nil:
		if one := replayOK(t, tb, keep(first(1))); !one.Signature.Matches(v.Signature, signature.MatchStrict) {
			t.Errorf("torch, one sample: %v, want %v\n%s", one.Signature, v.Signature, one.Result.Stderr)
		}
	default:
		rest := keep(without(ex.batch.Samples, ex.want.Culprits))
		if r := replayOK(t, tb, rest); r.Signature.Family != signature.FamilyPass ||
			!bytes.Contains(r.Result.Stdout, []byte("reduce_batch: ok "+ex.batch.Step.Entry())) {
			t.Errorf("torch without the culprits: %v\nstdout %q\nstderr:\n%s", r.Signature, r.Result.Stdout, r.Result.Stderr)
		}
	}
	if err := tb.Close(); err != nil {
		t.Error(err)
	}
	emptyDir(t, tmp)
	t.Logf("%-20s torch cpu: %v (step %s)", ex.name, v.Signature, ex.batch.Step.Entry())
}

// TestTorchStepTrust: the worker imports a recorded step only for a file
// that is the user's (Options.Trusted: reduce decided, internal/trust), and
// then from wherever its file lies; else New fails before any replay, with
// the zygote and without, whatever the step (one of this package's folder,
// where the worker runs, too). Never one of reduce's own functions.
func TestTorchStepTrust(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	outside := t.TempDir()
	marker := filepath.Join(outside, "ran")
	source := []byte("import torch.nn.functional as F\n\n\ndef step(batch):\n" +
		"    open(" + strconv.Quote(marker) + ", 'w').close()\n" +
		"    return F.cross_entropy(batch['input'], batch['target'])\n")
	step := filepath.Join(outside, "outstep.py")
	inTree, err := filepath.Abs("trust_step_test_mine.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{step, inTree} {
		if err := os.WriteFile(f, source, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(inTree) })
	b := exampleBatch(t, "four_class_targets")
	b.Op, b.Attrs = "", nil
	for _, c := range []struct {
		step    *fixtures.Step
		trusted bool
		want    string
	}{
		{&fixtures.Step{Module: "outstep", Qualname: "step", File: step, Cwd: outside}, false,
			"the recorded step outstep:step is not run: reduce did not find the file yours"},
		{&fixtures.Step{Module: "trust_step_test_mine", Qualname: "step", File: inTree}, false,
			"the recorded step trust_step_test_mine:step is not run: reduce did not find the file yours"},
		{&fixtures.Step{Module: "subprocess", Qualname: "call"}, false,
			"the recorded step subprocess:call is not run: reduce did not find the file yours"},
		{&fixtures.Step{Module: "reduce_batch", Qualname: "save"}, true,
			"the recorded step reduce_batch:save is not run: its module reduce_batch is reduce's own"},
	} {
		for _, noZygote := range []bool{false, true} {
			o := torchOptions(t, tmp)
			o.Step, o.NoZygote, o.Batch, o.Trusted = c.step, noZygote, b, c.trusted
			be, err := New(o)
			if err == nil {
				be.Close()
				t.Errorf("New with the step %s (no zygote: %v): no error", c.step.Entry(), noZygote)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, c.want) {
				t.Errorf("New with the step %s (no zygote: %v): %v", c.step.Entry(), noZygote, err)
			}
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("a step of a file that is not the user's ran")
	}
	o := torchOptions(t, tmp)
	o.Step = &fixtures.Step{Module: "outstep", Qualname: "step", File: step, Cwd: outside}
	o.Trusted = true
	v := replayOK(t, newBackend(t, o, b), whole)
	if v.Signature.Expression != "IndexError: Target N is out of bounds." {
		t.Errorf("the trusted step: %v\n%s", v.Signature, v.Result.Stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the trusted step did not run: %v", err)
	}
}

// --entry with a user step: a tiny model and cross_entropy on the batch.
func TestTorchEntry(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	o := torchOptions(t, tmp)
	o.Entry = "myproj.step:step"
	o.Env = []string{"PYTHONPATH=" + entryDir(t)}
	b := exampleBatch(t, "four_class_targets")
	b.Op, b.Attrs = "", nil // a batch recorded for the user's own step
	be := newBackend(t, o, b)
	v := replayOK(t, be, whole)
	if v.Signature.Family != signature.FamilyHostCheck || v.Signature.Kernel != "cross_entropy" ||
		v.Signature.Expression != "IndexError: Target N is out of bounds." || !bytes.Contains(v.Result.Stderr, []byte("myproj/step.py")) {
		t.Errorf("entry on the failing batch: %v\n%s", v.Signature, v.Result.Stderr)
	}
	pass := replayOK(t, be, keep([]int64{0, 1}))
	if pass.Signature.Family != signature.FamilyPass || !bytes.Contains(pass.Result.Stdout, []byte("ok myproj.step:step (cpu): float32[] first=")) {
		t.Errorf("entry on the passing subset: %v\nstdout %q\nstderr %s", pass.Signature, pass.Result.Stdout, pass.Result.Stderr)
	}
	// A .py path works as the module too; a bad entry is an error of New.
	o.Entry = filepath.Join(entryDir(t), "myproj", "step.py") + ":step"
	o.Env = nil
	be2 := newBackend(t, o, b)
	if v := replayOK(t, be2, whole); v.Signature.Kernel != "cross_entropy" {
		t.Errorf("entry by path: %v\n%s", v.Signature, v.Result.Stderr)
	}
	o.Entry = "myproj.step:no_such_function"
	o.Env = []string{"PYTHONPATH=" + entryDir(t)}
	o.Batch = b
	if bad, err := New(o); err == nil {
		bad.Close()
		t.Errorf("New with a missing entry function: no error")
	} else if !strings.Contains(err.Error(), "no_such_function") {
		t.Errorf("New with a missing entry function: %v", err)
	}
}

// One interpreter per candidate, through the Runner.
func TestTorchNoZygote(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	o := torchOptions(t, tmp)
	o.NoZygote = true
	o.Jobs = 2
	be := exampleBackend(t, o, "transposed_index")
	var wg sync.WaitGroup
	var v [2]Verdict
	var errs [2]error
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := whole
			if i == 1 {
				in = keep([]int64{0, 1, 2})
			}
			v[i], errs[i] = be.Replay(context.Background(), in)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if v[0].Zygote || v[0].Signature.Kernel != "embedding" || v[0].Signature.Expression != "IndexError: index out of range in self" {
		t.Errorf("no-zygote failing: %+v\n%s", v[0].Signature, v[0].Result.Stderr)
	}
	if v[1].Signature.Family != signature.FamilyPass {
		t.Errorf("no-zygote passing: %v\n%s", v[1].Signature, v[1].Result.Stderr)
	}
	be.Close()
	emptyDir(t, tmp)
}

// The zygote survives its children's crashes, restarts when it dies, kills
// a hanging child at the timeout, and leaves no process or file behind.
func TestZygoteFaults(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	o := torchOptions(t, tmp)
	o.Entry = filepath.Join(entryDir(t), "faults.py") + ":run"
	o.Jobs = 2
	o.Timeout = 5 * time.Second
	o.Grace = time.Second
	base := exampleBatch(t, "four_class_targets")
	be := newBackend(t, o, base)
	tb := be.(*torchBackend)
	fault := func(f string) Verdict {
		t.Helper()
		return replayBatch(t, be, withMeta(base, "fault", f), whole)
	}
	expect := func(f string, check func(v Verdict) bool) Verdict {
		t.Helper()
		v := fault(f)
		if !check(v) {
			t.Errorf("fault %s: %v (exit %d, signal %v, timed out %v)\nstderr:\n%s", f, v.Signature,
				v.Result.ExitCode, v.Result.Signal, v.Result.TimedOut, v.Result.Stderr)
		}
		return v
	}
	passes := func(v Verdict) bool { return v.Signature.Family == signature.FamilyPass && v.Zygote && !v.Retried }
	zpid := func() int {
		tb.zmu.Lock()
		defer tb.zmu.Unlock()
		if tb.z == nil {
			return 0
		}
		return tb.z.pid
	}
	first := zpid()

	expect("exception", func(v Verdict) bool {
		return v.Result.ExitCode == 1 && v.Signature.Family == signature.FamilyHostCheck &&
			v.Signature.Expression == "ValueError: candidate rejected: N samples"
	})
	expect("pass", passes)
	expect("segv", func(v Verdict) bool {
		return v.Result.Signal == syscall.SIGSEGV && v.Signature.Family == signature.FamilyCrashSignal &&
			bytes.Contains(v.Result.Stderr, []byte("Fatal Python error: Segmentation fault"))
	})
	expect("pass", passes)
	expect("abort", func(v Verdict) bool {
		return v.Result.Signal == syscall.SIGABRT && v.Signature.Family == signature.FamilyAbortSignal
	})
	expect("exit3", func(v Verdict) bool {
		return v.Result.ExitCode == 3 && v.Signature.Expression == "exit status 3"
	})
	gv := expect("grandchild", passes)
	var grandchild int
	fmt.Sscanf(string(bytes.TrimSpace(gv.Result.Stdout)), "grandchild %d", &grandchild)
	if grandchild == 0 || !waitGone(grandchild, 5*time.Second) {
		t.Errorf("grandchild %d of a finished replay still runs (stdout %q)", grandchild, gv.Result.Stdout)
	}
	expect("tmpfile", passes)
	start := time.Now()
	hv := expect("hang", func(v Verdict) bool {
		return v.Result.TimedOut && v.Signature.Family == signature.FamilyTimeout &&
			bytes.Contains(v.Result.Stderr, []byte("KeyboardInterrupt"))
	})
	if d := time.Since(start); d > 5*time.Second+3*time.Second {
		t.Errorf("hang took %v, timeout 5s, grace 1s", d)
	}
	if !processGone(hv.Result.PID) {
		t.Errorf("hanging child %d still runs", hv.Result.PID)
	}
	// Two at once, one per slot.
	var wg sync.WaitGroup
	for _, f := range []string{"exception", "pass"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := replayBatchErr(context.Background(), t, be, withMeta(base, "fault", f), whole)
			if err != nil || (f == "pass") != (v.Signature.Family == signature.FamilyPass) {
				t.Errorf("concurrent %s: %v %v", f, v.Signature, err)
			}
		}()
	}
	wg.Wait()
	if got := zpid(); got != first || tb.starts != 1 {
		t.Errorf("the zygote changed: pid %d then %d, %d starts", first, got, tb.starts)
	}

	// Killed from outside while idle: the next replay restarts it.
	syscall.Kill(first, syscall.SIGKILL)
	expect("exception", func(v Verdict) bool { return v.Signature.Family == signature.FamilyHostCheck })
	if got := zpid(); got == first || got == 0 || tb.starts != 2 {
		t.Errorf("after the zygote was killed: pid %d (was %d), %d starts", got, first, tb.starts)
	}
	// Killed by its candidate: retried once, then infra.
	expect("kill-zygote", func(v Verdict) bool {
		return v.Retried && v.Signature.Family == signature.FamilyInfra && v.Signature.Expression == "torch zygote died"
	})
	expect("pass", passes)
	// Starts: the first, the restart after the kill, the retry of
	// kill-zygote, the one after it.
	if tb.starts != 4 {
		t.Errorf("%d zygote starts, want 4", tb.starts)
	}

	pids := tb.pids()
	if err := be.Close(); err != nil {
		t.Error(err)
	}
	if left := leftover(append(pids, grandchild), 5*time.Second); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
	emptyDir(t, tmp)
	if _, err := be.Replay(context.Background(), whole); err != ErrClosed {
		t.Errorf("Replay after Close: %v", err)
	}
}

// A request the zygote refuses, a cancelled replay, the zygote's stderr.
func TestZygoteCancel(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	o := torchOptions(t, tmp)
	o.Entry = filepath.Join(entryDir(t), "faults.py") + ":run"
	be := newBackend(t, o, withMeta(exampleBatch(t, "four_class_targets"), "fault", "hang"))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(1500 * time.Millisecond); cancel() }()
	v, err := be.Replay(ctx, whole)
	if err == nil || !v.Result.Canceled || v.Signature.Family != signature.FamilyInfra {
		t.Errorf("cancelled hang: %v, %v", v.Signature, err)
	}
	pids := be.(*torchBackend).pids()
	be.Close()
	if left := leftover(pids, 5*time.Second); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
	emptyDir(t, tmp)
}

func TestTorchDeviceErrors(t *testing.T) {
	t.Parallel()
	o := torchOptions(t, t.TempDir())
	o.Device = "cuda"
	o.NoZygote = true
	if _, err := checkPython(o.Python); err != nil {
		t.Skip(err)
	}
	if info, _ := checkPython(o.Python); info.CUDAAvailable {
		t.Skip("this machine has a GPU: scripts/gpu-check.sh covers it")
	}
	o.Batch = exampleBatch(t, "four_class_targets")
	if b, err := New(o); err == nil {
		b.Close()
		t.Errorf("--device cuda without a GPU: no error")
	} else if !strings.Contains(err.Error(), "--device") {
		t.Errorf("--device cuda without a GPU: %v", err)
	}
}

func TestZygoteProtocolErrors(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	be := exampleBackend(t, torchOptions(t, tmp), "one_hot_labels")
	tb := be.(*torchBackend)
	tb.zmu.Lock()
	z := tb.z
	tb.zmu.Unlock()
	c := z.register("bad")
	if err := z.send(map[string]any{"id": "bad", "slot": 7, "path": "x", "stdout": "y", "stderr": "z"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
		if ev := c.exit; ev.Event != "error" || !strings.Contains(ev.Error, "slot 7") {
			t.Errorf("bad slot: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to a bad request")
	}
	// The zygote is still fine.
	v := replayOK(t, be, whole)
	if v.Signature.Expression != "RuntimeError: ND or ND target tensor expected, multi-target not supported" {
		t.Errorf("after a bad request: %v", v.Signature)
	}
}

// A zygote replay takes its slot from the backend's Pool, the one every
// replay takes its slot from, and runs in that slot's child: with slot 0
// held by someone else it runs in slot 1 (GPU "1"), and it waits while
// every slot is held.
func TestZygoteSlotsFromPool(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	o := torchOptions(t, tmp)
	o.Entry = filepath.Join(entryDir(t), "faults.py") + ":run"
	o.Jobs, o.GPUs = 2, []string{"0", "1"}
	be := newBackend(t, o, withMeta(exampleBatch(t, "four_class_targets"), "fault", "visible"))
	pool := be.(*torchBackend).pool
	visible := whole
	held, err := pool.take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1", "0"} {
		v := replayOK(t, be, visible)
		if !bytes.HasPrefix(v.Result.Stdout, []byte("visible "+want+"\n")) || !v.Zygote {
			t.Errorf("slot %d held: the replay printed %q, want \"visible %s\"\n%s", held, v.Result.Stdout, want, v.Result.Stderr)
		}
		// Hold the other slot instead.
		other, err := pool.take(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pool.put(held)
		held = other
	}
	// Both held: a replay waits for a slot, and gives up with its context.
	other, err := pool.take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	v, err := be.Replay(ctx, visible)
	if err == nil || !v.Result.Canceled || v.Result.Started || v.Signature.Family != signature.FamilyInfra {
		t.Errorf("every slot held: %v, started %v, %v", v.Signature, v.Result.Started, err)
	}
	pool.put(held)
	pool.put(other)
	if v := replayOK(t, be, visible); !bytes.HasPrefix(v.Result.Stdout, []byte("visible ")) {
		t.Errorf("slots free again: %q\n%s", v.Result.Stdout, v.Result.Stderr)
	}
	be.Close()
	emptyDir(t, tmp)
}

// waitGone polls until pid is gone or d has passed; it reports whether it
// is gone.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if processGone(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
