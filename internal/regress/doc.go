// Package regress writes regression fixtures: a reduced batch as a
// directory <op>-<12 hex of sha256(batch.bin)> under --out, never
// overwriting one with other content and renamed into place whole, holding
// batch.bin, boundary.bin, fixture.json (a Record), report.md and a pytest
// file for the user's repository that replays it with real torch through
// reduce_batch.
//
// It owns the record's layout, the report's words (the first checks for
// each failure family, and for a finding whose inputs look valid an issue
// to paste into the op's tracker, with a snippet that rebuilds the minimal
// batch in torch and no path, user, host or sample id of the user's), the
// generated test, and Expect: what the built-in ops give on the CPU for a
// batch, which the record and the tests check. External text reaches
// generated code only as quoted literals.
//
// It never replays anything by itself: the reduction hands it what the
// replays showed. The committed fixtures under fixtures/regress are data;
// TestCommittedRegressions, one table-driven test, replays every one.
package regress
