package signature

import (
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// FuzzParse: Parse never panics, is deterministic, and gives a known family
// whose signature matches itself; Normalize and Class never panic and
// Normalize is idempotent on valid UTF-8.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "stderr", "*.txt"))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		c, err := parseCorpusFile(data)
		if err != nil {
			f.Fatalf("%s: %v", p, err)
		}
		f.Add(c.stderr, c.exit.Code, c.exit.Signal, c.exit.TimedOut, c.exit.Harness)
	}
	f.Add([]byte("x:1: : block: [0,0,0], thread: [0,0,0] Assertion `` failed."), 1, 0, false, false)
	f.Add([]byte("Traceback (most recent call last):\n"), 1, 0, false, false)
	f.Add([]byte("terminate called after throwing an instance of 'x'\n"), -1, 6, false, false)
	known := map[Family]bool{}
	for _, fam := range Families() {
		known[fam] = true
	}
	f.Fuzz(func(t *testing.T, stderr []byte, code, signal int, timedOut, harness bool) {
		exit := ExitInfo{Code: code, Signal: signal, TimedOut: timedOut, Harness: harness}
		s := Parse(stderr, exit)
		if !known[s.Family] {
			t.Fatalf("unknown family %q", s.Family)
		}
		if again := Parse(stderr, exit); again != s {
			t.Fatalf("not deterministic: %v then %v", s, again)
		}
		if !s.Matches(s, MatchStrict) {
			t.Fatalf("%v does not match itself", s)
		}
		_ = s.Class()
		_ = s.String()
		// Normalize is for one line; give it a bounded prefix.
		line := string(stderr[:min(len(stderr), 4096)])
		n := Normalize(line)
		if utf8.ValidString(line) && Normalize(n) != n {
			t.Fatalf("Normalize not idempotent: %q → %q → %q", line, n, Normalize(n))
		}
	})
}
