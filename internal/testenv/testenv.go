// Package testenv says whether a test has what it needs from the machine:
// a Python with real PyTorch (Python), one with PyTorch Lightning too
// (PythonLightning), one with Hugging Face transformers too
// (PythonTransformers), ruff (Ruff), a Slurm cluster (Slurm). A test that
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
	RequireTorch     = "REDUCE_REQUIRE_TORCH"
	RequireSlurm     = "REDUCE_REQUIRE_SLURM"
	RequireLightning = "REDUCE_REQUIRE_LIGHTNING"
	RequireRuff      = "REDUCE_REQUIRE_RUFF"
	// RequireTransformers: make test's PyPI environment has transformers
	// (scripts/pypi-torch.txt); Debian's Python has not.
	RequireTransformers = "REDUCE_REQUIRE_TRANSFORMERS"
)

// lightningProbe imports torch and PyTorch Lightning by either of its
// package names (reduce_hooks.lightning_callback takes both).
const lightningProbe = "import torch\ntry:\n    import lightning.pytorch\nexcept ImportError:\n    import pytorch_lightning"

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

// PythonLightning returns an interpreter that imports torch and PyTorch
// Lightning (the lightning package or pytorch_lightning):
// $REDUCE_PYTHON_LIGHTNING when set, and then one that cannot is a failure
// (it was named for these tests); else the first of $REDUCE_PYTHON (or
// Python's defaults) that can. With none, t is skipped or, under
// REDUCE_REQUIRE_LIGHTNING, fails. Debian has no Lightning package: make
// test's default interpreter skips these tests.
func PythonLightning(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("REDUCE_PYTHON_LIGHTNING"); p != "" {
		r := probe("torch+lightning:"+p, lightningProbe, "torch and lightning", "pip install lightning", []string{p})
		if r.why != "" {
			t.Fatalf("REDUCE_PYTHON_LIGHTNING is set but %s", r.why)
		}
		return r.python
	}
	r := probe("torch+lightning", lightningProbe, "torch and lightning",
		"pip install lightning into a venv with torch, and set REDUCE_PYTHON_LIGHTNING or REDUCE_PYTHON", pythonCandidates())
	if r.why != "" {
		Missing(t, RequireLightning, r.why)
	}
	return r.python
}

// transformersProbe imports what a Hugging Face Trainer run needs, offline
// (reduce_hooks.record_trainer and trainer_step).
const transformersProbe = "import os\nos.environ['HF_HUB_OFFLINE'] = '1'\nimport torch\n" +
	"from transformers import Trainer, TrainingArguments, PreTrainedModel"

// PythonTransformers returns an interpreter that imports torch and Hugging
// Face transformers with its Trainer (and so accelerate): the first of
// $REDUCE_PYTHON (or Python's defaults) that can. With none, t is skipped
// or, under REDUCE_REQUIRE_TRANSFORMERS, fails. Debian has no transformers
// package: make test's default interpreter skips these tests.
func PythonTransformers(t testing.TB) string {
	t.Helper()
	return PythonProbed(t, RequireTransformers, transformersProbe, "torch and transformers' Trainer",
		"pip install transformers accelerate into a venv with torch, and set REDUCE_PYTHON")
}

// PythonProbed returns the first of $REDUCE_PYTHON (or Python's defaults)
// that runs code without an error (once per code and process); with none,
// t is skipped or, when the variable require is set, fails, naming what is
// missing and hint, how to get it.
func PythonProbed(t testing.TB, require, code, what, hint string) string {
	t.Helper()
	r := probe(require+"\x00"+code, code, what, hint, pythonCandidates())
	if r.why != "" {
		Missing(t, require, r.why)
	}
	return r.python
}

// Ruff returns the command that runs ruff (PyPI's Python linter), to which
// a test appends its arguments: $REDUCE_RUFF when set; else the first of
// the Python candidates (Python's) that has the ruff module, as `python -m
// ruff`; else ruff on PATH. With none, t is skipped or, under
// REDUCE_REQUIRE_RUFF, fails. Debian's Python has no ruff: make test's PyPI
// environment (scripts/pypi-torch.txt) has.
func Ruff(t testing.TB) []string {
	t.Helper()
	if r := os.Getenv("REDUCE_RUFF"); r != "" {
		return []string{r}
	}
	r := probe("ruff", "import ruff", "ruff", "pip install ruff, or set REDUCE_RUFF", pythonCandidates())
	if r.why == "" {
		return []string{r.python, "-m", "ruff"}
	}
	if path, err := exec.LookPath("ruff"); err == nil {
		return []string{path}
	}
	Missing(t, RequireRuff, r.why+"; no ruff on PATH")
	return nil
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
	return probe(key, "import "+key, key, "install Debian's python3-torch python3-numpy, or set REDUCE_PYTHON", pythonCandidates())
}

// pythonCandidates are the interpreters tried: $REDUCE_PYTHON alone when
// set, else Debian's and the python3 on PATH.
func pythonCandidates() []string {
	if p := os.Getenv("REDUCE_PYTHON"); p != "" {
		return []string{p}
	}
	return []string{"/usr/bin/python3", "python3"}
}

// probe returns the first of candidates that runs code without an error,
// once per key and process; what is the missing thing, hint how to get it,
// in the why.
func probe(key, code, what, hint string, candidates []string) result {
	probes.Lock()
	defer probes.Unlock()
	if probes.done == nil {
		probes.done = map[string]result{}
	}
	if r, ok := probes.done[key]; ok {
		return r
	}
	var whys []string
	r := result{}
	for _, c := range candidates {
		path, err := exec.LookPath(c)
		if err != nil {
			whys = append(whys, fmt.Sprintf("%s: not found", c))
			continue
		}
		out, err := exec.Command(path, "-c", code).CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			whys = append(whys, fmt.Sprintf("%s cannot import %s: %s", path, what, lines[len(lines)-1]))
			continue
		}
		r.python = path
		break
	}
	if r.python == "" {
		r.why = "no Python with " + what + " (" + hint + "): " + strings.Join(whys, "; ")
	}
	probes.done[key] = r
	return r
}
