package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/kernels"
	"reduce/replay"
	"reduce/shrink"
)

func mainFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "batch", Aliases: []string{"b"}, Usage: "the recorded failing batch `FILE` (crash.bin)"},
		&cli.IntFlag{Name: "confirm", Value: 2, Usage: "replay the original `N` times before reducing"},
		&cli.IntFlag{Name: "trials", Value: 1, Usage: "replay every candidate `N` times; it fails if any trial fails (for flaky failures)"},
		&cli.StringFlag{Name: "match", Value: "strict", Usage: "what counts as the same failure: strict, family or any"},
		&cli.StringFlag{Name: "strategy", Value: "auto", Usage: "the search: auto (group testing) or ddmin"},
		&cli.StringFlag{Name: "out", Value: filepath.Join("fixtures", "regress"), Usage: "write the regression fixture under `DIR`"},
		&cli.BoolFlag{Name: "resume", Usage: "continue an interrupted reduction from its journal under --out: no candidate is replayed twice"},
		&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed of the replayed step's random generators (REDUCE_SEED; torch.manual_seed in the torch backend)"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON lines on stdout, one event per line, the last one the summary"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress on stderr"},
		maxSizeFlag(),
	}, backendFlags()...)
}

// maxFindings caps the culprit sets searched for: a batch where every
// sample fails alone would otherwise cost a search per sample.
const maxFindings = 8

// reduction is one run of the main job: the batch, the backend, the
// signature to keep, and what was observed along the way.
type reduction struct {
	c        *cli.Context
	path     string
	srcHash  string
	batch    *fixtures.Batch
	backend  replay.Backend
	level    signature.MatchLevel
	want     signature.Signature
	recorded *signature.Signature
	strategy shrink.Strategy
	jobs     int
	trials   int
	start    time.Time
	rep      *reporter
	journal  *journal

	mode       string
	modeReason string
	size       *regress.SizeResult

	mu      sync.Mutex
	replays int
	others  map[string]*regress.OtherFailure
	phase   string
	phases  map[string]int
	asked   map[string]int
	// resumedPhases counts, by phase, the answers taken from an earlier
	// run's journal.
	resumedPhases map[string]int
}

// finding is one culprit set, reduced.
type finding struct {
	indices  []int
	ids      []string
	batch    *fixtures.Batch // the minimal failing batch
	boundary *fixtures.Batch // the same with every triggering element at its passing value
	elements []foundElement
	// contentFree: with every element neutralized it still fails; the
	// cause is in the shapes, dtypes or the size, not in the values.
	contentFree bool
	partial     bool
}

func (r *reduction) shrinkOptions() shrink.Options {
	return shrink.Options{Strategy: r.strategy, Jobs: r.jobs, Trials: r.trials}
}

func (r *reduction) setPhase(p string, units int) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
	r.rep.setPhase(p, units)
}

// ask says whether the candidate that key names reproduces the failure
// kept: from the journal when it was answered before, else by replaying
// the batch build makes (built only then: building costs as much as the
// selected rows).
//
// The same candidate asked again (from another phase) is answered from
// this run's journal, except with --trials above 1, where each ask is a
// trial of its own: the n-th ask of a candidate is its trial n.
func (r *reduction) ask(ctx context.Context, base string, size int, build func() (*fixtures.Batch, error)) (shrink.Outcome, error) {
	trial := 0
	if r.trials > 1 {
		r.mu.Lock()
		trial = r.asked[base]
		r.asked[base]++
		r.mu.Unlock()
	}
	sig, src, _, err := r.answer(ctx, fmt.Sprintf("%s#%d", base, trial), size, build)
	if err != nil {
		return shrink.Unresolved, err
	}
	o := r.classify(sig)
	if o == shrink.Unresolved && src != fromCache {
		r.other(sig)
	}
	return o, nil
}

// Where an answer came from.
const (
	fromReplay  = iota // a replay now
	fromJournal        // an earlier run's, by --resume
	fromCache          // this run's, asked again from another phase
)

// answer gives the signature of the candidate that key names: the
// journal's when it has one, else that of a replay of the batch build
// makes, counted in its phase, journaled and reported. v is the replay's
// verdict (nil when the journal answered). A replay stopped by
// cancellation says nothing about the candidate: it is ctx's error.
func (r *reduction) answer(ctx context.Context, key string, size int, build func() (*fixtures.Batch, error)) (sig signature.Signature, src int, v *replay.Verdict, err error) {
	if e, ok, fromFile := r.journal.lookup(key); ok {
		if !fromFile {
			return e.Signature, fromCache, nil, nil
		}
		// Counted where this run's replays are, so that the summary and
		// the fixture tell the whole reduction.
		r.mu.Lock()
		r.resumedPhases[r.phase]++
		phase := r.phase
		r.mu.Unlock()
		r.rep.event(map[string]any{"event": "replay", "phase": phase, "key": key, "size": size,
			"outcome": r.classify(e.Signature), "signature": e.Signature, "resumed": true})
		return e.Signature, fromJournal, nil, nil
	}
	b, err := build()
	if err != nil {
		return sig, fromReplay, nil, err
	}
	verdict, err := r.backend.Replay(ctx, b)
	if ctx.Err() != nil {
		return sig, fromReplay, nil, ctx.Err()
	}
	if err != nil {
		return sig, fromReplay, nil, err
	}
	sig = verdict.Signature
	o := r.classify(sig)
	r.mu.Lock()
	r.replays++
	r.phases[r.phase]++
	phase := r.phase
	r.mu.Unlock()
	r.journal.record(key, o, sig)
	r.rep.replayed(size, o == shrink.Fail)
	ev := map[string]any{"event": "replay", "phase": phase, "key": key, "size": size, "outcome": o,
		"signature": sig, "seconds": verdict.Duration.Seconds()}
	launchEvent(ev, verdict)
	r.rep.event(ev)
	return sig, fromReplay, &verdict, nil
}

// classify turns a replay's signature into an outcome: the kept failure
// is Fail, no failure is Pass, and a different failure is Unresolved: it
// is counted, reported, and never followed.
func (r *reduction) classify(s signature.Signature) shrink.Outcome {
	switch {
	case reproduces(s, r.want, r.level):
		return shrink.Fail
	case s.Family == signature.FamilyPass:
		return shrink.Pass
	}
	return shrink.Unresolved
}

func (r *reduction) other(s signature.Signature) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := s.String()
	if r.others[key] == nil {
		r.others[key] = &regress.OtherFailure{Signature: s}
	}
	r.others[key].Count++
}

// mainJob is `reduce --batch FILE`.
func mainJob(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("unknown command %q (see reduce --help)", c.Args().First())
	}
	path := c.String("batch")
	if path == "" {
		_ = cli.ShowAppHelp(c)
		return usagef("no batch: give --batch FILE (see reduce --help)")
	}
	level, err := signature.ParseMatchLevel(c.String("match"))
	if err != nil {
		return usagef("--match: %v", err)
	}
	strategy := shrink.Auto
	switch c.String("strategy") {
	case "auto":
	case "ddmin":
		strategy = shrink.DDMin
	default:
		return usagef("--strategy %q: want auto or ddmin", c.String("strategy"))
	}
	if c.Int("confirm") < 1 {
		return usagef("--confirm %d: want at least 1", c.Int("confirm"))
	}
	if c.Int("trials") < 1 {
		return usagef("--trials %d: want at least 1", c.Int("trials"))
	}
	if c.Int("jobs") < 1 {
		return usagef("--jobs %d: want at least 1", c.Int("jobs"))
	}
	b, err := readBatch(c, path)
	if err != nil {
		return err
	}
	srcHash, err := hashFile(path)
	if err != nil {
		return usagef("read batch %s: %v", path, err)
	}
	if b.Samples == 0 {
		return usagef("%s: the batch has no samples to reduce", path)
	}
	if replay.Kind(c.String("backend")) == replay.KindGo {
		if b.Op == "" {
			return usagef("%s records no op (it was recorded for a step of its own): reduce it with --backend torch --entry MODULE:FUNCTION or --backend exec --replay CMD", path)
		}
		if _, err := kernels.Lookup(b.Op); err != nil {
			return usagef("%s: op %q is not built into the go backend (it has %s): reduce it with --backend torch or --backend exec",
				path, b.Op, strings.Join(kernels.OpNames(), ", "))
		}
	}
	be, err := newBackend(c, b)
	if err != nil {
		return err
	}
	defer be.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	r := &reduction{c: c, path: path, srcHash: srcHash, batch: b, backend: be, level: level,
		strategy: strategy, jobs: c.Int("jobs"), trials: c.Int("trials"), start: time.Now(),
		rep:    newReporter(c.App.Writer, c.App.ErrWriter, c.Bool("json"), c.Bool("quiet")),
		others: map[string]*regress.OtherFailure{}, phases: map[string]int{}, asked: map[string]int{}, resumedPhases: map[string]int{}}
	defer r.rep.close()
	if b.Error != nil {
		s := recordedSignature(b)
		r.recorded = &s
		r.want = s
	}
	jpath := journalPath(c.String("out"), r.srcHash)
	var replaced bool
	r.journal, replaced, err = openJournal(jpath, r.journalHeader(), c.Bool("resume"))
	if err != nil {
		return err
	}
	if replaced {
		r.rep.logf("started afresh over the journal of an earlier, unfinished reduction (%s); --resume would have continued it", jpath)
	}
	r.rep.event(map[string]any{"event": "start", "batch": path, "samples": b.Samples, "op": b.Op,
		"backend": be.Kind(), "match": string(level), "recorded": r.recorded, "resumed": c.Bool("resume")})

	if err := r.confirm(ctx); err != nil {
		r.journal.close(ctx.Err() == nil)
		return err
	}
	var found []finding
	if r.want.Family == signature.FamilyOOM {
		found, err = r.sizeMode(ctx, "the failure is out of memory, which depends on how many samples there are, not on which")
	} else {
		found, err = r.sampleMode(ctx)
	}
	interrupted := ctx.Err() != nil
	if err != nil && !interrupted {
		r.journal.close(false)
		return err
	}
	if len(found) == 0 {
		r.journal.close(!interrupted)
		if interrupted {
			return withCode(ExitInterrupted, fmt.Errorf("interrupted before any candidate failed; nothing to write (resume with --resume)"))
		}
		return fmt.Errorf("shrink samples: no failing subset found")
	}
	if interrupted {
		for i := range found {
			found[i].partial = true
		}
	}
	dirs, err := r.writeFixtures(found)
	r.journal.close(err == nil && !interrupted)
	if err != nil {
		return err
	}
	if !interrupted {
		for _, d := range r.removePartials(dirs) {
			r.rep.logf("removed %s: a partial fixture of an interrupted reduction of %s, superseded", d, r.path)
		}
	}
	r.rep.close() // the bar goes before the summary: they may share a terminal
	r.printSummary(found, dirs, interrupted)
	if interrupted {
		return withCode(ExitInterrupted, fmt.Errorf("interrupted: the best result so far is in %s, marked partial; continue with --resume", dirs[0]))
	}
	return nil
}

// answerFlags are the flags besides those of the header that can change
// what a replay answers.
var answerFlags = []string{"python", "replay-format", "device-memory", "seed", "async", "timeout", "trials", "gpus", "no-zygote", "launcher", "slurm-args"}

func (r *reduction) journalHeader() journalHeader {
	h := journalHeader{Source: r.srcHash, Backend: string(r.backend.Kind()), Device: r.c.String("device"),
		Match: string(r.level), Entry: r.c.String("entry"), Replay: r.c.String("replay"), Want: r.want}
	for _, f := range answerFlags {
		if r.c.IsSet(f) {
			if h.Settings == nil {
				h.Settings = map[string]string{}
			}
			h.Settings[f] = fmt.Sprint(r.c.Value(f))
		}
	}
	return h
}

// confirm replays the original: it must fail, the same way, in a fresh
// process. Without a recorded failure, the first failure seen is the one
// kept.
func (r *reduction) confirm(ctx context.Context) error {
	n := r.c.Int("confirm")
	r.setPhase("confirm", int(r.batch.Samples))
	fails := 0
	var seen []signature.Signature
	lastStderr := ""
	for i := 0; i < n; i++ {
		sig, _, v, err := r.answer(ctx, fmt.Sprintf("confirm:%d", i), int(r.batch.Samples),
			func() (*fixtures.Batch, error) { return r.batch, nil })
		if ctx.Err() != nil {
			return withCode(ExitInterrupted, fmt.Errorf("interrupted while confirming %s; nothing was written", r.path))
		}
		if err != nil {
			return fmt.Errorf("replay %s: %w", r.path, err)
		}
		if v != nil {
			lastStderr = lastLines(v.Result.Stderr, 3)
		}
		seen = append(seen, sig)
		if r.recorded == nil && signature.Failing(sig) && fails == 0 {
			r.want = sig
		}
		if signature.Failing(sig) && reproduces(sig, r.want, r.level) {
			fails++
		} else if signature.Failing(sig) && sig.Family != signature.FamilyInfra {
			r.other(sig)
		}
	}
	r.rep.logf("confirm: %d of %d replays reproduce %s", fails, n, r.want)
	if fails > 0 && fails < n && r.trials == 1 {
		r.rep.logf("confirm: the failure is flaky; --trials %d replays each candidate that often and counts it failing if any trial fails", 2*n/fails+1)
	}
	r.rep.event(map[string]any{"event": "confirm", "replays": n, "reproduced": fails, "signature": r.want})
	if fails == 0 {
		last := seen[len(seen)-1]
		what := "got " + last.String()
		switch {
		case last.Family == signature.FamilyPass:
			what = "it passed"
		case last.Family == signature.FamilyTimeout:
			what = "it timed out (try a longer --timeout)"
		case last.Family == signature.FamilyInfra:
			return fmt.Errorf("%s: the replay itself broke: %s", r.path, lastStderr)
		}
		if !allSame(seen) {
			var all []string
			for _, s := range seen {
				all = append(all, s.String())
			}
			what += " (the replays gave: " + strings.Join(all, "; ") + ")"
		}
		if r.recorded == nil {
			return withCode(ExitNoRepro, fmt.Errorf("%s records no failure and none of %d replays failed: %s (try --trials, another --backend or --device)",
				r.path, n, what))
		}
		return withCode(ExitNoRepro, fmt.Errorf("%s does not reproduce: wanted %s, %s (try --match family, --trials, another --backend or --device)",
			r.path, r.want, what))
	}
	return nil
}

// sampleMode finds the culprit sets by dropping samples, then reduces
// each. It switches to neutralizing (keeping the size) when the failure
// needs samples only for their number, and to the size search when it
// needs no values at all.
func (r *reduction) sampleMode(ctx context.Context) ([]finding, error) {
	r.mode, r.modeReason = "samples", "the failure depends on which samples are in the batch"
	n := int(r.batch.Samples)
	oracle := func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		units := cand.Units()
		if len(units) == 0 {
			// A batch without samples is not a candidate.
			return shrink.Unresolved, nil
		}
		key := fmt.Sprintf("samples:%s", cand)
		return r.ask(ctx, key, len(units), func() (*fixtures.Batch, error) { return r.batch.Select(units64(units)) })
	}
	opts := r.shrinkOptions()
	opts.StopAfterFirst = true
	opts.Seed = []shrink.CacheEntry{{Candidate: []shrink.Range{{Lo: 0, Hi: n}}, Outcome: shrink.Fail}}
	r.setPhase("samples", n)
	res, err := shrink.Run(ctx, n, oracle, opts)
	if ctx.Err() != nil || res.Incomplete {
		return r.partialSamples(res), nil
	}
	if err != nil {
		return nil, fmt.Errorf("shrink samples: %w", err)
	}
	if len(res.Culprits) == 0 {
		return nil, nil
	}
	if slices.Contains(res.Unconfirmed, 0) {
		r.rep.logf("samples: culprit set %v failed in the search but not in its fresh replays: the failure is flaky (a higher --trials helps)", res.Culprits[0])
	}
	first, err := r.reduceSet(ctx, res.Culprits[0])
	if err != nil || ctx.Err() != nil {
		return []finding{first}, err
	}
	switch {
	case first.contentFree && len(first.indices) == 1:
		r.modeReason = "every value neutralized, one sample still fails: the cause is a shape or dtype, which any sample has"
		return []finding{first}, nil
	case first.contentFree:
		return r.sizeMode(ctx, fmt.Sprintf("the failure needs %d samples but none of their values: it depends on the batch size", len(first.indices)))
	case len(first.elements) > 0 && len(first.indices) > 1 && len(rowsWithElements(first)) < len(first.indices):
		return r.neutralizeMode(ctx, first)
	}

	// Further, independent culprit sets: the cache answers the first
	// set's candidates again, so only new ones are replayed.
	opts.StopAfterFirst = false
	opts.MaxCulprits = maxFindings
	opts.Seed = res.Cache
	r.setPhase("samples", n)
	all, err := shrink.Run(ctx, n, oracle, opts)
	found := []finding{first}
	if ctx.Err() != nil || all.Incomplete {
		return found, nil
	}
	if err != nil {
		return found, fmt.Errorf("shrink samples: %w", err)
	}
	for k, set := range all.Culprits[1:] {
		if slices.Contains(all.Unconfirmed, k+1) {
			// Found, but its fresh replays did not fail: not a finding to
			// write a regression test for.
			r.rep.logf("samples: culprit set %v did not fail again in fresh replays; left out (flaky)", set)
			continue
		}
		f, err := r.reduceSet(ctx, set)
		found = append(found, f)
		if err != nil || ctx.Err() != nil {
			return found, err
		}
	}
	if len(all.Culprits) == maxFindings {
		r.rep.logf("samples: stopped after %d culprit sets; more may exist", maxFindings)
	}
	return found, nil
}

// partialSamples is the finding of an interrupted sample search: its
// smallest failing candidate, or the original.
func (r *reduction) partialSamples(res shrink.Result) []finding {
	set := res.Partial
	if set == nil {
		set = make([]int, r.batch.Samples)
		for i := range set {
			set[i] = i
		}
	}
	if len(res.Culprits) > 0 {
		set = res.Culprits[0]
	}
	sub, err := r.batch.Select(units64(set))
	if err != nil {
		return nil
	}
	return []finding{{indices: set, ids: r.idsOf(set), batch: sub, partial: true}}
}

func (r *reduction) idsOf(set []int) []string {
	if r.batch.SampleIDs == nil {
		return nil
	}
	ids := make([]string, len(set))
	for i, x := range set {
		ids[i] = r.batch.SampleIDs[x]
	}
	return ids
}

// reduceSet reduces the elements of one culprit set of samples.
func (r *reduction) reduceSet(ctx context.Context, set []int) (finding, error) {
	r.rep.logf("samples: culprit set %v %s", set, strings.Join(r.idsOf(set), " "))
	r.rep.event(map[string]any{"event": "culprit", "indices": set, "ids": r.idsOf(set)})
	sub, err := r.batch.Select(units64(set))
	if err != nil {
		return finding{}, err
	}
	f := finding{indices: set, ids: r.idsOf(set), batch: sub}
	es := elementSearch{sub: sub, orig: func(pos int64) int64 { return int64(set[pos]) },
		key: fmt.Sprintf("samples%v", set)}
	er, err := r.elements(ctx, es)
	f.elements, f.contentFree, f.partial = er.elements, er.contentFree, er.partial
	if er.reduced != nil {
		f.batch = er.reduced
	}
	f.boundary = er.boundary
	return f, err
}

func rowsWithElements(f finding) map[int64]bool {
	rows := map[int64]bool{}
	for _, e := range f.elements {
		rows[e.row] = true
	}
	return rows
}

// neutralizeMode keeps the batch size and replaces every sample not kept
// by a benign one from the batch: for a failure that needs some samples'
// values and a certain number of samples besides.
func (r *reduction) neutralizeMode(ctx context.Context, first finding) ([]finding, error) {
	n := int(r.batch.Samples)
	needed := rowsWithElements(first)
	// A benign sample: one whose copies fill the batch without failing.
	var candidates []int
	for pos, i := range first.indices {
		if !needed[int64(pos)] {
			candidates = append(candidates, i)
		}
	}
	in := map[int]bool{}
	for _, i := range first.indices {
		in[i] = true
	}
	for i := 0; i < n && len(candidates) < 4; i++ {
		if !in[i] {
			candidates = append(candidates, i)
		}
	}
	benign := -1
	r.setPhase("neutralize", n)
	for _, cand := range candidates[:min(len(candidates), 4)] {
		o, err := r.ask(ctx, fmt.Sprintf("benign:%d", cand), n, func() (*fixtures.Batch, error) {
			return r.batch.Select(repeat(int64(cand), n))
		})
		if err != nil {
			return []finding{first}, err
		}
		if o == shrink.Pass {
			benign = cand
			break
		}
	}
	if benign < 0 {
		r.modeReason = fmt.Sprintf("the failure needs %d samples although only %d hold triggering values, but no sample of the batch could fill it without failing, so they were dropped, not neutralized", len(first.indices), len(needed))
		return []finding{first}, nil
	}
	r.mode = "neutralize"
	r.modeReason = fmt.Sprintf("the failure needs %d samples but only %d of them for their values: the batch size matters, so samples were replaced by copies of sample %d (a batch of its copies passes) instead of dropped", len(first.indices), len(needed), benign)
	r.rep.logf("neutralize: %s", r.modeReason)
	build := func(keep []int) []int64 {
		idx := repeat(int64(benign), n)
		for _, u := range keep {
			idx[u] = int64(u)
		}
		return idx
	}
	oracle := func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		units := cand.Units()
		key := fmt.Sprintf("neutralize:%d:%s", benign, cand)
		return r.ask(ctx, key, len(units), func() (*fixtures.Batch, error) { return r.batch.Select(build(units)) })
	}
	opts := r.shrinkOptions()
	opts.MaxCulprits = maxFindings
	opts.Seed = []shrink.CacheEntry{{Candidate: []shrink.Range{{Lo: 0, Hi: n}}, Outcome: shrink.Fail}}
	res, err := shrink.Run(ctx, n, oracle, opts)
	if ctx.Err() != nil || res.Incomplete {
		set := res.Partial
		if len(res.Culprits) > 0 {
			set = res.Culprits[0]
		}
		if set == nil {
			return []finding{first}, nil
		}
		sub, err := r.batch.Select(build(set))
		if err != nil {
			return nil, err
		}
		return []finding{{indices: set, ids: r.idsOf(set), batch: sub, partial: true}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("neutralize samples: %w", err)
	}
	var found []finding
	for _, set := range res.Culprits {
		r.rep.logf("neutralize: culprit set %v %s", set, strings.Join(r.idsOf(set), " "))
		r.rep.event(map[string]any{"event": "culprit", "indices": set, "ids": r.idsOf(set)})
		sub, err := r.batch.Select(build(set))
		if err != nil {
			return found, err
		}
		f := finding{indices: set, ids: r.idsOf(set), batch: sub}
		rows := make([]int64, len(set))
		for i, u := range set {
			rows[i] = int64(u)
		}
		es := elementSearch{sub: sub, rows: rows, orig: func(pos int64) int64 { return pos },
			key: fmt.Sprintf("neutralize:%d:%v", benign, set)}
		er, err := r.elements(ctx, es)
		f.elements, f.contentFree, f.partial, f.boundary = er.elements, er.contentFree, er.partial, er.boundary
		if er.reduced != nil {
			f.batch = er.reduced
		}
		found = append(found, f)
		if err != nil || ctx.Err() != nil {
			return found, err
		}
	}
	return found, nil
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// sizeMode finds by bisection the largest batch size that passes, taking
// the first k samples for size k.
func (r *reduction) sizeMode(ctx context.Context, why string) ([]finding, error) {
	r.mode, r.modeReason = "size", why
	n := int64(r.batch.Samples)
	prefix := func(k int64) []int64 {
		idx := make([]int64, k)
		for i := range idx {
			idx[i] = int64(i)
		}
		return idx
	}
	// What the answers showed: the smallest size that failed as kept (the
	// original's n, confirmed) and the largest that passed.
	var mu sync.Mutex
	smallestFail, largestPass := n, int64(0)
	pred := func(ctx context.Context, k int64) (shrink.Outcome, error) {
		o, err := r.ask(ctx, fmt.Sprintf("size:%d", k), int(k), func() (*fixtures.Batch, error) { return r.batch.Select(prefix(k)) })
		if err == nil {
			mu.Lock()
			switch {
			case o == shrink.Fail && k < smallestFail:
				smallestFail = k
			case o == shrink.Pass && k > largestPass && k < smallestFail:
				largestPass = k
			}
			mu.Unlock()
		}
		return o, err
	}
	r.setPhase("size", int(n))
	if n > 1 {
		res, err := shrink.LargestPassing(ctx, 1, n-1, pred, r.shrinkOptions())
		mu.Lock()
		sf, lp := smallestFail, largestPass
		mu.Unlock()
		switch {
		case ctx.Err() != nil || res.Incomplete || errors.Is(err, shrink.ErrBudget):
			// The best so far: the smallest batch that failed as kept.
			sub, err := r.batch.Select(prefix(sf))
			if err != nil {
				return nil, err
			}
			r.size = &regress.SizeResult{LargestPassing: lp, SmallestFailing: sf}
			return []finding{{indices: toInts(prefix(sf)), ids: r.idsOf(toInts(prefix(sf))), batch: sub, partial: true, contentFree: true}}, nil
		case err != nil && !errors.Is(err, shrink.ErrNoPassing):
			return nil, fmt.Errorf("size search: %w", err)
		}
		if sf != lp+1 {
			// The size after the largest pass failed otherwise (a
			// different failure): the answer is the gap between them.
			r.modeReason += fmt.Sprintf("; sizes %d to %d fail otherwise, so the smallest batch failing as recorded has %d samples", lp+1, sf-1, sf)
		}
		smallestFail, largestPass = sf, lp
	}
	r.size = &regress.SizeResult{LargestPassing: largestPass, SmallestFailing: smallestFail}
	r.rep.logf("size: %d samples fail, %d pass", smallestFail, largestPass)
	set := toInts(prefix(smallestFail))
	sub, err := r.batch.Select(prefix(smallestFail))
	if err != nil {
		return nil, err
	}
	f := finding{indices: set, ids: r.idsOf(set), batch: sub, contentFree: true}
	if largestPass > 0 {
		if f.boundary, err = r.batch.Select(prefix(largestPass)); err != nil {
			return nil, err
		}
	}
	return []finding{f}, nil
}

func toInts(v []int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

func units64(u []int) []int64 {
	out := make([]int64, len(u))
	for i, x := range u {
		out[i] = int64(x)
	}
	return out
}

// printSummary prints the result: with --json the summary event, else
// lines for a person; the fixture path is the last line either way.
func (r *reduction) printSummary(found []finding, dirs []string, partial bool) {
	sum := r.summary(found, dirs, partial)
	if r.c.Bool("json") {
		r.rep.event(sum)
		return
	}
	w := r.c.App.Writer
	fmt.Fprintf(w, "signature: %s\n", r.want)
	fmt.Fprintf(w, "mode: %s (%s)\n", r.mode, r.modeReason)
	if r.size != nil {
		fmt.Fprintf(w, "size: %d samples fail, %d pass\n", r.size.SmallestFailing, r.size.LargestPassing)
	}
	for i, f := range found {
		if r.mode != "size" {
			fmt.Fprintf(w, "culprit: samples %v %s\n", f.indices, strings.Join(f.ids, " "))
		}
		for _, e := range f.elements {
			fmt.Fprintf(w, "  %s\n", e.diagnosis())
		}
		if f.contentFree && r.mode != "size" {
			fmt.Fprintf(w, "  no value triggers it: every element neutralized still fails\n")
		}
		if len(found) > 1 {
			fmt.Fprintf(w, "  fixture: %s\n", dirs[i])
		}
	}
	if len(sum.OtherFailures) > 0 {
		for _, o := range sum.OtherFailures {
			fmt.Fprintf(w, "other failure (not followed), %d times: %s\n", o.Count, o.Signature)
		}
	}
	if l := sum.Launcher; l.Launcher == replay.LauncherSlurm {
		fmt.Fprintf(w, "slurm: %d jobs on %s, %d retried, %d lost %v\n", l.Jobs, strings.Join(l.Nodes, ","), l.Retried, sumCounts(l.Unresolved), l.Unresolved)
	}
	resumed := ""
	if n := r.journal.Resumed(); n > 0 {
		resumed = fmt.Sprintf(", %d answers from the journal", n)
	}
	state := ""
	if partial {
		state = " (interrupted: partial)"
	}
	fmt.Fprintf(w, "replays: %d in %.1fs%s%s\n", r.replays, sum.Seconds, resumed, state)
	fmt.Fprintln(w, dirs[0])
}

// summary is the last JSON line of --json (DESIGN.md, "The CLI").
type summary struct {
	Event         string                 `json:"event"`
	Fixture       string                 `json:"fixture"`
	Fixtures      []string               `json:"fixtures"`
	Signature     signature.Signature    `json:"signature"`
	Mode          string                 `json:"mode"`
	ModeReason    string                 `json:"mode_reason"`
	Culprits      []regress.Culprit      `json:"culprits"`
	Size          *regress.SizeResult    `json:"size"`
	Replays       int                    `json:"replays"`
	Resumed       int                    `json:"resumed"`
	Phases        map[string]phaseCount  `json:"phases"`
	OtherFailures []regress.OtherFailure `json:"other_failures"`
	// Launcher is where the replays ran; for Slurm with the jobs
	// submitted, retried and lost.
	Launcher replay.LaunchInfo `json:"launcher"`
	Seconds  float64           `json:"seconds"`
	Partial  bool              `json:"partial"`
}

type phaseCount struct {
	Replays int `json:"replays"`
	// Resumed: answers of an earlier run, from the journal.
	Resumed int `json:"resumed,omitempty"`
}

func (r *reduction) summary(found []finding, dirs []string, partial bool) summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := summary{Event: "summary", Fixture: dirs[0], Fixtures: dirs, Signature: r.want, Mode: r.mode, ModeReason: r.modeReason,
		Culprits: []regress.Culprit{}, Size: r.size, Replays: r.replays, Resumed: r.journal.Resumed(),
		Phases: map[string]phaseCount{}, OtherFailures: r.otherFailures(), Seconds: time.Since(r.start).Seconds(), Partial: partial,
		Launcher: replay.Provenance(r.backend)}
	for p, n := range r.phases {
		s.Phases[p] = phaseCount{Replays: n}
	}
	for p, n := range r.resumedPhases {
		pc := s.Phases[p]
		pc.Resumed = n
		s.Phases[p] = pc
	}
	for i, f := range found {
		s.Culprits = append(s.Culprits, f.culprit(dirs[i]))
	}
	return s
}

// otherFailures lists the different failures met, in a stable order; mu
// is held.
func (r *reduction) otherFailures() []regress.OtherFailure {
	out := []regress.OtherFailure{}
	for _, o := range r.others {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Signature.String() < out[j].Signature.String() })
	return out
}

func (f finding) culprit(dir string) regress.Culprit {
	c := regress.Culprit{Indices: f.indices, IDs: f.ids, Elements: []regress.Element{}, Fixture: dir}
	if c.IDs == nil {
		c.IDs = []string{}
	}
	for _, e := range f.elements {
		c.Elements = append(c.Elements, e.Element)
	}
	return c
}

// lastLines returns the last n non-empty lines of out, joined by " | ".
func lastLines(out []byte, n int) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	if len(keep) == 0 {
		return "(no output)"
	}
	return strings.Join(keep, " | ")
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// hashFile is the hex SHA-256 of the file at path, read as a stream.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func allSame(s []signature.Signature) bool {
	for _, x := range s[1:] {
		if x != s[0] {
			return false
		}
	}
	return true
}
