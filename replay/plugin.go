package replay

import (
	"context"
	"os/exec"
	"strings"
	"time"
)

// PluginInstalled reports whether python (looked up in $PATH; "" is
// python3) has the package of this reduce installed as a distribution:
// its pytest plugin then collects the fixtures, and reduce writes no Python
// into --out. Only the package's metadata is read (python -I: neither the
// working directory nor PYTHONPATH counts), within a few seconds; any
// failure is false.
func PluginInstalled(python string) bool {
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
