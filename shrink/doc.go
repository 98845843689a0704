// Package shrink is the delta-debugging engine of reduce: given n units
// and an oracle that says whether a candidate - a subset of the units to
// keep - still shows the failure, it finds the units that must be kept,
// asking the oracle as few times as it can. Every oracle call replays a
// training batch in a fresh process, so the number of calls is the cost
// that everything here is designed to minimize.
//
// # What it owns, what it must never do
//
// shrink owns the search: which candidates to try, in which order, with
// how many in flight, and what the answers prove. It knows nothing of
// tensors, batches, files or processes. It is pure: standard library
// only, no I/O of any kind (no os, io/fs, net, os/exec, no printing); the
// test TestPackageMap (internal/archtest) enforces both. The caller's Oracle does the replaying.
//
// # Units and candidates
//
// Units are the integers 0..n-1. A Candidate is the sorted set of units
// kept; internally it is a union of ranges, so that hashing and comparing
// candidates costs O(#ranges) even at n = 65,536. The CLI uses two levels,
// and the engine does not know the difference:
//
//   - samples: unit i is sample i of the batch; a candidate is the
//     sub-batch of the kept samples;
//   - elements: units number the elements of the kept samples; a
//     candidate keeps the batch's shape, and the caller replaces every
//     element of Candidate.Dropped by a benign value (neutralizes it).
//
// Run minimizes the set of units that must be kept (not neutralized).
// Boundary and LargestPassing are the same machinery over an integer
// parameter instead of a unit set.
//
// # Outcomes and the monotonicity assumption
//
// The oracle answers Fail (the failure reproduces), Pass, or Unresolved
// (timeout, a different failure, broken infrastructure). Unresolved is
// never taken as Fail. The searches assume the failure is monotone - a
// superset of a failing candidate fails - which is what makes their
// inferences sound. Correctness does not rest on that assumption:
//
//   - every candidate the engine keeps, and every culprit set it reports,
//     was answered Fail by the oracle (never inferred);
//   - every culprit set is 1-minimal by actual answers: without any one
//     of its units the candidate was answered Pass or Unresolved (an exact
//     cache hit counts; the one exception is the empty candidate, taken to
//     pass once any candidate has been answered Pass, which is ddmin's own
//     precondition test(∅) = Pass, checked rather than assumed).
//
// A non-monotone oracle can therefore cost more calls or yield a less
// useful result, never an unverified one.
//
// # Strategies
//
// DDMin is Zeller and Hildebrandt's ddmin, testing complements before
// subsets, behind the cache. It is the baseline.
//
// Auto, the default, is adaptive group testing:
//
//   - First culprit set: binary splitting on removals. Remove the first
//     half; Fail drops it, Pass says it holds a needed unit, which is then
//     found by bisecting that half while everything else stays kept. One
//     culprit among n costs ⌈log2 n⌉ tests plus one ("the culprit alone
//     fails") - the test that drops everything still kept. If that test
//     passes, the failure needs several units together (a conjunctive set)
//     and the search goes on among the units still kept with the found
//     ones fixed: "fix one half, bisect the other", as Go's
//     x/tools/cmd/bisect does, about ⌈log2 n⌉ tests per unit of the set.
//     Once a set proves large, removal groups follow Hwang's generalized
//     binary splitting, so that "every unit needed" costs O(n), not
//     O(n log n).
//   - Further culprit sets (unless Options.StopAfterFirst): after sets
//     S1..Sk are found, the candidate "everything except S1..Sk" fails iff
//     another culprit set disjoint from them exists. This is exact for
//     independent single-unit culprits and for disjoint conjunctive sets;
//     a failing set that overlaps a found one is not searched for (that
//     would take exponentially many tests), so reported sets are pairwise
//     disjoint. While all culprits found are single units, the engine
//     treats every unit of a passing candidate as clean and sizes group
//     tests by the density of culprits seen so far (Hwang's rule), which
//     finds k independent culprits in about k·log2(n/k) tests instead of
//     k·log2 n.
//   - Each set found then gets the 1-minimality check described above.
//
// With Options.Halve, for units that cost by their size (the samples of a
// batch, each replay holding the samples it keeps), the first search of
// each culprit set keeps only the half it searches: "the second half of
// x alone" rather than "everything but the first half of x", so that
// candidates halve with each answer wherever the culprit sits (about n
// units held in all for one culprit among n, 2n where it comes first,
// where the plain search holds up to n·log2 n then). Fail verifies the half;
// Pass moves to the other half unverified, and the unit it narrows to is
// replayed alone unless a Fail verified it. For culprits that fail alone
// it asks the same questions less the units already seen passing, so it
// gets the same answers and finds the same culprits, in as many calls or
// one fewer. A unit alone that passes means the failure needs several
// units together: the plain search goes on from the last candidate that
// failed, which costs a conjunctive pair about ⌈log2 n⌉ calls more (the
// call table's target: 3⌈log2 n⌉ + 4). When a culprit that fails alone and
// a conjunctive set are both present, halving finds the culprit first.
//
// Call counts, measured by TestCallTable (run it with -table) against
// ddmin and the information bound ⌈log2 C(n,k)⌉, are in the package
// tests; the targets it checks are: one culprit ≤ ⌈log2 n⌉ + 2 calls
// after the confirmation, a conjunctive pair ≤ 2⌈log2 n⌉ + 4, k
// independent culprits ≤ 1.5⌈log2 C(n,k)⌉ + 2k.
//
// # The run
//
// Run first replays the original (all units kept) and refuses with
// ErrOriginalPasses or ErrOriginalUnresolved when it does not fail; then
// it searches; then, when Options.Confirm asks for it (by default when
// Trials > 1), it replays every culprit set afresh and lists in
// Result.Unconfirmed those that no longer fail.
//
// Flaky failures: Options.Trials replays per candidate, combined by
// Options.Policy (FailIfAny or FailIfAll); the trials of a candidate stop
// as soon as its verdict is decided. Result.FlakeRate is the share of
// trials that disagreed with their candidate's majority. Every call says
// which trial it is (Candidate.Trial, the Predicate's trial): 0 to
// Trials-1 in the search, Trials to 2·Trials-1 in the reconfirmation, so
// a caller that keeps answers (reduce's journal) keys each by candidate
// and trial, and never mistakes one trial's answer for another's.
//
// # Cache
//
// A candidate already answered is never replayed: the cache is keyed by
// the canonical range form of the candidate. Result.Cache exports it as
// (candidate ranges, outcome) entries, and Options.Seed loads such entries
// into a new run, so an interrupted reduction resumes without replaying
// anything it had answered.
//
// # Parallelism and determinism
//
// With Options.Jobs = J > 1 the engine keeps up to J oracle calls in
// flight. The searches stay sequential: each is an immutable state
// machine, and while the answer it waits for is pending the engine
// advances copies of it on both hypothetical outcomes and starts the
// candidates they would ask next (breadth first down the decision tree:
// while "without the first half" runs, also "without the first quarter"
// and "without the second quarter", and so on). Answers are accepted in the
// order the sequential search asks for them, and the inferences of the
// searches use only accepted answers, so for a deterministic oracle the
// result and the accepted step log (Result.Steps) are identical for every
// J and every timing. Speculative calls whose branch the search does not
// take are wasted work: Result.Calls counts every call made,
// Result.Accepted only those whose answers were used (Accepted is what
// J = 1 would have made; Progress's Used events name them, so that a
// caller that learns from answers learns from the same ones for every J);
// calls of a dead branch are canceled (via their
// context) when their slot is needed, and an answer that arrives after
// its context was canceled is discarded, never cached. A budget ends a
// run at a point that may depend on J, because speculative calls spend it
// too; the accepted steps are then still a prefix of the J = 1 log. With
// Options.ThenRest the speculation also asks, where the first culprit
// set search would end, the question its caller asks next (every unit
// but the set), never cancels that call for its slot, and waits for it
// before Run returns where the set found makes it the question indeed.
//
// # Budgets and cancellation
//
// Options.MaxTests caps the calls made, Options.MaxDuration the time as
// read from Options.Clock (injectable, so that tests never depend on real
// time), and the context passed to Run can be canceled or carry a
// deadline. Each ends the run with the best verified result so far,
// Result.Incomplete set and Result.Reason saying which: the culprit sets
// already complete in Culprits, and in Partial the smallest candidate
// answered Fail by the search in progress. An error from the oracle
// aborts the run (it is returned as an *OracleError) - unless the context
// was canceled, which is the cancellation case above.
//
// # Progress
//
// Options.Progress receives events: test started, test finished with its
// outcome, cache hit, new best, phase change. It is called from the
// goroutine that called Run (the oracle may run on others), never
// concurrently and never after Run returns.
package shrink
