// Package regress writes regression fixtures: a reduced batch as a
// directory <op>-<12 hex of the sha256 of its identity> under --out, never
// overwriting one with other content and renamed into place whole. A
// fixture is data: batch.bin, boundary.bin and the neighbours, fixture.json
// (a Record, with the status the user sets to fixed: MarkFixed) and
// report.md. One collector turns every fixture under --out into pytest
// tests: the conftest.py that WriteCollector keeps at its root, from the
// bytes it is given (replay.CollectorModule), never over a conftest.py that
// is not reduce's.
//
// It owns the record's layout, what the collector compares with the
// minimal batch's failure (the exception, and its message or a pattern),
// the report's words (the cause, judged from what signature, kernels and
// the replays' traceback say: a misuse with the contract it breaks and the
// fix, a documented rule, the step's own exception; the first checks for
// each failure family; and, only for a finding whose inputs meet the op's
// contract as far as reduce can tell, an issue to paste into the op's
// tracker, with a snippet that rebuilds the minimal batch in torch and no
// path, user, host or sample id of the user's; no title or headline with a
// directory in it), and Expect: what the built-in ops give on the CPU for a
// batch, which the record and the tests check.
//
// It never replays anything by itself: the reduction hands it what the
// replays showed. The committed fixtures under fixtures/regress are data;
// TestCommittedRegressions, one table-driven test, replays every one.
package regress
