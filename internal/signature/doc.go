// Package signature says what failure a replay's output shows: it parses
// a replay's stderr and exit status into a Signature (family, backend,
// kernel, expression, exception class) with the volatile parts normalized
// away, matches two signatures at a level (strict, family, any), and maps
// the forms one check takes on different builds (THC, THCUNN, THNN, ATen
// 1.x and 2.x, HIP, Inductor, the CPU) to a shared class, so that at
// strict one check is one failure whatever build printed it. A text that
// names less (only the file that reported an assert, or nothing) is partial
// information, never a wildcard, except that a replay's assert may stand
// for a recording that names none. Judge owns the verdict built on these
// rules: reproduces, another failure, or passes, with a note when a
// replay's assert stands for a recording's.
//
// It also says what a failure says of the inputs that raised it (Cause: a
// value out of range, an argument check, a documented rule with its words,
// RuleOf, a resource, a fault that no check names), and whose code raised a
// traceback's exception (RaisedAt: torch's, a library's, the user's own
// raise, or a call into native code), for the regression report's verdict
// of misuse or possible bug.
//
// It owns the failure families (Family, a closed set) and every fact about
// the texts PyTorch prints for them (../shared/reference/pytorch-failures.md
// collects their sources). The corpus in testdata/stderr holds real outputs,
// each with its expected signature; testdata/builds, where present, real
// pasted texts grouped by bug (TestBuildsCorpus).
//
// It is a leaf: it imports nothing of this project and does no I/O, so the
// replay backends, the reduction and the regression writer all use the one
// Signature type and the one judgement of a replay (Judge).
package signature
