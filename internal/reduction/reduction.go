package reduction

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/internal/trust"
	"reduce/kernels"
	"reduce/replay"
	"reduce/shrink"
)

// Options configure Run. The zero value of each field is its documented
// default, except Out and Source, which Run needs.
type Options struct {
	// Source is the recorded batch's file: its name goes into the record
	// and the fixtures' provenance, its content hash names the journal.
	Source string
	// Out is the directory the fixtures and the journal are written under
	// (--out).
	Out string
	// Plugin, asked once the fixtures are written, says that reduce's
	// Python package, whose pytest plugin collects them, is installed
	// where they will run (replay.PluginInstalled): no Python is written
	// into Out. Without it (or nil), Out gets the collector, a small
	// conftest.py that imports the plugin from the package's zip under
	// Out/.reduce.
	Plugin func() bool
	// Mine says the recorded batch is the user's (internal/trust's Check):
	// the fixtures written from it are recorded as theirs in the trust
	// store, so that their tests run the step they name. A fixture of a
	// batch from elsewhere is not: its tests run what it names once the
	// user allows it (`reduce trust DIR`).
	Mine bool
	// Confirm is how many times the original is replayed before the
	// reduction (default 2).
	Confirm int
	// Trials is how many times each candidate is replayed; it fails if any
	// trial fails (default 1).
	Trials int
	// NoCompile says the backend replays a step compiled with torch.compile
	// eager (replay.Options.NoCompile): no eager probe then (compileProbe).
	NoCompile bool
	// Match says what counts as the same failure (default strict).
	Match signature.MatchLevel
	// Strategy is the sample search (default shrink.Auto).
	Strategy shrink.Strategy
	// Jobs is how many replays run at once (default 1): a search asks its
	// next questions ahead, on both answers of the one it waits for
	// (shrink's speculation), and the reduction its likely next questions
	// (the batch without the culprits, a range's other end, every trial
	// of the confirmation): with N slots about log_(N+1) n rounds for one
	// culprit among n, where the answers not used are Result.Ahead.
	Jobs int
	// Resume takes the answers of an interrupted reduction of the same
	// file from its journal under Out.
	Resume bool
	// MaxFindings caps the culprit sets searched for (default 8): a batch
	// where every sample fails alone would cost a search per sample.
	MaxFindings int
	// Ranks is set when Source is one rank's file of a torch.distributed
	// run: which rank, and the other ranks' files, which the report lists.
	Ranks *regress.Ranks
	// Events receives progress (see Event). It may be called from several
	// goroutines at once; nil discards.
	Events func(Event)
}

func (o Options) withDefaults() Options {
	if o.Confirm == 0 {
		o.Confirm = 2
	}
	if o.Trials == 0 {
		o.Trials = 1
	}
	if o.Match == "" {
		o.Match = signature.MatchStrict
	}
	if o.Jobs == 0 {
		o.Jobs = 1
	}
	if o.MaxFindings == 0 {
		o.MaxFindings = 8
	}
	return o
}

// Errors of Run. Run's errors match them with errors.Is and carry their
// own text; cmd/reduce maps them to its exit codes.
var (
	// ErrNoRepro: the original does not fail as recorded (or, with no
	// recorded failure, does not fail at all).
	ErrNoRepro = errors.New("does not reproduce")
	// ErrInterrupted: ctx was canceled. When the Result has fixtures, the
	// best result so far was written, marked partial.
	ErrInterrupted = errors.New("interrupted")
	// ErrResume: --resume cannot continue: no journal, one written for
	// another reduction, or one whose answers do not hold (a failure it
	// gives does not reproduce when replayed, failsHere).
	ErrResume = errors.New("--resume")
	// ErrUsage: bad input (a batch without samples, bad options).
	ErrUsage = errors.New("bad input")
)

// kindError is an error of one of the kinds above, with its own text.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Result is what a reduction found and wrote.
type Result struct {
	// IDKind says what the findings' IDs are (regress.Record.IDKind).
	IDKind string
	// Want is the failure kept; Recorded the recorded one's signature, nil
	// when the batch recorded none.
	Want     signature.Signature
	Recorded *signature.Signature
	// Message is the failure kept as the process printed it (the
	// recording's line, or the first reproducing replay's), "" when no
	// line states it.
	Message string
	// WantNote says why Want differs from Recorded (the recording named no
	// assert and the first replay's was kept), or what a Want that names
	// no assert matches; "" when there is nothing to say.
	WantNote string
	// Predates says why the cause lies before the recorded batch (the
	// recorded state already holds non-finite or huge values): the
	// finding is then a witness that fails against that state, not a
	// culprit. "" otherwise.
	Predates string
	// Compiled says whether a step compiled with torch.compile needs the
	// compile to fail (compileProbe); nil for a step recorded eager.
	Compiled *regress.Compiled
	// Ranks is Options.Ranks: the rank of a torch.distributed run whose
	// file was reduced, and the others'.
	Ranks *regress.Ranks
	// Mode is how the samples were reduced and ModeReason why.
	Mode       Mode
	ModeReason string
	// Size is set in ModeSize.
	Size *regress.SizeResult
	// Findings are the culprit sets, reduced, and Fixtures their
	// directories, in the same order.
	Findings []Finding
	Fixtures []string
	// Replays counts this run's replays whose answers a search used, the
	// same for every -j; Resumed the answers taken from an earlier run's
	// journal; Phases both by phase. Ahead counts the replays made ahead
	// of need with -j N whose answers no search used, or that the engine
	// canceled (ahead.go): the cost of speculation, with Jobs, the -j the
	// searches ran with.
	Replays int
	Resumed int
	Ahead   int
	Jobs    int
	Phases  map[Phase]PhaseCount
	// OtherFailures are the different failures met, never followed.
	OtherFailures []regress.OtherFailure
	// Launch is where the replays ran.
	Launch replay.LaunchInfo
	// RemovedPartials are the partial fixtures of interrupted reductions
	// of the same file that this completed one superseded and removed.
	RemovedPartials []string
	Seconds         float64
	// Partial: interrupted; Fixtures hold the best result so far.
	Partial bool
}

// PhaseCount is a phase's replays, and its answers from the journal.
type PhaseCount struct {
	Replays int `json:"replays"`
	Resumed int `json:"resumed,omitempty"`
}

// Finding is one culprit set, reduced.
type Finding struct {
	// Indices are positions in the original batch, IDs their sample ids.
	Indices []int
	IDs     []string
	// Wrapped are the IDs' indices in the dataset a Subset wraps, where
	// they are dataset indices (fixtures.Batch.WrappedIDs).
	Wrapped []string
	// Elements are the triggering elements, each with its boundary.
	Elements []Element
	// Batch is the minimal failing batch; Boundary the same with every
	// triggering element at its passing value (nil when there is none).
	Batch    *fixtures.Batch
	Boundary *fixtures.Batch
	// ContentFree: with every element neutralized it still fails; the
	// cause is in the shapes, dtypes or the size, not in the values.
	ContentFree bool
	Partial     bool
	// Relation is set when the elements fail by a relation between
	// their values; Shape when a non-batch dim's size decides it.
	Relation *regress.Relation
	Shape    *regress.ShapeResult
	// OtherEnd is Batch with each element at the other end of its valid
	// range; Without the original batch without the culprit samples (when
	// it has at most maxWithout samples). Each was replayed and passed;
	// nil when there is none.
	OtherEnd *fixtures.Batch
	Without  *fixtures.Batch
	// Canonical: no sample passed without the culprits, and the elements
	// were found against zeros (the dtype's own values), not against
	// other samples' values.
	Canonical bool
	// Shared are the elements that every sample of the batch holds at the
	// same value ("label = -100"), when Canonical: why no sample passes.
	Shared []string
	// Window is set when the cause lies in a recorded window's earlier
	// steps: their culprit samples; Batch is then those samples' steps
	// and the failing step's batch, a witness, whole.
	Window *regress.WindowCause
}

// Element is a triggering element, with where it lies in the batch
// searched.
type Element struct {
	regress.Element
	row   int64         // its position along the batch axis of the batch searched
	dtype kernels.DType // its tensor's: the digits its values are printed with (fmtValue)
}

// run is one reduction: the batch, the backend, the failure kept, and
// what was observed along the way.
type run struct {
	o Options
	// batch is the recorded batch without a window's earlier steps (what
	// the phases read); full is the recorded one, which candidates are
	// built from.
	batch *fixtures.Batch
	full  *fixtures.Batch
	// steps, when set, are the window's rows every candidate keeps unless
	// it says its own (withSteps): none, when the failing step's batch
	// fails alone; windowNote says so.
	steps      [][]int64
	windowNote string
	be         replay.Backend
	srcHash    string
	// judge judges every answer against the failure kept (judge.Want);
	// until a replay reproduced it, judge.Recorded says that it is the
	// recording's own text.
	judge    signature.Judge
	recorded *signature.Signature
	// wantNote says why want is not the recorded signature, or what it
	// matches when it names no assert; "" when there is nothing to say.
	wantNote string
	// raised is where the first confirming replay of a step raised its
	// exception (regress.Record.Raised).
	raised *signature.Raise
	// message is the failure kept as printed (Result.Message).
	message string
	// history is Result.Predates.
	history string
	start   time.Time
	journal *journal
	// source is the recorded file as it was read, infraRun how many
	// replays in a row broke in the harness (guard.go).
	source   *identity
	infraRun int

	compiled *regress.Compiled // Result.Compiled

	mode       Mode
	modeReason string
	size       *regress.SizeResult
	grownWith  string // what growMode grew the sample with: "copies of it", "the batch's other samples"

	mu        sync.Mutex
	phase     Phase
	phases    map[Phase]PhaseCount // replays and resumed answers, by phase
	others    map[string]*regress.OtherFailure
	otherRows map[string]int // by others' key: the samples of the plain batch that met it first
	// built names the candidate each batch a finding holds was built
	// from, so that its fixture takes what that replay reported
	// (reportOf).
	built map[*fixtures.Batch]string
	cands map[*fixtures.Batch]*candidate // and the candidate itself (compileProbe)
	// replayedAgain holds the candidates, by key, whose failure the journal
	// gave and a replay of this run showed again (failsHere).
	replayedAgain map[string]bool
	// passed holds the recorded samples seen in a batch of whole samples
	// that passed: values they hold are known to be no cause (outliers).
	passed map[int64]bool
	// pending holds the effects of answers replayed ahead of need that
	// no search has used yet, by key#trial; canceled counts the replays
	// made ahead that the engine canceled (ahead.go).
	pending  map[string]waiting
	canceled int
}

// build makes candidate c's batch for a finding (candidate.build) and
// remembers which candidate it is.
func (r *run) build(c *candidate) (*fixtures.Batch, error) {
	c = r.withSteps(c)
	b, err := c.build(r.full)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.built == nil {
		r.built = map[*fixtures.Batch]string{}
	}
	r.built[b] = c.key(r.batch.Samples)
	if r.cands == nil {
		r.cands = map[*fixtures.Batch]*candidate{}
	}
	r.cands[b] = c
	return b, nil
}

// rows is build for the candidate that keeps rows.
func (r *run) rows(rows []int64) (*fixtures.Batch, error) {
	return r.build(keepRows(rows, len(rows)))
}

// reportOf is what the worker reported when it replayed b's candidate, of
// the first trial whose answer was want (Reproduces for a finding's
// minimal batch, Passes for the batches that pass): a built-in op's
// outputs, or its failure on the CPU; nil when b was not built by build,
// or nothing was reported.
func (r *run) reportOf(b *fixtures.Batch, want signature.Outcome) *replay.Report {
	_, rep, _ := r.answerOf(b, want)
	return rep
}

// answerOf is the signature and the report of the first trial of b's
// candidate whose answer was want (reportOf); ok false when there is none.
func (r *run) answerOf(b *fixtures.Batch, want signature.Outcome) (signature.Signature, *replay.Report, bool) {
	r.mu.Lock()
	key, ok := r.built[b]
	r.mu.Unlock()
	if !ok {
		return signature.Signature{}, nil, false
	}
	for t := range max(r.o.Trials, 1) {
		if sig, rep, ok := r.journal.answerAt(key, t); ok && r.judge.Rule(sig).Outcome == want {
			return sig, rep, true
		}
	}
	return signature.Signature{}, nil, false
}

// Run reduces b, read from o.Source, replaying candidates with be (a
// backend bound to b, replay.Options.Batch), and writes a regression
// fixture per finding under o.Out. On ErrInterrupted
// the Result may hold partial fixtures, and the journal is kept for
// Options.Resume; on any other error nothing was written, and the journal
// is kept only when the search itself failed after the confirmation.
func Run(ctx context.Context, b *fixtures.Batch, be replay.Backend, o Options) (*Result, error) {
	res, err := run0(ctx, b, be, o)
	var ge *guardError
	if errors.As(err, &ge) {
		return nil, ge // said as it is, not as the search that met it
	}
	return res, err
}

func run0(ctx context.Context, b *fixtures.Batch, be replay.Backend, o Options) (*Result, error) {
	o = o.withDefaults()
	switch {
	case o.Source == "" || o.Out == "":
		return nil, errorf(ErrUsage, "reduction: no source or out")
	case o.Confirm < 1, o.Trials < 1, o.Jobs < 1, o.MaxFindings < 1:
		return nil, errorf(ErrUsage, "reduction: confirm %d, trials %d, jobs %d, max findings %d: want at least 1", o.Confirm, o.Trials, o.Jobs, o.MaxFindings)
	case b.Samples == 0:
		return nil, errorf(ErrUsage, "%s: the batch has no samples to reduce", o.Source)
	}
	if ctx.Err() != nil {
		// Stopped before it started (a signal while the backend started):
		// --out, and a journal there, are left as they were.
		return nil, errorf(ErrInterrupted, "interrupted before the reduction started; nothing was written")
	}
	source, err := identify(o.Source)
	if err != nil {
		return nil, errorf(ErrUsage, "read batch %s: %v", o.Source, err)
	}
	srcHash, err := hashFile(o.Source)
	if err != nil {
		return nil, errorf(ErrUsage, "read batch %s: %v", o.Source, err)
	}
	release, lockNote, err := lockOut(o.Out)
	if err != nil {
		return nil, err
	}
	defer release()
	source.hash = srcHash
	if err := regress.CheckCollector(o.Out); err != nil {
		return nil, collectorError(err) // before any replay: the fixture could not be written
	}
	r := &run{o: o, batch: b.WithoutWindow(), full: b, be: be, srcHash: srcHash, source: source, start: time.Now(), judge: signature.Judge{Level: o.Match, Volatile: regress.VolatileValues(b)},
		phases: map[Phase]PhaseCount{}, others: map[string]*regress.OtherFailure{}, otherRows: map[string]int{}}
	if b.Error != nil {
		s := signature.Recorded(b.Error.Text)
		r.recorded = &s
		r.judge.Want, r.judge.Recorded = s, true
	}
	jpath := journalPath(o.Out, srcHash)
	head := journalHeader{Source: srcHash, Settings: be.Settings(), Trials: o.Trials, Match: o.Match, Want: r.judge.Want}
	var replaced bool
	if r.journal, replaced, err = openJournal(jpath, head, o.Resume); err != nil {
		return nil, err
	}
	if replaced {
		r.logf("started afresh over the journal of an earlier, unfinished reduction (%s); --resume would have continued it", jpath)
	}
	if lockNote != "" {
		r.logf("%s", lockNote)
	}
	r.emit(&Start{Event: "start", Batch: o.Source, Samples: b.Samples, Op: b.Op, Backend: string(be.Kind()),
		Match: string(o.Match), Recorded: r.recorded, Resumed: o.Resume})

	if err := r.confirm(ctx); err != nil {
		// Only an interrupted confirmation has answers worth resuming: a
		// journal of one that failed would answer a retry of a flaky
		// failure with its passes.
		r.journal.close(ctx.Err() == nil)
		return nil, err
	}
	if r.history = r.predates(); r.history != "" {
		r.logf("state: %s", r.history)
	}
	var found []Finding
	windowed := false
	if r.windowed() {
		if found, windowed, err = r.windowMode(ctx); err != nil && ctx.Err() == nil {
			r.journal.close(false)
			return nil, err
		}
	}
	switch {
	case windowed:
	case r.judge.Want.Family == signature.FamilyOOM:
		found, err = r.sizeMode(ctx, "the failure is out of memory, which depends on how many samples there are, not on which")
	default:
		found, err = r.sampleMode(ctx)
		if r.windowNote != "" {
			r.modeReason = r.windowNote + "; " + r.modeReason
		}
	}
	interrupted := ctx.Err() != nil
	if err != nil && !interrupted {
		r.journal.close(false)
		return nil, err
	}
	if len(found) == 0 {
		r.journal.close(!interrupted)
		if interrupted {
			return nil, errorf(ErrInterrupted, "interrupted before any candidate failed; nothing to write (resume with --resume)")
		}
		return nil, errors.New("shrink samples: no failing subset found")
	}
	if interrupted {
		for i := range found {
			found[i].Partial = true
		}
	}
	if !interrupted {
		if r.compiled, err = r.compileProbe(ctx, found[0]); err != nil && ctx.Err() == nil {
			r.journal.close(false)
			return nil, err
		}
		interrupted = ctx.Err() != nil
	}
	if err := r.failedHere(ctx, found); err != nil {
		r.journal.close(false)
		return nil, err
	}
	for i := range found { // a Subset's dataset indices, named with the indices in the dataset it wraps
		found[i].Wrapped = r.batch.WrappedIDs(found[i].Indices)
	}
	dirs, err := r.writeFixtures(found)
	r.journal.close(err == nil && !interrupted)
	if err != nil {
		return nil, err
	}
	res := r.result(found, dirs, interrupted)
	if interrupted {
		return res, errorf(ErrInterrupted, "interrupted: the best result so far is in %s, marked partial; continue with --resume", dirs[0])
	}
	res.RemovedPartials = r.removePartials(dirs)
	for _, d := range res.RemovedPartials {
		r.logf("removed %s: a partial fixture of an interrupted reduction of %s, superseded", d, o.Source)
	}
	return res, nil
}

func (r *run) result(found []Finding, dirs []string, partial bool) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{Want: r.judge.Want, Recorded: r.recorded, Ranks: r.o.Ranks, Message: r.message, Predates: r.history, Compiled: r.compiled, WantNote: r.wantNote, Mode: r.mode, ModeReason: r.modeReason, Size: r.size,
		Findings: found, Fixtures: dirs, Phases: maps.Clone(r.phases), OtherFailures: r.otherFailures(),
		Launch: replay.Provenance(r.be), Seconds: time.Since(r.start).Seconds(), Partial: partial}
	if r.batch.DatasetIndices() {
		res.IDKind = fixtures.MetaDatasetIndex
	}
	for _, pc := range r.phases {
		res.Replays += pc.Replays
		res.Resumed += pc.Resumed
	}
	res.Ahead, res.Jobs = r.unused(), r.o.Jobs
	return res
}

func (r *run) emit(ev Event) {
	if r.o.Events != nil {
		r.o.Events(ev)
	}
}

func (r *run) logf(format string, args ...any) {
	r.emit(&Log{Text: fmt.Sprintf(format, args...)})
}

func (r *run) setPhase(p Phase, units int) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
	r.emit(&PhaseStarted{Event: "phase", Phase: p, Units: units})
}

func (r *run) shrinkOptions() shrink.Options {
	return shrink.Options{Strategy: r.o.Strategy, Jobs: r.o.Jobs, Trials: r.o.Trials}
}

// Where an answer came from.
const (
	fromReplay  = iota // a replay now
	fromJournal        // an earlier run's, by --resume
	fromCache          // this run's, asked again
)

// ask says whether trial of candidate c reproduces the failure kept. It is
// the oracle of every search: a different failure is Unresolved, and
// counted the first time it is seen.
func (r *run) ask(ctx context.Context, c *candidate, trial int) (shrink.Outcome, error) {
	a, err := r.answer(ctx, c, trial, true)
	if err != nil {
		return shrink.Unresolved, err
	}
	return a.outcome, nil
}

// askTrials asks every trial of c (Options.Trials), as the searches do:
// Fail when any trial fails, Pass when every one passes, Unresolved
// otherwise. The single questions of the diagnoses (a probe, a neighbour)
// are asked this way, so that a flaky failure is never taken for a pass.
func (r *run) askTrials(ctx context.Context, c *candidate) (shrink.Outcome, error) {
	return allTrials(r.o.Trials, func(t int) (shrink.Outcome, error) { return r.ask(ctx, c, t) })
}

// allTrials asks trials 0 to n-1 and combines them as askTrials says.
func allTrials(n int, ask func(trial int) (shrink.Outcome, error)) (shrink.Outcome, error) {
	out := shrink.Pass
	for t := 0; t < n; t++ {
		o, err := ask(t)
		if err != nil {
			return shrink.Unresolved, err
		}
		if o == shrink.Fail {
			return shrink.Fail, nil
		}
		if o == shrink.Unresolved {
			out = shrink.Unresolved
		}
	}
	return out, nil
}

// answered is a candidate's answer: what its replay showed, that judged
// against the failure kept (with the judge's note), and where it came
// from.
type answered struct {
	sig     signature.Signature
	outcome shrink.Outcome
	note    string
	src     int
	verdict *replay.Verdict // nil when the journal answered
	// printed is what the replay's output said besides its signature,
	// from the journal when it answered.
	printed printed
}

// answer gives trial of candidate c: the journal's answer when it has one,
// else that of a replay of the candidate's view, counted in its phase,
// journaled and reported. The signature is judged here, once; with others,
// a different failure is counted among the others met (a search's
// question; the confirmation and the compile probe count their own). A
// replay stopped by cancellation says nothing about the candidate: it is
// ctx's error.
func (r *run) answer(ctx context.Context, c *candidate, trial int, others bool) (answered, error) {
	c = r.withSteps(c)
	key := c.key(r.batch.Samples)
	kt := keyWithTrial(key, trial)
	a := answered{src: fromReplay}
	ja, ok, fromFile := r.journal.lookup(key, trial)
	switch {
	case ok && fromFile:
		a.sig, a.printed, a.src = ja.sig, ja.printed, fromJournal
	case ok:
		a.sig, a.printed, a.src = ja.sig, ja.printed, fromCache
	default:
		verdict, err := r.be.Replay(ctx, c.view())
		if ctx.Err() != nil {
			r.canceledAhead(ctx)
			return answered{}, ctx.Err()
		}
		if err != nil {
			return answered{}, err
		}
		if err := r.guard(&verdict); err != nil {
			return answered{}, err
		}
		a.sig, a.verdict = verdict.Signature, &verdict
		a.printed = printedOf(&verdict, a.sig)
	}
	// The judgement: the kept failure is Fail, no failure is Pass, and a
	// different failure is Unresolved: it is counted, reported, and never
	// followed.
	ruling := r.judge.Rule(a.sig)
	switch ruling.Outcome {
	case signature.Reproduces:
		a.outcome, a.note = shrink.Fail, ruling.Note
	case signature.Passes:
		a.outcome = shrink.Pass
	default:
		a.outcome = shrink.Unresolved
	}
	r.noteCall(ctx, kt)
	if a.src == fromCache {
		return a, nil
	}
	// What the answer teaches, when a search uses it (ahead.go): its
	// count where this run's replays are, so that the summary and the
	// fixture tell the whole reduction; the samples it saw pass; the
	// different failure it met.
	learned := func() {
		r.mu.Lock()
		r.count(func(pc *PhaseCount) {
			if a.src == fromJournal {
				pc.Resumed++
			} else {
				pc.Replays++
			}
		})
		if rows := c.wholeSamples(); a.outcome == shrink.Pass && rows != nil {
			if r.passed == nil {
				r.passed = map[int64]bool{}
			}
			for _, x := range rows {
				r.passed[x] = true
			}
		}
		r.mu.Unlock()
		if others && a.outcome == shrink.Unresolved {
			r.other(a.sig, a.printed.Message, c.wholeSamples())
		}
	}
	r.mu.Lock()
	phase := r.phase
	r.mu.Unlock()
	if a.src == fromJournal {
		// Said when used, as counted: no replay ran.
		r.learn(ctx, kt, func() {
			learned()
			r.mu.Lock()
			phase := r.phase
			r.mu.Unlock()
			r.emit(&Replayed{Event: "replay", Phase: phase, Key: kt, Size: c.size,
				Outcome: a.outcome, Signature: a.sig, Resumed: true})
		}, false)
		return a, nil
	}
	verdict := a.verdict
	// Its effects wait before the journal holds it: another call that
	// finds it there and is used applies them.
	r.learn(ctx, kt, learned, true)
	r.journal.record(key, trial, a.sig, verdict.Report, a.printed)
	ev := &Replayed{Event: "replay", Phase: phase, Key: kt, Size: c.size, Outcome: a.outcome,
		Signature: a.sig, Seconds: verdict.Duration.Seconds()}
	if verdict.Launcher != "" && verdict.Launcher != replay.LauncherLocal {
		ev.Launcher, ev.JobID, ev.Node, ev.Requeued = string(verdict.Launcher), verdict.JobID, verdict.Node, verdict.Requeued
	}
	r.emit(ev)
	return a, nil
}

// count updates the current phase's count and returns the phase; mu is
// held.
func (r *run) count(add func(*PhaseCount)) Phase {
	pc := r.phases[r.phase]
	add(&pc)
	r.phases[r.phase] = pc
	return r.phase
}

func keyWithTrial(key string, trial int) string { return fmt.Sprintf("%s#%d", key, trial) }

// other counts a different failure met, message its line as the answer
// printed it (printed.Message); failures that differ only in a number a
// probe changed are one.
func (r *run) other(s signature.Signature, message string, rows []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase == PhaseShape || r.phase == PhaseBoundary || r.phase == PhaseRange || r.phase == PhaseHistory {
		// A dim cut or dropped, a value set by the probe, a step called
		// without its state, fails otherwise: the probe's own making, not
		// the batch's (-99 out of bounds next to a target of -100).
		return
	}
	key := signature.Grouped(s)
	o := r.others[key]
	if o == nil {
		o = &regress.OtherFailure{Signature: s}
		r.others[key] = o
	}
	if o.Message == "" {
		o.Message = message
	}
	if o.Count == 0 && rows != nil {
		var b strings.Builder
		writeRanges(&b, rows)
		o.Samples = strings.Trim(b.String(), "{}")
		r.otherRows[key] = len(rows)
	}
	o.Count++
}

// otherFailures lists the different failures met, in a stable order; mu
// is held.
func (r *run) otherFailures() []regress.OtherFailure {
	out := []regress.OtherFailure{}
	for _, o := range r.others {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Signature.String() < out[j].Signature.String() })
	return out
}

func (r *run) idsOf(set []int) []string {
	if r.batch.SampleIDs == nil {
		return nil
	}
	ids := make([]string, len(set))
	for i, x := range set {
		ids[i] = r.batch.SampleIDs[x]
	}
	return ids
}

// hashFile is the hex SHA-256 of the file at path (trust.Digest's).
func hashFile(path string) (string, error) {
	d, err := trust.Digest(path)
	return strings.TrimPrefix(d, "sha256:"), err
}
