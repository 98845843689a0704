package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/testenv"
	"reduce/internal/trust"
	"reduce/replay"
)

func TestMain(m *testing.M) {
	// The go backend re-executes os.Executable(), the test binary here, as
	// its worker.
	if len(os.Args) > 1 && os.Args[1] == replay.WorkerCommand {
		os.Exit(replay.Worker(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	}
	// The tests' own trust store: what the recorders they run and their
	// reduce record as the user's stays with them (testscripts have one
	// each: TestScript).
	if os.Getenv(trust.StoreEnv) == "" {
		store, err := os.MkdirTemp("", "reduce-trust-")
		if err != nil {
			panic(err)
		}
		os.Setenv(trust.StoreEnv, store)
		testStore = store
	}
	// The project's own recordings, committed (fixtures/examples): the
	// tests' user allowed them, as a clone's user does with reduce trust (a
	// commit is no proof for a batch file).
	if err := trustExamples(); err != nil {
		panic(err)
	}
	testscript.Main(removingBinary{m}, map[string]func(){
		"reduce": func() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) },
	})
}

// removingBinary runs the tests, then removes the reduce binary that
// reduceBinary built for them, if any.
type removingBinary struct{ m *testing.M }

// testStore is the trust store TestMain made for the tests, removed with the
// binary.
var testStore string

func (r removingBinary) Run() int {
	code := r.m.Run()
	if testStore != "" {
		os.RemoveAll(testStore)
	}
	if benchBin != "" {
		os.RemoveAll(filepath.Dir(benchBin))
	}
	testenv.RemoveReduceBinary()
	return code
}

// TestScript runs the end-to-end scripts in testdata/script: the real main,
// as a user types it. $EXAMPLES is fixtures/examples, $BAD the corpus of
// malformed batch files in fixtures/testdata/bad.
func TestScript(t *testing.T) {
	examples, err := filepath.Abs("../../fixtures/examples")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := filepath.Abs("../../fixtures/testdata/bad")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			// Each script's own trust store: what its recorder and its
			// reduce record as the user's, and nothing else.
			env.Setenv(trust.StoreEnv, filepath.Join(env.WorkDir, ".trust"))
			env.Setenv("EXAMPLES", examples)
			env.Setenv("BAD", bad)
			if python, ok, _ := testenv.ScriptPython("torch"); ok {
				env.Setenv("PYTHON", python)
			}
			return nil
		},
		// [torch]: a Python with torch is there ($PYTHON); without, a
		// script that needs it skips, or fails under REDUCE_REQUIRE_TORCH.
		Condition: func(cond string) (bool, error) {
			if cond != "torch" {
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			_, ok, err := testenv.ScriptPython("torch")
			return ok, err
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":   cmdExits,
			"nodups":  cmdNoDups,
			"dropop":  cmdDropOp,
			"record":  cmdRecord,
			"failall": cmdFailAll,
		},
	})
}

// cmdDropOp is the script command `dropop IN OUT`: it writes the batch IN
// without its op and attributes, as a batch recorded for a step of the
// user's own is.
func cmdDropOp(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: dropop IN OUT")
	}
	b, err := fixtures.Read(ts.MkAbs(args[0]))
	ts.Check(err)
	b.Op, b.Attrs = "", nil
	ts.Check(fixtures.Write(ts.MkAbs(args[1]), b))
}

// cmdRecord is the script command `record IN OUT TEXT`: it writes the
// batch IN with TEXT as its recorded failure, as the recorder keeps an
// exception's text.
func cmdRecord(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: record IN OUT TEXT")
	}
	b, err := fixtures.Read(ts.MkAbs(args[0]))
	ts.Check(err)
	b.Error = &fixtures.Failure{Text: args[2]}
	ts.Check(fixtures.Write(ts.MkAbs(args[1]), b))
}

// cmdFailAll is the script command `failall JOURNAL`: it edits the journal
// of a reduction so that every answer in it says the candidate fails as the
// header wants (and reported nothing), as a journal that does not hold.
func cmdFailAll(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: failall JOURNAL")
	}
	lines := strings.Split(strings.TrimSpace(ts.ReadFile(args[0])), "\n")
	var head map[string]json.RawMessage
	ts.Check(json.Unmarshal([]byte(lines[0]), &head))
	for i := 1; i < len(lines); i++ {
		var e map[string]json.RawMessage
		ts.Check(json.Unmarshal([]byte(lines[i]), &e))
		e["signature"] = head["want"]
		delete(e, "report")
		line, err := json.Marshal(e)
		ts.Check(err)
		lines[i] = string(line)
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
}

// cmdExits is the script command `exits CODE PROG ARGS...`: it runs PROG
// like exec and fails unless it exits with CODE. stdout and stderr are kept
// for the commands after it.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad code %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit status %d, want %d", got, want)
	}
}

// cmdNoDups is the script command `nodups FILE [N]`: it fails when more
// than N lines of FILE (default 0) repeat an earlier one (a candidate
// replayed twice, in the resume scripts), or when FILE is empty.
func cmdNoDups(ts *testscript.TestScript, neg bool, args []string) {
	allowed := 0
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		ts.Check(err)
		allowed, args = n, args[:1]
	}
	if neg || len(args) != 1 {
		ts.Fatalf("usage: nodups FILE [N]")
	}
	lines := strings.Fields(ts.ReadFile(args[0]))
	if len(lines) == 0 {
		ts.Fatalf("nodups: %s is empty", args[0])
	}
	seen := map[string]int{}
	for i, l := range lines {
		if j, ok := seen[l]; ok {
			if allowed--; allowed < 0 {
				ts.Fatalf("nodups: line %d repeats line %d: %s", i+1, j+1, l)
			}
			continue
		}
		seen[l] = i
	}
}

// trustExamples records fixtures/examples' batch files as allowed in the
// tests' trust store (`reduce trust fixtures/examples/*.bin`).
func trustExamples() error {
	store, err := trust.DefaultStore()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "fixtures", "examples", "*.bin"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, err := regress.Allow(store, f, false); err != nil {
			return fmt.Errorf("trust %s: %w", f, err)
		}
	}
	return nil
}
