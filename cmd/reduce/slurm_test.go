package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"reduce/internal/testenv"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestSlurmScript runs the scripts in testdata/slurm against a real Slurm
// cluster (scripts/slurm-local.sh start; make test-slurm): reductions with
// --launcher slurm, their faults, and the queue left empty. Without a
// cluster it skips, and fails instead under REDUCE_REQUIRE_SLURM
// (testenv.Slurm).
// The scripts check that squeue is empty after each reduction, so nothing
// else may use the cluster meanwhile: run it alone (go test -p 1).
func TestSlurmScript(t *testing.T) {
	testenv.Slurm(t)
	examples, err := filepath.Abs("../../fixtures/examples")
	if err != nil {
		t.Fatal(err)
	}
	python := os.Getenv("REDUCE_PYTHON")
	if python == "" {
		python = "/usr/bin/python3"
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/slurm",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("EXAMPLES", examples)
			env.Setenv("REDUCE_PYTHON", python)
			env.Setenv("SLURM_CONF", os.Getenv("SLURM_CONF"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":      cmdExits,
			"slurmjobs":  cmdSlurmJobs,
			"samereduce": cmdSameReduce,
		},
	})
}

// jsonEvents reads the --json events of a file.
func jsonEvents(ts *testscript.TestScript, file string) []map[string]any {
	var evs []map[string]any
	for _, l := range strings.Split(ts.ReadFile(file), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			ts.Fatalf("%s: %q: %v", file, l, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// cmdSlurmJobs is `slurmjobs FILE`: every replay event in FILE (a --json
// stdout) ran as a Slurm job of its own: launcher slurm, a job id no other
// replay has, a node.
func cmdSlurmJobs(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: slurmjobs FILE")
	}
	seen := map[string]bool{}
	for _, ev := range jsonEvents(ts, args[0]) {
		if ev["event"] != "replay" || ev["resumed"] == true {
			continue
		}
		id, _ := ev["job_id"].(string)
		if ev["launcher"] != "slurm" || id == "" || ev["node"] == nil {
			ts.Fatalf("replay %v did not run as a Slurm job", ev)
		}
		if seen[id] {
			ts.Fatalf("job %s ran two replays", id)
		}
		seen[id] = true
	}
	if len(seen) == 0 {
		ts.Fatalf("%s: no replay events", args[0])
	}
	ts.Logf("%d replays, each its own Slurm job", len(seen))
}

// cmdSameReduce is `samereduce A B`: the summaries of two --json runs found
// the same failure and the same culprits.
func cmdSameReduce(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: samereduce A B")
	}
	summary := func(file string) map[string]any {
		evs := jsonEvents(ts, file)
		if len(evs) == 0 || evs[len(evs)-1]["event"] != "summary" {
			ts.Fatalf("%s: no summary", file)
		}
		s := evs[len(evs)-1]
		return map[string]any{"signature": s["signature"], "mode": s["mode"], "culprits": s["culprits"], "size": s["size"]}
	}
	a, b := summary(args[0]), summary(args[1])
	// The fixture paths differ with --out.
	for _, s := range []map[string]any{a, b} {
		if cs, ok := s["culprits"].([]any); ok {
			for _, c := range cs {
				if m, ok := c.(map[string]any); ok {
					delete(m, "fixture")
				}
			}
		}
	}
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		ts.Fatalf("the reductions differ:\n%s: %s\n%s: %s", args[0], ja, args[1], jb)
	}
}
