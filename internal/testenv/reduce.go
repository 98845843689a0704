package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// BinaryEnv names the reduce executable that judges a fixture's runs for
// the pytest plugin (reduce_batch.plugin.reduce_executable).
const BinaryEnv = "REDUCE_BINARY"

var reduceBin struct {
	once      sync.Once
	path, dir string
	err       error
}

// ReduceBinary is a reduce executable built from this module, once per test
// process, for the pytest runs of fixtures (their plugin asks it to judge
// each run): $REDUCE_BINARY where the caller names one (make test's
// bin/reduce). RemoveReduceBinary, from TestMain, removes what it built.
func ReduceBinary(t testing.TB) string {
	t.Helper()
	if named := os.Getenv(BinaryEnv); named != "" {
		return named
	}
	reduceBin.once.Do(func() {
		reduceBin.dir, reduceBin.err = os.MkdirTemp("", "reduce-bin-")
		if reduceBin.err != nil {
			return
		}
		reduceBin.path = filepath.Join(reduceBin.dir, "reduce")
		if out, err := exec.Command("go", "build", "-o", reduceBin.path, "reduce/cmd/reduce").CombinedOutput(); err != nil {
			reduceBin.err = fmt.Errorf("go build reduce/cmd/reduce: %v\n%s", err, out)
		}
	})
	if reduceBin.err != nil {
		t.Fatal(reduceBin.err)
	}
	return reduceBin.path
}

// RemoveReduceBinary removes the executable ReduceBinary built, if any.
func RemoveReduceBinary() {
	if reduceBin.dir != "" {
		os.RemoveAll(reduceBin.dir)
	}
}
