package reduction

import (
	"context"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/signature"
)

// compileProbe says whether the failure of a step compiled with
// torch.compile (the batch's meta names the backend, fixtures.MetaCompiled)
// needs the compile: the finding's minimal batch replayed once more, eager
// (a fixtures.View.Eager candidate, whose meta tells
// reduce_collect._call_step to disable torch._dynamo). Its answer is
// judged as every answer is and is no other failure of the run's (a probe
// of its own making). nil for a step recorded eager; with Options.NoCompile
// every replay already ran eager, which the result says, with no probe.
func (r *run) compileProbe(ctx context.Context, f Finding) (*regress.Compiled, error) {
	backend := r.batch.Meta[fixtures.MetaCompiled]
	if backend == "" {
		return nil, nil
	}
	if r.o.NoCompile {
		return &regress.Compiled{Backend: backend, Eager: regress.EagerAll}, nil
	}
	r.mu.Lock()
	c := r.cands[f.Batch]
	r.mu.Unlock()
	if c == nil {
		return nil, nil
	}
	e := *c
	e.Eager = true
	r.setPhase(PhaseCompile, 1)
	a, err := r.answer(ctx, &e, 0, false)
	if err != nil {
		return nil, err
	}
	out := &regress.Compiled{Backend: backend}
	switch r.judge.Rule(a.sig).Outcome {
	case signature.Reproduces:
		out.Eager = regress.EagerFails
	case signature.Passes:
		out.Eager = regress.EagerPasses
	default:
		out.Eager, out.EagerFailure = regress.EagerOther, a.sig.String()
	}
	return out, nil
}
