package replay

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"reduce/fixtures"
)

// PluginInstalled reports whether the interpreter the fixtures of b will
// run under has the package of this reduce installed as a distribution:
// its pytest plugin then collects them, and reduce writes no Python into
// --out. The interpreter is python (--python) when given, else the one
// that recorded b where b is the user's (mine: one a file from elsewhere
// names is never run, and asking it would run it), else python3 on PATH.
// Only the package's metadata is read (python -I: neither the working
// directory nor PYTHONPATH counts), within a few seconds; any failure is
// false.
func PluginInstalled(python string, b *fixtures.Batch, mine bool) bool {
	if exe := b.Meta[fixtures.MetaExecutable]; python == "" && mine && filepath.IsAbs(exe) {
		if _, err := os.Stat(exe); err == nil {
			python = exe
		}
	}
	if python == "" {
		python = "python3"
	}
	p, err := exec.LookPath(python)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "-I", "-c",
		"import importlib.metadata as m; print(m.version('reduce-batch'))").Output()
	return err == nil && strings.TrimSpace(string(out)) == Version
}
