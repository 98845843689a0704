package replay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/signature"
	"reduce/internal/testenv"
)

// warmPair is an exec backend for cmd run warm (a fork server) and one run
// cold (--no-zygote), both bound to the four_class_targets example, with
// the notices each gave.
func warmPair(t *testing.T, o Options) (warm, cold Backend, notices []string) {
	t.Helper()
	var mu sync.Mutex
	o.Kind = KindExec
	o.Notice = func(msg string) { mu.Lock(); notices = append(notices, msg); mu.Unlock() }
	warm = exampleBackend(t, o, "four_class_targets")
	o.NoZygote = true
	cold = exampleBackend(t, o, "four_class_targets")
	return warm, cold, notices
}

// A Python --replay command gives the same verdicts warm and cold, and sees
// the same argv, working directory, environment, sys.path and __main__.
func TestExecWarmMatchesCold(t *testing.T) {
	py := testenv.Python(t, "torch")
	dir := filepath.Join(entryDir(t), "warm")
	t.Chdir(dir) // the commands' working directory is the reducer's
	for _, mode := range []string{"ok", "index", "exit3", "abort", "env", "sibling"} {
		t.Run(mode, func(t *testing.T) {
			tmp := t.TempDir()
			warm, cold, notices := warmPair(t, Options{Replay: py + " -u step.py " + mode + " {batch}", TempRoot: tmp,
				Env: []string{"WARM_TEST=yes"}, Timeout: time.Minute})
			assert.Empty(t, notices)
			w, c := replayOK(t, warm, whole), replayOK(t, cold, whole)
			assert.True(t, w.Zygote, "warm replay forked")
			assert.False(t, c.Zygote)
			assert.Equal(t, c.Signature, w.Signature, "cold stderr:\n%s\nwarm stderr:\n%s", c.Result.Stderr, w.Result.Stderr)
			assert.Equal(t, c.Exit, w.Exit)
			assert.Equal(t, KindExec, w.Backend)
			switch mode {
			case "ok", "sibling", "env":
				assert.Equal(t, signature.FamilyPass, w.Signature.Family, "%s", w.Result.Stderr)
				assert.Equal(t, string(c.Result.Stdout), string(w.Result.Stdout))
			case "index":
				assert.Equal(t, "IndexError: Target N is out of bounds.", w.Signature.Expression)
				// The traceback is the interpreter's, frame for frame.
				assert.Equal(t, string(c.Result.Stderr), string(w.Result.Stderr))
			case "exit3":
				assert.Equal(t, 3, w.Result.ExitCode)
			case "abort":
				assert.Equal(t, signature.FamilyAbortSignal, w.Signature.Family)
			}
			if mode == "env" {
				var seen map[string]any
				require.NoError(t, json.Unmarshal(w.Result.Stdout, &seen), "%s", w.Result.Stdout)
				assert.Equal(t, []any{"step.py", "env", "{rundir}/batch.bin"}, seen["argv"])
				assert.Equal(t, dir, seen["cwd"])
				assert.Equal(t, "yes", seen["warm_test"])
				assert.Equal(t, dir, seen["path"].([]any)[0])
				assert.Equal(t, "env", seen["main"])
			}
			require.NoError(t, warm.Close()) // its fork server's files go too
			emptyDir(t, tmp)
		})
	}
}

// python -m pkg.mod: run as -m runs it (sys.path[0] the working directory,
// argv[0] the module's file, the same traceback).
func TestExecWarmModule(t *testing.T) {
	py := testenv.Python(t, "torch")
	t.Chdir(filepath.Join(entryDir(t), "warm"))
	for _, extra := range []string{"", " index"} {
		warm, cold, notices := warmPair(t, Options{Replay: py + " -m pkg.mod {batch}" + extra, TempRoot: t.TempDir()})
		assert.Empty(t, notices)
		w, c := replayOK(t, warm, whole), replayOK(t, cold, whole)
		assert.True(t, w.Zygote)
		assert.Equal(t, c.Signature, w.Signature)
		assert.Equal(t, string(c.Result.Stdout), string(w.Result.Stdout))
		assert.Equal(t, string(c.Result.Stderr), string(w.Result.Stderr))
	}
}

// A command the fork server cannot run as the interpreter would runs cold,
// and says why once.
func TestExecWarmFallback(t *testing.T) {
	py := testenv.Python(t, "torch")
	t.Chdir(filepath.Join(entryDir(t), "warm"))
	noTorch := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(noTorch, "torch.py"), []byte("raise ImportError('no torch here')\n"), 0o644))
	for _, tc := range []struct {
		name, replay string
		env          []string
		want         string
	}{
		{"shell", "sh -c " + shellQuote(py+" step.py ok {batch}"), nil, "sh is not a Python interpreter"},
		{"not python", "env " + py + " step.py ok {batch}", nil, "env is not a Python interpreter"},
		{"-c", py + " -c 'import sys; print(sys.argv)' {batch}", nil, "python -c runs no script file"},
		{"option", py + " -X dev step.py ok {batch}", nil, "interpreter option -X is not one the fork server can honour"},
		{"isolated", py + " -I step.py ok {batch}", nil, "interpreter option -I"},
		{"no torch", py + " step.py ok {batch}", []string{"PYTHONPATH=" + noTorch}, py + " cannot import torch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var notices []string
			be := exampleBackend(t, Options{Kind: KindExec, Replay: tc.replay, Env: tc.env, Notice: func(m string) { notices = append(notices, m) }}, "four_class_targets")
			require.Len(t, notices, 1)
			assert.Contains(t, notices[0], "--replay runs cold")
			assert.Contains(t, notices[0], tc.want)
			v := replayOK(t, be, whole)
			assert.False(t, v.Zygote)
			replayOK(t, be, whole)
			assert.Len(t, notices, 1, "said once")
		})
	}
	// --warm-import with a command that cannot run warm, or a module that
	// cannot be imported: errors, not notes.
	b := exampleBatch(t, "four_class_targets")
	_, err := New(Options{Batch: b, Kind: KindExec, Replay: "sh -c 'true {batch}'", WarmImport: []string{"json"}})
	assert.ErrorContains(t, err, "--warm-import: the --replay command cannot run warm: sh is not a Python interpreter")
	_, err = New(Options{Batch: b, Kind: KindExec, Replay: py + " step.py ok {batch}", WarmImport: []string{"no_such_module_here"}})
	assert.ErrorContains(t, err, "--warm-import no_such_module_here: cannot import it")
	be := newBackend(t, Options{Kind: KindExec, Replay: py + " step.py sibling {batch}", WarmImport: []string{"sibling_helper"}}, b)
	v := replayOK(t, be, whole)
	assert.True(t, v.Zygote)
	assert.Contains(t, string(v.Result.Stdout), "sibling 42 True")
}

// How a command line is read (no interpreter started).
func TestPythonProgramOf(t *testing.T) {
	script := filepath.Join(entryDir(t), "warm", "step.py")
	for _, tc := range []struct {
		argv   []string
		module bool
		target string
		args   []string
		why    string
	}{
		{argv: []string{"python3", script, "x"}, target: script, args: []string{script, "x"}},
		{argv: []string{"/usr/bin/python3.11", "-u", "-B", script}, target: script, args: []string{script}},
		{argv: []string{"python", "-uB", script, "-c"}, target: script, args: []string{script, "-c"}},
		{argv: []string{"python", "-m", "pkg.mod", "a"}, module: true, target: "pkg.mod", args: []string{"-m", "a"}},
		{argv: []string{"python", "-um", "pkg.mod"}, module: true, target: "pkg.mod", args: []string{"-m"}},
		{argv: []string{"python", "-mpkg.mod", "b"}, module: true, target: "pkg.mod", args: []string{"-m", "b"}},
		{argv: []string{"python", "-c", "x"}, why: "python -c runs no script file"},
		{argv: []string{"python", "-", "x"}, why: "standard input"},
		{argv: []string{"python", "-W", "error", script}, why: "-W is not one"},
		{argv: []string{"python", "--version"}, why: "--version is not one"},
		{argv: []string{"python", "-u"}, why: "runs no script"},
		{argv: []string{"python", "-m"}, why: "-m names no module"},
		{argv: []string{"python", "no/such/step.py"}, why: "the script no/such/step.py is not a file"},
		{argv: []string{"pythonw", script}, why: "not a Python interpreter"},
		{argv: []string{"bash", script}, why: "bash is not a Python interpreter"},
	} {
		p, why := pythonProgramOf(tc.argv, tc.argv[1:], "batch.bin")
		if tc.why != "" {
			assert.Contains(t, why, tc.why, "%q", tc.argv)
			assert.Nil(t, p)
			continue
		}
		if assert.Empty(t, why, "%q", tc.argv) {
			assert.Equal(t, tc.module, p.module, "%q", tc.argv)
			assert.Equal(t, tc.target, p.target, "%q", tc.argv)
			assert.Equal(t, tc.args, p.argv, "%q", tc.argv)
		}
	}
}

// A warm replay that times out is the supervisor's as any other: SIGINT
// (ignored), SIGKILL of its process group (the child it started too), a
// timeout verdict, nothing left behind; the fork server lives on.
func TestExecWarmTimeout(t *testing.T) {
	py := testenv.Python(t, "torch")
	t.Chdir(filepath.Join(entryDir(t), "warm"))
	tmp := t.TempDir()
	be := exampleBackend(t, Options{Kind: KindExec, Replay: py + " step.py hang {batch}", TempRoot: tmp,
		Timeout: 3 * time.Second, Grace: 300 * time.Millisecond}, "four_class_targets")
	v := replayOK(t, be, whole)
	assert.True(t, v.Zygote)
	assert.True(t, v.Result.TimedOut)
	assert.Equal(t, signature.FamilyTimeout, v.Signature.Family, "%s", v.Result.Stderr)
	pids := []int{v.Result.PID}
	for _, line := range strings.Split(string(v.Result.Stdout), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "child" {
			pid, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			pids = append(pids, pid)
		}
	}
	require.Len(t, pids, 2, "stdout %q", v.Result.Stdout)
	assert.Empty(t, leftover(pids, 5*time.Second))
	z := be.(*execBackend).warm.z
	assert.False(t, slices.Contains(pids, z.pid) || processGone(z.pid), "the fork server lives on")
	require.NoError(t, be.Close())
	emptyDir(t, tmp)
}
