// Package testenv says whether a test has what it needs from the machine:
// a Python with real PyTorch (Python), a Slurm cluster (Slurm). A test that
// finds it missing is skipped, saying why, unless the matching REDUCE_REQUIRE_
// variable has any non-empty value (make test sets them): then what is
// missing is a broken setup and the test fails. It is the one place that
// rule lives; tests only.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// The variables that turn a missing dependency into a failure.
const (
	RequireTorch = "REDUCE_REQUIRE_TORCH"
	RequireSlurm = "REDUCE_REQUIRE_SLURM"
)

// Missing ends t for want of something: it skips with why, or fails when
// the variable require has any non-empty value.
func Missing(t testing.TB, require, why string) {
	t.Helper()
	if os.Getenv(require) != "" {
		t.Fatalf("%s (%s is set: it must be there)", why, require)
	}
	t.Skip(why)
}

var probes struct {
	sync.Mutex
	done map[string]result // key: interpreter + modules
}

type result struct {
	python string
	why    string
}

// Python returns an interpreter that imports modules (default: torch):
// $REDUCE_PYTHON when set, else the first of /usr/bin/python3 (Debian's,
// where python3-torch installs) and the python3 on PATH that does. With
// none, t is skipped or, under REDUCE_REQUIRE_TORCH, fails.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	if len(modules) == 0 {
		modules = []string{"torch"}
	}
	r := find(modules)
	if r.why != "" {
		Missing(t, RequireTorch, r.why)
	}
	return r.python
}

// ScriptPython is Python for a testscript condition, where there is no
// testing.TB to skip: the interpreter that imports modules (default: torch)
// and true; with none, false (the script skips) or, under
// REDUCE_REQUIRE_TORCH, an error (the script fails).
func ScriptPython(modules ...string) (string, bool, error) {
	if len(modules) == 0 {
		modules = []string{"torch"}
	}
	r := find(modules)
	switch {
	case r.why == "":
		return r.python, true, nil
	case os.Getenv(RequireTorch) != "":
		return "", false, fmt.Errorf("%s (%s is set: it must be there)", r.why, RequireTorch)
	}
	return "", false, nil
}

// Slurm checks that a Slurm cluster is there for t: REDUCE_SLURM set (to
// any non-empty value; scripts/slurm-local.sh start, with its SLURM_CONF)
// and srun on PATH. Without, t is skipped or, under REDUCE_REQUIRE_SLURM,
// fails.
func Slurm(t testing.TB) {
	t.Helper()
	if os.Getenv("REDUCE_SLURM") == "" {
		Missing(t, RequireSlurm, "no Slurm cluster: scripts/slurm-local.sh start, then REDUCE_SLURM=1 and its SLURM_CONF")
		return
	}
	if _, err := exec.LookPath("srun"); err != nil {
		t.Fatalf("REDUCE_SLURM is set but: %v", err)
	}
}

func find(modules []string) result {
	key := strings.Join(modules, ",")
	probes.Lock()
	defer probes.Unlock()
	if probes.done == nil {
		probes.done = map[string]result{}
	}
	if r, ok := probes.done[key]; ok {
		return r
	}
	candidates := []string{"/usr/bin/python3", "python3"}
	if p := os.Getenv("REDUCE_PYTHON"); p != "" {
		candidates = []string{p}
	}
	var whys []string
	r := result{}
	for _, c := range candidates {
		path, err := exec.LookPath(c)
		if err != nil {
			whys = append(whys, fmt.Sprintf("%s: not found", c))
			continue
		}
		out, err := exec.Command(path, "-c", "import "+key).CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			whys = append(whys, fmt.Sprintf("%s cannot import %s: %s", path, key, lines[len(lines)-1]))
			continue
		}
		r.python = path
		break
	}
	if r.python == "" {
		r.why = "no Python with " + key + " (install Debian's python3-torch python3-numpy, or set REDUCE_PYTHON): " + strings.Join(whys, "; ")
	}
	probes.done[key] = r
	return r
}
