package regress

import "fmt"

// Compiled is what the reduction learnt of a step compiled with
// torch.compile (its batch's meta names the backend): whether its failure
// needs the compile, from one replay of the minimal batch eager.
type Compiled struct {
	// Backend is torch.compile's backend, as the recorder named it
	// ("inductor", or "1" when it could not).
	Backend string `json:"backend"`
	// Eager is what the minimal batch did replayed eager (torch._dynamo
	// disabled): EagerFails, EagerPasses, EagerOther, or EagerAll when
	// every replay ran eager (--no-compile).
	Eager string `json:"eager"`
	// EagerFailure is the other failure's signature (EagerOther).
	EagerFailure string `json:"eager_failure,omitempty"`
}

// The answers of Compiled.Eager.
const (
	EagerFails  = "fails"  // the same failure: the compile is not needed
	EagerPasses = "passes" // the failure needs the compile
	EagerOther  = "other"  // another failure eager: this failure's form needs the compile, the batch fails either way
	EagerAll    = "all"    // --no-compile: every replay ran eager
)

// Words say it in one sentence, for the summary and report.md.
func (c *Compiled) Words() string {
	with := "torch.compile (" + c.Backend + ")"
	if c.Backend == "1" || c.Backend == "" {
		with = "torch.compile"
	}
	switch c.Eager {
	case EagerFails:
		return fmt.Sprintf("the step was compiled with %s, and the failure does not need it: the minimal batch fails the same way eager", with)
	case EagerPasses:
		return fmt.Sprintf("the failure needs %s: the minimal batch passes eager", with)
	case EagerOther:
		return fmt.Sprintf("the minimal batch fails eager too, with another error (%s): %s changes how it fails, not whether", c.EagerFailure, with)
	case EagerAll:
		return fmt.Sprintf("the step was compiled with %s when it was recorded; every replay ran eager (--no-compile)", with)
	}
	return fmt.Sprintf("the step was compiled with %s", with)
}
