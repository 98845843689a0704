package replay

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"reduce/fixtures"
	"reduce/internal/signature"
)

// plainPython is a Python for the exec tests' stdlib-only script.
func plainPython(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("REDUCE_PYTHON"), "/usr/bin/python3", "python3"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("no python3")
	return ""
}

func TestExecBackendFormats(t *testing.T) {
	t.Parallel()
	py := plainPython(t)
	script := filepath.Join(entryDir(t), "exec_reader.py")
	rest := keep([]int64{0, 1})
	for _, format := range []fixtures.Format{"", fixtures.FormatBin, fixtures.FormatNPZ, fixtures.FormatSafetensors} {
		t.Run("format="+string(format), func(t *testing.T) {
			tmp := t.TempDir()
			be := exampleBackend(t, Options{Kind: KindExec, Replay: shellQuote(py) + " " + shellQuote(script) + " {batch}",
				ReplayFormat: format, TempRoot: tmp}, "four_class_targets")
			v := replayOK(t, be, whole)
			if v.Signature.Family != signature.FamilyHostCheck || v.Signature.Expression != "IndexError: Target N is out of bounds." ||
				v.Signature.Class() != signature.ClassNLLTargetBounds || v.Backend != KindExec {
				t.Errorf("failing batch: %v\n%s", v.Signature, v.Result.Stderr)
			}
			v = replayOK(t, be, rest)
			ext := format
			if ext == "" {
				ext = "bin"
			}
			if v.Signature.Family != signature.FamilyPass || !bytes.Contains(v.Result.Stdout, []byte("exec_reader: "+ext+": 4 classes, targets [0, 2]")) {
				t.Errorf("passing subset: %v\nstdout %q\nstderr %s", v.Signature, v.Result.Stdout, v.Result.Stderr)
			}
			be.Close() // a fork server's files go with it (python3 runs warm where it imports torch)
			emptyDir(t, tmp)
		})
	}
}

// Exit status 86 is the user's command's own: a failure, not a harness one.
func TestExecBackendForeign86(t *testing.T) {
	t.Parallel()
	py := plainPython(t)
	be := exampleBackend(t, Options{Kind: KindExec, Replay: py + " " + filepath.Join(entryDir(t), "exec_reader.py") + " {batch} --exit 86"}, "four_class_targets")
	v := replayOK(t, be, whole)
	if v.Result.Harness || v.Result.ExitCode != HarnessExitCode || v.Signature.Family != signature.FamilyHostCheck || v.Signature.Expression != "exit status 86" {
		t.Errorf("exit 86: harness %v, exit %d, %v", v.Result.Harness, v.Result.ExitCode, v.Signature)
	}
}

// sh -c '...': {batch} goes in quoted for the shell, so a run directory with
// a blank in its path still works.
func TestExecBackendShell(t *testing.T) {
	t.Parallel()
	py := plainPython(t)
	tmp := filepath.Join(t.TempDir(), "with blank")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(entryDir(t), "exec_reader.py")
	be := exampleBackend(t, Options{Kind: KindExec, TempRoot: tmp,
		Replay: "sh -c " + shellQuote(shellQuote(py)+" "+shellQuote(script)+" {batch} 2>&1 | tail -n 1 >&2; exit 7")}, "four_class_targets")
	v := replayOK(t, be, whole)
	if v.Result.ExitCode != 7 || !bytes.Contains(v.Result.Stderr, []byte("IndexError: Target 4 is out of bounds.")) {
		t.Errorf("sh -c: exit %d, %v\nstderr %q", v.Result.ExitCode, v.Signature, v.Result.Stderr)
	}
	emptyDir(t, tmp)
}
