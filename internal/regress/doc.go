// Package regress writes regression fixtures: a reduced batch as a
// directory <op>-<12 hex of sha256(batch.bin)> under --out, never
// overwriting one with other content and renamed into place whole, holding
// batch.bin, boundary.bin, fixture.json (a Record), report.md and a pytest
// file for the user's repository that replays it with real torch through
// reduce_batch.
//
// It owns the record's layout, the report's words (the cause, judged from
// what signature, kernels and the replays' traceback say: a misuse with
// the contract it breaks and the fix, a documented rule, the step's own
// exception; the first checks for each failure family; and, only for a
// finding whose inputs meet the op's contract as far as reduce can tell,
// an issue to paste into the op's tracker, with a snippet that rebuilds
// the minimal batch in torch and no path, user, host or sample id of the
// user's; no title or headline with a directory in it), the
// generated test, and Expect: what the built-in ops give on the CPU for a
// batch, which the record and the tests check. External text reaches
// generated code only as quoted literals.
//
// It never replays anything by itself: the reduction hands it what the
// replays showed. The committed fixtures under fixtures/regress are data;
// TestCommittedRegressions, one table-driven test, replays every one.
package regress
