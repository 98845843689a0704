package reduction

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
	"reduce/shrink"
)

// confirm replays the original Options.Confirm times, as trials 0, 1, ...
// of the candidate that keeps every sample: it must fail, the same way, in
// a fresh process. Without a recorded failure, the first failure seen is
// the one kept. A recording that names no assert (the recorder keeps the
// exception's text, "CUDA error: device-side assert triggered", and the
// assert line went to the process's output) or only the file that raised
// it is reproduced by a replay whose assert it allows (the judge's note,
// signature.Judge.Recorded): the first such assert is the one kept, and
// r.wantNote says so. Once a replay reproduced the failure, the failure
// kept is no recording's text any more.
func (r *run) confirm(ctx context.Context) error {
	n := r.o.Confirm
	r.setPhase(PhaseConfirm, int(r.batch.Samples))
	orig := keepRows(nil, int(r.batch.Samples))
	answers := r.confirmReplays(ctx, orig, n)
	fails := 0
	var seen []signature.Signature
	lastStderr := ""
	for i := 0; i < n; i++ {
		a, err := answers[i].a, answers[i].err
		sig, v := a.sig, a.verdict
		if ctx.Err() != nil {
			return errorf(ErrInterrupted, "interrupted while confirming %s; nothing was written", r.o.Source)
		}
		if err != nil {
			return fmt.Errorf("replay %s: %w", r.o.Source, err)
		}
		if v != nil {
			lastStderr = lastLines(v.Result.Stderr, 3)
		}
		seen = append(seen, sig)
		// Judged here, in order, by the failure kept so far: the first
		// reproduction may have changed it (the trials ran at once).
		ruling := r.judge.Rule(sig)
		a.outcome, a.note = shrink.Unresolved, ruling.Note
		if ruling.Outcome == signature.Reproduces {
			a.outcome = shrink.Fail
		}
		switch {
		case !signature.Failing(sig):
		case a.outcome != shrink.Fail:
			r.other(sig, a.printed.Message, nil)
		case fails > 0:
			fails++
		default:
			// The first reproduction: a batch that recorded none keeps its
			// failure, and a recording that names no assert the replay's.
			if a.note != "" {
				r.setWantNote(fmt.Sprintf("%s; the first replay's is kept: %s", a.note, sig))
				r.logf("confirm: %s", r.wantNote)
			}
			if a.note != "" || r.recorded == nil {
				r.judge.Want = sig
			}
			r.judge.Recorded = false
			fails++
			if r.batch.Error != nil && a.note == "" {
				r.message = signature.Message([]byte(r.batch.Error.Text), r.judge.Want)
			} else {
				// The replay's own failure is the one kept (judge.Want is
				// sig): its line as printed, journaled with the answer.
				r.message = a.printed.Message
			}
		}
		if r.raised == nil && r.batch.Op == "" && a.outcome == shrink.Fail {
			// Whose code raised the failure kept, for the report (a
			// step's own check, or torch's): the replay's traceback says,
			// journaled with the answer.
			r.raised = a.printed.Raised
		}
	}
	r.logf("confirm: %d of %d replays reproduce %s", fails, n, r.judge.Want)
	if p := r.judge.Want.Partial(); p != "" && fails > 0 && r.wantNote == "" {
		r.setWantNote(fmt.Sprintf("the failure %s, and neither do its replays: it reproduces only replays that name none either (an assert of a known kind is another failure, since this one might be any)", p))
		r.logf("confirm: %s", r.wantNote)
	}
	if fails > 0 && fails < n && r.o.Trials == 1 {
		r.logf("confirm: the failure is flaky; --trials %d replays each candidate that often and counts it failing if any trial fails", 2*n/fails+1)
	}
	r.emit(&Confirmed{Event: "confirm", Replays: n, Reproduced: fails, Signature: r.judge.Want, Note: r.wantNote})
	if fails > 0 {
		return nil
	}
	last := seen[len(seen)-1]
	what := "got " + last.String()
	switch last.Family {
	case signature.FamilyPass:
		what = "it passed"
	case signature.FamilyTimeout:
		what = "it timed out (try a longer --timeout)"
	case signature.FamilyInfra:
		if line := harnessLine(lastStderr); line != "" { // the recording cannot be replayed, and says why: bad input
			return errorf(ErrUsage, "%s cannot be replayed: %s", r.o.Source, line)
		}
		return fmt.Errorf("%s: the replay itself broke: %s", r.o.Source, lastStderr)
	}
	if !allSame(seen) {
		var all []string
		for _, s := range seen {
			all = append(all, s.String())
		}
		what += " (the replays gave: " + strings.Join(all, "; ") + ")"
	}
	if r.recorded == nil {
		return errorf(ErrNoRepro, "%s records no failure and none of %s failed: %s (try --trials, another --backend or --device)",
			r.o.Source, regress.Count(int64(n), "replay"), what)
	}
	if p := r.judge.Want.Partial(); p != "" {
		// Partial information is no wildcard: say what it allows.
		what += "; the recording " + p + ", so only a device assert it allows reproduces it"
	}
	try := "try --match family, --trials, another --backend or --device"
	if set := r.be.Settings(); (set.Step != "" || set.Entry != "" || set.Kind == replay.KindExec) && seen[len(seen)-1].Family == signature.FamilyPass {
		// The step is the user's code as it is now: a fix made since the
		// recording is the likeliest reason it passes.
		try = "the step is replayed as its code is now: if it was fixed since the recording, there is nothing to reduce; else " + try
	}
	if loss := r.batch.Meta["trainer_loss"]; loss != "" {
		// reduce_hooks.record_trainer: the replay runs the model's own
		// loss, not the Trainer's.
		try = "the Trainer computed its loss its own way (" + loss + "), and the replay runs the model's own loss: replay with --entry MODULE:FUNCTION, a step of yours that computes the Trainer's; else " + try
	}
	return errorf(ErrNoRepro, "%s does not reproduce: wanted %s, %s (%s)", r.o.Source, r.judge.Want, what, try)
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

func allSame(s []signature.Signature) bool {
	for _, x := range s[1:] {
		if x != s[0] {
			return false
		}
	}
	return true
}

// setWantNote records why r.judge.Want is what it is, for the log, the Confirmed
// event and the result.
func (r *run) setWantNote(note string) {
	r.mu.Lock()
	r.wantNote = note
	r.mu.Unlock()
}

// trialAnswer is one trial's answer, or the error that stopped it.
type trialAnswer struct {
	a   answered
	err error
}

// confirmReplays answers the n trials of orig, Options.Jobs at a time:
// every one is judged in order afterwards, so that how many ran at once
// changes nothing but the time.
func (r *run) confirmReplays(ctx context.Context, orig *candidate, n int) []trialAnswer {
	out := make([]trialAnswer, n)
	if r.o.Jobs <= 1 {
		for i := range out {
			if out[i].a, out[i].err = r.answer(ctx, orig, i, false); out[i].err != nil {
				break // judged first: the ones after it are never read
			}
		}
		return out
	}
	slots := make(chan struct{}, r.o.Jobs)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			out[i].a, out[i].err = r.answer(ctx, orig, i, false)
		}()
	}
	wg.Wait()
	return out
}

// harnessLine is the line in which reduce's Python side said why it could
// not run a replay of the recording (a HarnessError: a step's module that
// cannot be imported, a class that cannot be rebuilt, a recorded command
// that never reached its batch), or "" where it said none (a crash of
// reduce's own).
func harnessLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		for _, p := range []string{"reduce_batch: harness: ", "reduce: harness: "} {
			if i := strings.Index(l, p); i >= 0 && !strings.Contains(l, "cannot open its output") && !strings.Contains(l, "cannot initialize device") {
				return strings.TrimSpace(l[i+len(p):]) // (those two are the machine's, not the recording's)
			}
		}
	}
	return ""
}
