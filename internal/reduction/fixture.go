package reduction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/internal/trust"
	"reduce/kernels"
	"reduce/replay"
)

// writeCollector writes what collects the fixtures under Out, unless the
// package is installed (Options.Plugin): the conftest.py and the package's
// zip it imports the plugin from. With the plugin, a conftest.py of
// reduce's of another version is still rewritten (it would collect the
// fixtures a second time), and one of this version kept.
func (r *run) writeCollector() error {
	if r.o.Plugin != nil && r.o.Plugin() {
		if old, err := regress.ReadCollector(r.o.Out); err != nil || old == nil || bytes.Equal(old, replay.CollectorModule) {
			return err
		}
	}
	if err := regress.WriteVendored(r.o.Out, replay.ZipName, replay.PackageZip()); err != nil {
		return err
	}
	if err := regress.WriteCollector(r.o.Out, replay.CollectorModule); err != nil {
		return err
	}
	regress.PruneVendored(r.o.Out, replay.ZipName)
	return nil
}

// writeFixtures writes one regression fixture per finding, and the
// collector at the root of Out, and returns the fixtures' directories, in
// the order of the findings.
func (r *run) writeFixtures(found []Finding) ([]string, error) {
	if err := r.writeCollector(); err != nil {
		return nil, collectorError(err)
	}
	culprits := make([]regress.Culprit, len(found))
	for i, f := range found {
		culprits[i] = f.Culprit("")
	}
	// Each fixture names every other's directory: the names first (a
	// fixture's directory is no part of another's identity, so naming one
	// changes no name).
	for i, f := range found {
		dir, err := regress.Dir(r.o.Out, r.regression(f, i, culprits))
		if err != nil {
			return nil, fmt.Errorf("write fixture under --out %s: %w", r.o.Out, err)
		}
		culprits[i].Fixture = dir
	}
	dirs := make([]string, len(found))
	for i, f := range found {
		dir, err := regress.Write(r.o.Out, r.regression(f, i, culprits))
		if errors.Is(err, regress.ErrExists) {
			// Another reduction's fixture under the same name: bad usage
			// of --out, never a fixture kept in silence.
			return nil, errorf(ErrUsage, "%v: give another --out, or remove that directory", err)
		}
		if errors.Is(err, regress.ErrLink) {
			return nil, errorf(ErrUsage, "%v", err)
		}
		if err != nil {
			return nil, fmt.Errorf("write fixture under --out %s: %w", r.o.Out, err)
		}
		dirs[i] = dir
		if r.o.Mine {
			if err := signFixture(dir); err != nil {
				r.logf("the fixture %s is not marked as yours (%v): its tests run what it names once you allow it, reduce trust %s",
					dir, err, fixtures.ShellQuote(dir))
			}
		} else if f, err := regress.ReadFixture(dir); err == nil {
			// Its batches carry what the batch names, which a fixture of
			// the user's would run: a batch from elsewhere makes none.
			if runs, err := f.Runs(); err == nil && len(runs) > 0 {
				r.logf("the fixture %s is not marked as yours, its batch being from elsewhere: its tests run %s once you allow it, reduce trust %s",
					dir, strings.Join(runs, "; "), fixtures.ShellQuote(dir))
			}
		}
	}
	return dirs, nil
}

// signFixture records the fixture in dir as the user's in their trust
// store (Options.Mine), so that its tests run the step it names.
func signFixture(dir string) error {
	store, err := trust.DefaultStore()
	if err != nil {
		return err
	}
	f, err := regress.ReadFixture(dir)
	if err != nil {
		return err
	}
	_, err = f.Sign(store, trust.KindFixture)
	return err
}

// failedHere makes sure that the minimal batch of every finding failed in
// a replay of this run before its fixture is written: a fixture is the
// failure shown, never an answer taken on trust (failsHere).
func (r *run) failedHere(ctx context.Context, found []Finding) error {
	for _, f := range found {
		if err := r.failsHere(ctx, f.Batch, "the minimal batch"); err != nil {
			return err
		}
	}
	return nil
}

// failsHere makes sure that b, built by run.build, failed in a replay of
// this run. Without --resume every answer is this run's, and nothing is
// replayed again. With it, a batch whose failing answer was read from the
// journal is replayed now, its trials until one reproduces, uncounted (the
// fixture counts the answers its reduction used, as an uninterrupted run
// does), once: one that does not reproduce means that the journal's
// answers do not hold (edited, or the step changed since), ErrResume, and
// nothing is written; an interrupted run, which cannot replay, writes
// nothing either, ErrInterrupted. what names b in messages.
func (r *run) failsHere(ctx context.Context, b *fixtures.Batch, what string) error {
	if !r.o.Resume {
		return nil
	}
	r.mu.Lock()
	key, c, done := r.built[b], r.cands[b], r.replayedAgain[r.built[b]]
	r.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%s was built by no candidate, so it cannot be replayed again", what)
	}
	trials := max(r.o.Trials, 1)
	for t := range trials {
		if sig, _, ok := r.journal.answerAt(key, t); ok && r.judge.Rule(sig).Outcome == signature.Reproduces {
			done = done || !r.journal.resumedAt(key, t)
			break
		}
	}
	if done {
		return nil
	}
	if ctx.Err() != nil {
		return errorf(ErrInterrupted, "interrupted before %s %s, whose failure the journal %s gave, was replayed in this run; nothing written: continue with --resume", what, key, r.journal.path)
	}
	var got []string
	for t := 0; t < trials && !done; t++ {
		v, err := r.be.Replay(ctx, c.view())
		if ctx.Err() != nil {
			return errorf(ErrInterrupted, "interrupted while replaying %s %s, whose failure the journal %s gave; nothing written: continue with --resume", what, key, r.journal.path)
		}
		if err != nil {
			return fmt.Errorf("replay %s: %w", r.o.Source, err)
		}
		if err := r.guard(&v); err != nil {
			return err
		}
		done = r.judge.Rule(v.Signature).Outcome == signature.Reproduces
		got = append(got, v.Signature.String())
	}
	if !done {
		return errorf(ErrResume, "--resume: journal %s: its answers do not hold: %s %s fails there, and replayed now it gave %s, not %s; nothing written: run without --resume (it starts afresh)",
			r.journal.path, what, key, strings.Join(got, "; "), r.judge.Want)
	}
	r.mu.Lock()
	if r.replayedAgain == nil {
		r.replayedAgain = map[string]bool{}
	}
	r.replayedAgain[key] = true
	r.mu.Unlock()
	r.logf("resume: %s %s, failing in the journal, fails in a replay of this run too", what, key)
	return nil
}

// removePartials removes, once a reduction has completed, the partial
// fixtures that interrupted reductions of the same file left under Out
// (kept: the fixtures just written): they are superseded, and committed
// they would be replayed as regressions. It returns the removed ones.
func (r *run) removePartials(keep []string) []string {
	entries, err := os.ReadDir(r.o.Out)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		dir := filepath.Join(r.o.Out, e.Name())
		if !e.IsDir() || slices.Contains(keep, dir) {
			continue
		}
		m, err := fixtures.ReadManifest(filepath.Join(dir, regress.BatchFile))
		if err != nil || m.Batch.Meta["partial"] != "true" || m.Batch.Meta["source_hash"] != "sha256:"+r.srcHash {
			continue
		}
		if os.RemoveAll(dir) == nil {
			removed = append(removed, dir)
		}
	}
	return removed
}

// regression is the fixture of finding k.
func (r *run) regression(f Finding, k int, culprits []regress.Culprit) *regress.Regression {
	min := *f.Batch
	min.Meta = maps.Clone(f.Batch.Meta)
	if min.Meta == nil {
		min.Meta = map[string]string{}
	}
	min.Meta["source_file"] = filepath.Base(r.o.Source)
	min.Meta["source_hash"] = "sha256:" + r.srcHash
	min.Meta["kept_samples"] = joinInts(f.Indices, ",")
	if len(f.IDs) > 0 {
		min.Meta["kept_ids"] = strings.Join(f.IDs, ",")
	}
	min.Meta["reduce_mode"] = string(r.mode)
	if r.o.NoCompile {
		// Reduced eager (--no-compile): the fixture's tests run it eager
		// too (reduce_collect._call_step).
		min.Meta[fixtures.ReplayCompileKey] = fixtures.ReplayCompileEager
	}
	if f.Partial {
		min.Meta["partial"] = "true"
	}
	// The record counts the whole reduction, earlier runs' replays that
	// --resume took from the journal included.
	r.mu.Lock()
	phases := map[string]int{}
	replays := 0
	for p, pc := range r.phases {
		phases[string(p)] = pc.Replays + pc.Resumed
		replays += pc.Replays + pc.Resumed
	}
	others := r.otherFailures()
	r.mu.Unlock()
	set := r.be.Settings()
	rec := regress.Record{
		Version: regress.RecordVersion, Op: r.batch.Op, Signature: r.judge.Want, Match: string(r.o.Match),
		Mode: string(r.mode), ModeReason: r.modeReason, Culprits: culprits, Finding: k, Size: r.size,
		Diagnosis: r.diagnosis(f) + alsoCulprits(culprits, k), Predates: r.history, Compiled: r.compiled, Window: f.Window, Replays: replays, Phases: phases, OtherFailures: others,
		Seconds: time.Since(r.start).Seconds(), Partial: f.Partial,
		Source:      regress.RecordSource{File: filepath.Base(r.o.Source), Hash: "sha256:" + r.srcHash, Samples: r.batch.Samples, Ranks: r.o.Ranks},
		Environment: r.environment(set), Attrs: r.batch.Attrs, Entry: set.Entry, Step: set.Step, Shape: f.Shape,
	}
	if r.batch.DatasetIndices() {
		rec.IDKind = fixtures.MetaDatasetIndex
	}
	if rs := (regress.ReplaySettings{DeviceMemory: set.DeviceMemory, Seed: set.Seed}); rs.DeviceMemory > 0 || rs.Seed != nil || r.o.Trials > 1 {
		if r.o.Trials > 1 {
			rs.Trials = r.o.Trials
		}
		rec.Replay = &rs
	}
	if (rec.Step != "" || rec.Entry != "") && set.Device == "cpu" && r.judge.Want.Exception != "" {
		// The step (recorded, or --entry) failed on the CPU in the replays:
		// the test expects the same class there (its message was normalized
		// into the signature).
		rec.CPU = &regress.CPUFailure{Exception: r.judge.Want.Exception}
	}
	if set.Kind == replay.KindExec {
		if args, err := replay.SplitCommand(set.Replay); err == nil {
			rec.ReplayArgs = args
			rec.ReplayFormat = string(set.ReplayFormat)
		}
	}
	rec.Recorded = r.recorded
	rec.Raised = r.raised
	reg := &regress.Regression{Batch: &min, Record: rec, Neighbours: map[string]*fixtures.Batch{}}
	// Every batch written besides the minimal one was replayed and passed;
	// for a built-in op the worker reported its outputs, which its test
	// checks. The minimal batch's failure on the CPU is the one its
	// replay reported (on another device, the worker runs it again on the
	// CPU).
	_, err := kernels.Lookup(r.batch.Op)
	builtin := err == nil && rec.Entry == ""
	// A passing batch carries no recorded failure: it says it must pass.
	passing := func(b *fixtures.Batch) *fixtures.Batch {
		out := *b
		out.Error = nil
		out.Meta = maps.Clone(b.Meta)
		if out.Meta == nil {
			out.Meta = map[string]string{}
		}
		out.Meta["source_file"], out.Meta["source_hash"] = min.Meta["source_file"], min.Meta["source_hash"]
		if r.o.NoCompile {
			out.Meta[fixtures.ReplayCompileKey] = fixtures.ReplayCompileEager
		}
		out.Meta[regress.MetaExpect] = regress.ExpectPass
		return &out
	}
	// A batch that passed on the device but fails on the CPU, where its
	// test runs it, is left out.
	expect := func(b *fixtures.Batch) ([]regress.OutputValue, bool) {
		if !builtin {
			return nil, true
		}
		rep := r.reportOf(b, signature.Passes)
		return outputValues(rep, b), rep == nil || rep.CPU == nil
	}
	if rep := r.reportOf(f.Batch, signature.Reproduces); builtin && rep != nil && rep.CPU != nil {
		reg.Record.CPU = &regress.CPUFailure{Exception: rep.CPU.Exception, Message: rep.CPU.Message}
	}
	if sig, _, ok := r.answerOf(f.Batch, signature.Reproduces); ok && !builtin && sig.Exception != rec.Signature.Exception {
		// A step replayed on a device raises there otherwise than the
		// recording said (a batch recorded on the CPU, its IndexError a
		// device-side assert on the GPU): the test runs it on that
		// device, and expects what the minimal batch's replay raised. So
		// does a step's minimal batch on the CPU that reproduced at a
		// looser --match with another class.
		reg.Record.Signature = sig
		if rec.CPU != nil && sig.Exception != "" {
			rec.CPU.Exception = sig.Exception
		}
	}
	if f.Boundary != nil {
		if outs, ok := expect(f.Boundary); ok {
			reg.Boundary = passing(f.Boundary)
			reg.Record.Boundary = &regress.BoundaryBatch{File: regress.BoundaryFile, Outputs: outs}
		}
	}
	without := "the original batch without the culprit samples"
	if f.Window != nil {
		without = "the failing step's batch replayed from the window's start without the earlier steps"
	}
	for _, n := range []struct {
		file, what string
		b          *fixtures.Batch
	}{
		{regress.OtherEndFile, "the minimal batch with each triggering element at the other end of its valid range", f.OtherEnd},
		{regress.WithoutFile, without, f.Without},
	} {
		if n.b == nil {
			continue
		}
		if outs, ok := expect(n.b); ok {
			reg.Neighbours[n.file] = passing(n.b)
			reg.Record.Neighbours = append(reg.Record.Neighbours, regress.Neighbour{File: n.file, What: n.what, Outputs: outs})
		}
	}
	return reg
}

// environment is where the replays ran.
func (r *run) environment(set replay.Settings) regress.RecordEnv {
	env := regress.RecordEnv{Backend: string(set.Kind), Device: set.Device, Launcher: string(replay.LauncherLocal),
		Reduce: replay.Version, GoOS: runtime.GOOS, GoArch: runtime.GOARCH}
	if env.Device == "" {
		env.Device = "cpu"
	}
	info := replay.Provenance(r.be)
	env.Launcher = string(info.Launcher)
	if info.Launcher != replay.LauncherSlurm {
		return env
	}
	env.Meta = map[string]string{}
	put := func(k, v string) {
		if v != "" {
			env.Meta["slurm."+k] = v
		}
	}
	put("version", info.Version)
	put("options", strings.Join(info.Options, " "))
	put("nodes", strings.Join(info.Nodes, ","))
	put("shared_dir", info.SharedDir)
	put("jobs", strconv.Itoa(info.Jobs))
	if info.Retried > 0 {
		put("retried", strconv.Itoa(info.Retried))
	}
	var lost []string
	for _, k := range slices.Sorted(maps.Keys(info.Unresolved)) {
		lost = append(lost, fmt.Sprintf("%s=%d", k, info.Unresolved[k]))
	}
	put("lost", strings.Join(lost, ","))
	return env
}

// collectorError is bad usage of --out for a conftest.py there that is not
// reduce's collector, or is a symbolic link, else err.
func collectorError(err error) error {
	if errors.Is(err, regress.ErrForeignCollector) {
		return errorf(ErrUsage, "--out: %v", err)
	}
	if errors.Is(err, regress.ErrLink) {
		return errorf(ErrUsage, "%v", err)
	}
	return fmt.Errorf("write the collector under --out: %w", err)
}

// Culprit is the finding as the record and the summary list it.
func (f Finding) Culprit(dir string) regress.Culprit {
	c := regress.Culprit{Indices: f.Indices, IDs: f.IDs, Wrapped: f.Wrapped, Elements: []regress.Element{}, Fixture: dir, Relation: f.Relation}
	if c.IDs == nil {
		c.IDs = []string{}
	}
	for _, e := range f.Elements {
		c.Elements = append(c.Elements, e.Element)
	}
	return c
}

// Diagnosis is the element's line for a person: "target[2] = 4 triggers
// the failure; 3 passes (valid range [0, 4))".
func (e Element) Diagnosis() string {
	s := fmt.Sprintf("%s%s = %s triggers the failure", regress.TensorLabel(e.Tensor), indexText(e.Index), valueText(e))
	if e.Passing != nil {
		s += fmt.Sprintf("; %s passes", fmtValue(*e.Passing, e.dtype))
	}
	if e.Rule != "" {
		s += " (" + e.Rule + ")"
	}
	return s
}

func valueText(e Element) string {
	if e.ValueText != "" {
		return e.ValueText // NaN, ±Inf, an int64 beyond 2^53
	}
	return fmtValue(e.Value, e.dtype)
}

// diagnosis is the finding's one line for a person.
func (r *run) diagnosis(f Finding) string {
	op := r.batch.Op
	if op == "" && r.batch.Step != nil {
		op = "the step " + r.batch.Step.Qualname
	}
	if op == "" {
		op = "the step"
	}
	noun := "sample"
	if len(f.Indices) > 1 {
		noun = "samples"
	}
	where := fmt.Sprintf("%s %s", noun, joinInts(f.Indices, ", "))
	longer, values := r.batch.LongerSamples(f.Indices), r.batch.SampleValues()
	if len(f.IDs) > 0 {
		where += " (" + strings.Join(f.IDs, ", ") + ")"
	}
	if f.Shape != nil && len(f.Indices) == 1 && longer == "" && r.batch.Samples > 1 {
		// Every sample has the shape: the one kept is any.
		where = "any sample (here sample " + strconv.Itoa(f.Indices[0])
		if len(f.IDs) > 0 {
			where += ", " + f.IDs[0]
		}
		where += ")"
	}
	switch {
	case f.Window != nil:
		them := "them"
		if len(f.Window.Steps) == 1 && len(f.Window.Steps[0].Rows) == 1 {
			them = "it"
		}
		return fmt.Sprintf("%s: %s: the cause is in an earlier step: %s; the failing step's batch is innocent: it passes from the window's start (step %d) without %s",
			op, failureWords(r.judge.Want.Family), f.Window.Words(), f.Window.Start, them)
	case r.history != "":
		verb := "fails"
		if len(f.Indices) > 1 {
			verb = "fail"
		}
		why := "which already holds values no healthy step leaves"
		if r.history == freshHistory {
			why = "and passes from the weights the step builds"
			if len(f.Indices) > 1 {
				why = "and pass from the weights the step builds"
			}
		}
		return fmt.Sprintf("%s: %s: the cause predates this batch: %s %s only against the recorded state, %s",
			op, failureWords(r.judge.Want.Family), where, verb, why)
	case f.Shape != nil:
		return fmt.Sprintf("%s: %s with %s: %s", op, failureWords(r.judge.Want.Family), where, f.Shape.Text)
	case f.Relation != nil && len(f.Elements) == 0:
		return fmt.Sprintf("%s: %s in %s: %s: equal per-sample values fail, either one changed to a value found nowhere in the batch passes",
			op, failureWords(r.judge.Want.Family), where, f.Relation.Text)
	case r.mode == ModeSize && r.size != nil && r.size.SmallestPassing > 0:
		one := "sample " + strconv.Itoa(f.Indices[0])
		if len(f.IDs) > 0 {
			one += ", " + f.IDs[0]
		}
		return fmt.Sprintf("%s: %s: the batch is too small: it %s (%s, and %s)", op, failureWords(r.judge.Want.Family), r.size.Text(), one, r.grownWith)
	case r.mode == ModeSize && r.size != nil:
		return fmt.Sprintf("%s: %s at batch size %d; %s pass", op, failureWords(r.judge.Want.Family), r.size.SmallestFailing, regress.Count(r.size.LargestPassing, "sample"))
	case f.ContentFree && longer != "":
		return fmt.Sprintf("%s: %s with %s: %s", op, failureWords(r.judge.Want.Family), where, longer)
	case f.ContentFree && len(values) > 0:
		relation := ""
		if len(f.Indices) > 1 {
			relation = ", a relation between them"
		}
		return fmt.Sprintf("%s: %s whatever the tensor values of %s: the cause is in their per-sample values (%s)%s",
			op, failureWords(r.judge.Want.Family), where, strings.Join(values, ", "), relation)
	case f.ContentFree:
		return fmt.Sprintf("%s: %s with %s of %s neutralized: the cause is a shape, dtype or size, not a value", op, failureWords(r.judge.Want.Family), r.neutralized(), where)
	case len(f.Elements) > 0:
		if len(f.Shared) > 0 && len(f.Shared) == len(f.Elements) && f.Relation == nil {
			// A rule of the whole batch: no sample is to blame.
			var pass []string
			for _, e := range f.Elements {
				if e.Passing != nil {
					pass = append(pass, fmt.Sprintf("%s%s = %s", regress.TensorLabel(e.Tensor), perSample(e), fmtValue(*e.Passing, e.dtype)))
				}
			}
			s := fmt.Sprintf("%s: %s: every sample of the batch holds %s, and each fails alone", op, failureWords(r.judge.Want.Family), strings.Join(f.Shared, " and "))
			if len(pass) > 0 {
				s += "; " + strings.Join(pass, " and ") + " passes"
			}
			return s
		}
		var parts []string
		if f.Relation != nil {
			parts = append(parts, fmt.Sprintf("%s = %s: equal values fail, either one changed to a value found nowhere in the batch passes",
				f.Relation.Text, valueText(f.Elements[0])))
		}
		for k, e := range f.Elements {
			if f.Relation != nil && k < len(f.Relation.Elements) {
				continue // the relation's, listed first
			}
			s := fmt.Sprintf("%s%s = %s", regress.TensorLabel(e.Tensor), indexText(e.Index), valueText(e))
			if e.Passing != nil {
				s += fmt.Sprintf(" fails where %s passes", fmtValue(*e.Passing, e.dtype))
			}
			if e.Rule != "" && !(e.ValueText != "" && strings.HasPrefix(e.Rule, e.ValueText+" fails")) {
				s += " (" + e.Rule + ")" // a NaN's rule says what the line says already
			}
			parts = append(parts, s)
		}
		if len(f.Shared) > 0 {
			parts = append(parts, fmt.Sprintf("every sample of the batch holds %s, and each fails alone", strings.Join(f.Shared, " and ")))
		}
		return fmt.Sprintf("%s: %s in %s: %s", op, failureWords(r.judge.Want.Family), where, strings.Join(parts, "; "))
	}
	return fmt.Sprintf("%s: %s needs %s", op, failureWords(r.judge.Want.Family), where)
}

// joinInts writes v's numbers separated by sep.
func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, sep)
}

// indexText writes an index as report.md's tables do: [9, 2].
func indexText(idx []int64) string {
	parts := make([]string, len(idx))
	for i, x := range idx {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// outputValues are a report's outputs as fixture.json records them
// (regress.OutputValueOf), with b's input dtypes for their tolerance.
func outputValues(rep *replay.Report, b *fixtures.Batch) []regress.OutputValue {
	if rep == nil {
		return nil
	}
	var inputs []kernels.DType
	for _, e := range b.Tensors {
		inputs = append(inputs, e.DType)
	}
	var out []regress.OutputValue
	for _, o := range rep.Outputs {
		dt, err := kernels.ParseDType(o.DType)
		if err != nil {
			continue
		}
		v := regress.OutputValueOf(o.Name, dt, o.Shape, o.Values, o.Sum, o.SumAbs, inputs)
		out = append(out, v)
	}
	return out
}

// failureWords is a failure family in a headline's words.
func failureWords(f signature.Family) string {
	switch f {
	case signature.FamilyHostCheck:
		return "an exception"
	case signature.FamilyNaNAnomaly:
		return "a non-finite result"
	case signature.FamilyOOM:
		return "out of memory"
	case signature.FamilyDeviceAssert:
		return "a device-side assert"
	case signature.FamilyIllegalAddress:
		return "an illegal memory access"
	case signature.FamilyLaunchFailure:
		return "a kernel launch failure"
	case signature.FamilyMisaligned:
		return "a misaligned address"
	case signature.FamilyROCmMemFault:
		return "a GPU memory access fault"
	case signature.FamilyCUBLASError:
		return "a cuBLAS error"
	case signature.FamilyCUDNNError:
		return "a cuDNN error"
	case signature.FamilyCUDAError:
		return "a CUDA error"
	case signature.FamilyDeviceMismatch:
		return "tensors on different devices"
	case signature.FamilyAbortSignal:
		return "an abort"
	case signature.FamilyCrashSignal:
		return "a crash"
	}
	return string(f)
}

// alsoCulprits is what a headline adds for the other culprit sets of the
// reduction, each in its own fixture: "; also sample 3 (img-196106), in
// its own fixture".
func alsoCulprits(culprits []regress.Culprit, k int) string {
	var sets []string
	for j, c := range culprits {
		if j == k {
			continue
		}
		s := "sample " + joinInts(c.Indices, ", ")
		if len(c.Indices) > 1 {
			s = "samples " + joinInts(c.Indices, ", ")
		}
		if len(c.IDs) > 0 {
			s += " (" + strings.Join(c.IDs, ", ") + ")"
		}
		sets = append(sets, s)
	}
	switch len(sets) {
	case 0:
		return ""
	case 1:
		return "; also " + sets[0] + ", in its own fixture"
	}
	return "; also " + strings.Join(sets, "; ") + ", each in its own fixture"
}
