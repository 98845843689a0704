// Package torchtest finds the Python interpreter that has real PyTorch, for
// tests that compare reduce against it.
//
// The interpreter is $REDUCE_PYTHON when set, else the first of
// /usr/bin/python3 (Debian's, where python3-torch installs) and the python3
// on PATH that imports the modules asked for. A test that finds none is
// skipped, saying why, unless $REDUCE_REQUIRE_TORCH is set (make test sets
// it): then a missing torch is a broken setup and the test fails.
package torchtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

var probes struct {
	sync.Mutex
	done map[string]result // key: interpreter + modules
}

type result struct {
	python string
	why    string
}

// Python returns an interpreter that imports modules (default: torch), or
// skips (fails, under $REDUCE_REQUIRE_TORCH) t.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	if len(modules) == 0 {
		modules = []string{"torch"}
	}
	r := find(modules)
	if r.why != "" {
		if os.Getenv("REDUCE_REQUIRE_TORCH") != "" {
			t.Fatalf("%s (REDUCE_REQUIRE_TORCH is set)", r.why)
		}
		t.Skip(r.why)
	}
	return r.python
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
