package regress

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/testenv"
	"reduce/internal/trust"
	"reduce/replay"
)

// markerStep is a step of the user's, or of someone else's, whose running
// leaves a marker file: cross_entropy of the batch, as the example records.
func markerStep(marker string) []byte {
	return []byte("import torch.nn.functional as F\n\n\ndef step(batch, state=None):\n" +
		"    open(" + strconv.Quote(marker) + ", 'w').close()\n" +
		"    data = getattr(batch, 'tensors', batch)\n" +
		"    return F.cross_entropy(data['input'], data['target'])\n")
}

// stepRegression is the example's reduction recorded for a step instead of
// its op: the step stepModule:step of file.
func stepRegression(t *testing.T, module, qualname, file string) *Regression {
	reg := exampleRegression(t, nil)
	step := &fixtures.Step{Module: module, Qualname: qualname, File: file, Cwd: filepath.Dir(file)}
	for _, b := range []*fixtures.Batch{reg.Batch, reg.Boundary} {
		b.Op, b.Attrs, b.Step = "", nil, step
	}
	reg.Record.Op, reg.Record.Attrs, reg.Record.Step = "", nil, module+":"+qualname
	reg.Record.Boundary.Outputs = nil
	return reg
}

// editRecord rewrites the fixture.json of dir through edit.
func editRecord(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, RecordFile)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(data, &rec))
	edit(rec)
	data, err = json.MarshalIndent(rec, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

// TestCollectorFromElsewhere: a fixture directory is data. One from
// someone else (not in the user's trust store, not committed in the
// repository pytest runs in) runs nothing it names: not its command, not
// an --entry shipped inside it, not the step its batches record (one of
// the repository's own too); its tests fail saying what it would run and
// how to allow it. It names no file outside its own directory, and no
// link; a Python file in it is never imported. A fixture of a built-in op
// names nothing, and runs as data. Allowed (reduce trust), or committed,
// it runs; a function of reduce's own never does.
func TestCollectorFromElsewhere(t *testing.T) {
	testenv.Python(t, "torch", "pytest")
	t.Setenv(trust.StoreEnv, filepath.Join(t.TempDir(), "store"))
	work := t.TempDir()
	root := filepath.Join(work, "repo")
	writeCollector(t, root)
	marker := func(name string) string { return filepath.Join(work, "marker-"+name) }
	mystep := filepath.Join(root, "mystep.py")
	require.NoError(t, os.WriteFile(mystep, markerStep(marker("step")), 0o644))
	write := func(scenario string, reg *Regression) string {
		dir, err := Write(filepath.Join(root, scenario), reg)
		require.NoError(t, err)
		return dir
	}

	write("op", exampleRegression(t, nil))
	// An older layout, whose message suggests a command with a name the
	// record gives: quoted for the shell a user pastes it into.
	old := filepath.Join(root, "old", "cross_entropy-0123456789ab")
	require.NoError(t, os.MkdirAll(old, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(old, RecordFile), []byte(`{"version": 1, "source": {"file": "x.bin; touch PWNED"}}`), 0o644))
	// A record of another shape than reduce writes: one failing item, and
	// the session goes on.
	shape := write("shape", exampleRegression(t, nil))
	editRecord(t, shape, func(r map[string]any) { r["boundary"], r["neighbours"] = map[string]any{"x": 1}, []any{1} })
	// A pattern that backtracks for ever on the message the batch raises:
	// never run (reduce judges a run by the signature), the test ends.
	redos := exampleRegression(t, nil)
	redos.Record.CPU.Message = ""
	redos.Record.Signature.Expression = "IndexError: Target N is out of bounds."
	dir := write("redos", redos)
	editRecord(t, dir, func(r map[string]any) { r["message_pattern"] = `^(\w+\s?)*$!` })
	exe := exampleRegression(t, nil)
	exe.Batch.Op, exe.Boundary.Op, exe.Record.Op, exe.Record.Boundary.Outputs = "", "", "", nil
	exe.Record.ReplayArgs = []string{"sh", "-c", "touch " + marker("command") + "; exit 1", "{batch}"}
	write("command", exe)
	entry := write("entry", exampleRegression(t, nil))
	require.NoError(t, os.WriteFile(filepath.Join(entry, "helper.py"), markerStep(marker("entry")), 0o644))
	editRecord(t, entry, func(r map[string]any) { r["entry"] = filepath.Join(entry, "helper.py") + ":step" })
	write("step", stepRegression(t, "mystep", "step", mystep))
	// fixture.json says op, the batch says step: the step counts.
	opstep := write("opstep", stepRegression(t, "mystep", "step", mystep))
	editRecord(t, opstep, func(r map[string]any) { r["op"], r["step"] = "cross_entropy", "" })
	for name, file := range map[string]string{"parent": "../../../crash.bin", "absolute": "/etc/passwd"} {
		dir := write(name, exampleRegression(t, nil))
		editRecord(t, dir, func(r map[string]any) { r["boundary"].(map[string]any)["file"] = file })
	}
	link := write("linkbatch", exampleRegression(t, nil))
	require.NoError(t, os.Remove(filepath.Join(link, BatchFile)))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(link, BatchFile)))
	for _, name := range []string{"conftest.py", "__init__.py"} {
		dir := write(strings.TrimSuffix(strings.Trim(name, "_"), ".py"), exampleRegression(t, nil))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("open("+strconv.Quote(marker(name))+", 'w').close()\n"), 0o644))
	}
	// __main__:save in the file reduce_batch.py: the repository's vendored
	// recorder, whose save(path, batch) writes where the batch says.
	vendored := filepath.Join(root, "reduce_batch.py")
	require.NoError(t, os.WriteFile(vendored, replay.PythonModule, 0o644))
	save := write("save", stepRegression(t, "__main__", "save", vendored))

	env := []string{"REDUCE_BATCH_PATH=" + vendoredModule(t)}
	res, out := collectorIn(t, env, root)
	if testing.Verbose() {
		t.Log(out)
	}
	want := map[string]string{
		"op/minimal_batch":               "XFAIL",
		"op/passing_batch[boundary.bin]": "PASSED",
		"command/fixture":                "FAILED",
		"entry/fixture":                  "FAILED",
		"step/fixture":                   "FAILED",
		"opstep/fixture":                 "FAILED",
		"parent/fixture":                 "FAILED",
		"absolute/fixture":               "FAILED",
		"linkbatch/fixture":              "FAILED",
		"save/fixture":                   "FAILED",
		"redos/minimal_batch":            "XFAIL",
		"old/fixture":                    "FAILED",
		"shape/fixture":                  "FAILED",
	}
	for k, v := range want {
		assert.Equal(t, v, res[k], "%s\n%s", k, out)
	}
	for _, k := range []string{"conftest/minimal_batch", "init/minimal_batch"} {
		assert.NotContains(t, res, k, "a fixture directory holding %s is not collected", k)
	}
	for _, name := range []string{"command", "entry", "step", "conftest.py", "__init__.py"} {
		assert.NoFileExists(t, marker(name), "it ran")
	}
	assert.Contains(t, out, "not run: the fixture names code, and command/")
	assert.Contains(t, out, "Its tests would run the command sh -c 'touch ")
	assert.Contains(t, out, "then allow it once with `reduce trust command/")
	assert.Contains(t, out, "Its tests would run the --entry function "+filepath.Join(entry, "helper.py")+":step")
	assert.Contains(t, out, "Its tests would run the step mystep:step")
	assert.Contains(t, out, `names the batch file '../../../crash.bin': a fixture names files of its own folder only`)
	assert.Contains(t, out, `names the batch file '/etc/passwd'`)
	assert.NotContains(t, out, "root:x:0", "nothing of a file outside the fixture reaches the report")
	assert.Contains(t, out, "batch.bin is not a regular file")
	assert.Contains(t, out, "holds conftest.py: not collected")
	assert.Contains(t, out, "regenerate it with `reduce --batch 'x.bin; touch PWNED' --out old`")
	assert.NotContains(t, out, " ERROR", "no collection error")
	assert.NotContains(t, out, "Interrupted", "the session went on")
	assert.Contains(t, out, "not a fixture this collector can read")

	// The user reads what they run and allows them: they run.
	store, err := trust.DefaultStore()
	require.NoError(t, err)
	for _, name := range []string{"command", "entry", "step", "save"} {
		dirs, err := filepath.Glob(filepath.Join(root, name, "*"))
		require.NoError(t, err)
		require.Len(t, dirs, 1)
		said, err := Allow(store, dirs[0], false)
		require.NoError(t, err)
		assert.Contains(t, said, "allowed: it runs ", name)
	}
	res, out = collectorIn(t, env, root)
	for k, v := range map[string]string{
		"entry/minimal_batch": "XFAIL", "step/minimal_batch": "XFAIL", "save/minimal_batch": "FAILED",
	} {
		assert.Equal(t, v, res[k], "%s\n%s", k, out)
	}
	for _, name := range []string{"command", "entry", "step"} {
		assert.FileExists(t, marker(name), "allowed, it runs")
	}
	assert.Contains(t, out, "its file reduce_batch.py is reduce's own, and reduce's own functions are never a step")
	_, err = os.Stat(save)
	require.NoError(t, err)
	assert.NoFileExists(t, filepath.Join(save, "input"), "save() wrote nothing")

	// Committed in the repository pytest runs in, with no store: it runs.
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	t.Setenv(trust.StoreEnv, filepath.Join(t.TempDir(), "empty"))
	require.NoError(t, os.Remove(marker("step")))
	gitCommit(t, root)
	res, out = collectorIn(t, env, root)
	assert.Equal(t, "XFAIL", res["step/minimal_batch"], out)
	assert.FileExists(t, marker("step"), "committed, it runs")
}

// collectorIn is collectorResults with pytest run in dir, on its fixtures,
// as a user runs it in their repository (pytest's root directory).
func collectorIn(t *testing.T, env []string, dir string) (map[string]string, string) {
	t.Helper()
	py := testenv.Python(t, "torch", "pytest")
	cmd := exec.Command(py, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", ".")
	cmd.Dir, cmd.Env = dir, append(append(os.Environ(), testenv.BinaryEnv+"="+testenv.ReduceBinary(t)), env...)
	out, _ := cmd.CombinedOutput()
	res := map[string]string{}
	re := regexp.MustCompile(`(?m)^(\S+)/fixture\.json::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		res[filepath.Base(filepath.Dir(m[1]))+"/"+m[2]] = m[3]
	}
	return res, string(out)
}

// gitCommit commits every file under dir in a repository made there.
func gitCommit(t *testing.T, dir string) {
	t.Helper()
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "fixtures"}} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
}

func TestReadFixture(t *testing.T) {
	root := t.TempDir()
	dir, err := Write(root, exampleRegression(t, nil))
	require.NoError(t, err)
	f, err := ReadFixture(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{RecordFile, BatchFile, BoundaryFile}, f.Files)
	runs, err := f.Runs()
	require.NoError(t, err)
	assert.Empty(t, runs, "a built-in op's fixture runs nothing of its own")

	for name, file := range map[string]string{"parent": "../x.bin", "absolute": "/etc/passwd", "hidden": ".x.bin", "nested": "a/b.bin"} {
		editRecord(t, dir, func(r map[string]any) { r["boundary"].(map[string]any)["file"] = file })
		_, err := ReadFixture(dir)
		assert.ErrorContains(t, err, "a fixture names files of its own directory only, by plain name", name)
	}
	editRecord(t, dir, func(r map[string]any) { r["boundary"].(map[string]any)["file"] = BoundaryFile })
	require.NoError(t, os.Remove(filepath.Join(dir, BoundaryFile)))
	require.NoError(t, os.Symlink(filepath.Join(dir, BatchFile), filepath.Join(dir, BoundaryFile)))
	_, err = ReadFixture(dir)
	assert.ErrorContains(t, err, "is not a regular file")
}

// TestTrustAgrees: the two sides of the trust rule, internal/trust and
// reduce_collect.py's (with reduce_batch.py's store), find the same store
// under the same environment, read each other's entries (the recorder's,
// reduce's), and say the same of the same files: digest, stored, mine.
func TestTrustAgrees(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	py := testenv.Python(t)
	pydir, err := filepath.Abs(filepath.Join("..", "..", "replay", "python"))
	require.NoError(t, err)
	ask := func(env []string, root string, paths ...string) []map[string]any {
		t.Helper()
		cmd := exec.Command(py, "-c", `import json, sys
sys.path.insert(0, sys.argv[1])
import reduce_batch, reduce_batch.trust as rc
out = [{"dir": reduce_batch.trust_dir()}]
for p in sys.argv[3:]:
    d = rc.file_digest(p)
    out.append({"digest": d, "stored": rc.stored(d) is not None, "mine": rc.trusted(p, sys.argv[2])[0]})
print(json.dumps(out))`)
		cmd.Args = append(cmd.Args, append([]string{pydir, root}, paths...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		require.NoError(t, err)
		var got []map[string]any
		require.NoError(t, json.Unmarshal(out, &got))
		return got
	}

	// The store's directory.
	home := t.TempDir()
	for _, env := range [][]string{
		{"HOME=" + home, "XDG_DATA_HOME=", trust.StoreEnv + "="},
		{"HOME=" + home, "XDG_DATA_HOME=relative", trust.StoreEnv + "="},
		{"HOME=" + home, "XDG_DATA_HOME=/data", trust.StoreEnv + "="},
		{"HOME=" + home, "XDG_DATA_HOME=/data", trust.StoreEnv + "=/elsewhere"},
	} {
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		store, err := trust.DefaultStore()
		require.NoError(t, err)
		assert.Equal(t, store.Dir, ask(nil, home)[0]["dir"], "%v", env)
	}

	// Each side's entries, and the same verdicts.
	t.Setenv(trust.StoreEnv, filepath.Join(t.TempDir(), "store"))
	store, err := trust.DefaultStore()
	require.NoError(t, err)
	root := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(root, 0o755))
	recorded := filepath.Join(root, "recorded.bin") // by the Python recorder
	rec := exec.Command(py, "-c", `import sys
sys.path.insert(0, sys.argv[1])
from reduce_batch import fileformat
fileformat.sign_as_mine(sys.argv[2], fileformat._atomic_write(sys.argv[2], [b"a recording"]))`, pydir, recorded)
	out, err := rec.CombinedOutput()
	require.NoError(t, err, "%s", out)
	dir, err := Write(filepath.Join(root, "regress"), exampleRegression(t, nil)) // by reduce
	require.NoError(t, err)
	signed(t, dir)
	record := filepath.Join(dir, RecordFile)
	committedFile := filepath.Join(root, "committed.bin")
	require.NoError(t, os.WriteFile(committedFile, []byte("committed"), 0o644))
	changed := filepath.Join(root, "changed.bin")
	require.NoError(t, os.WriteFile(changed, []byte("committed"), 0o644))
	lfs := filepath.Join(root, "lfs.bin")
	content := []byte("stored with Git LFS")
	require.NoError(t, os.WriteFile(lfs, []byte("version https://git-lfs.github.com/spec/v1\noid sha256:"+
		strings.TrimPrefix(digestBytes(content), "sha256:")+"\nsize 19\n"), 0o644))
	gitCommit(t, root)
	require.NoError(t, os.WriteFile(lfs, content, 0o644))
	require.NoError(t, os.WriteFile(changed, []byte("changed since"), 0o644))
	untracked := filepath.Join(root, "untracked.bin")
	require.NoError(t, os.WriteFile(untracked, []byte("from an issue"), 0o644))
	_, err = MarkFixed(dir) // its record changed: its status alone
	require.NoError(t, err)
	outside := filepath.Join(t.TempDir(), "outside.bin")
	require.NoError(t, os.WriteFile(outside, []byte("from an issue"), 0o644))

	paths := []string{recorded, record, filepath.Join(dir, BatchFile), committedFile, changed, lfs, untracked, outside}
	got := ask(nil, root, paths...)[1:]
	for i, p := range paths {
		digest, err := trust.Digest(p)
		require.NoError(t, err)
		_, stored := store.Lookup(digest)
		v, err := trust.Check(p, "", root)
		require.NoError(t, err)
		assert.Equal(t, digest, got[i]["digest"], p)
		assert.Equal(t, stored, got[i]["stored"], p)
		assert.Equal(t, v.Mine, got[i]["mine"], "%s: %s", p, v.How)
	}
	for i, want := range []bool{true, true, true, true, false, true, false, false} {
		assert.Equal(t, want, got[i]["mine"], paths[i])
	}
}

func digestBytes(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// TestDescribeFixture: `reduce inspect DIR` reads a fixture directory as
// data and says what its tests would run and whether it is the user's.
func TestDescribeFixture(t *testing.T) {
	t.Setenv(trust.StoreEnv, filepath.Join(t.TempDir(), "store"))
	root := t.TempDir()
	dir, err := Write(filepath.Join(root, "regress"), exampleRegression(t, nil))
	require.NoError(t, err)
	d, err := DescribeFixture(dir, root)
	require.NoError(t, err)
	assert.True(t, d.Mine, "a built-in op's fixture names nothing to run")
	assert.Empty(t, d.Runs)

	editRecord(t, dir, func(r map[string]any) { r["entry"] = "helpers:step\x1b]0;T\x07" })
	d, err = DescribeFixture(dir, root)
	require.NoError(t, err)
	assert.False(t, d.Mine)
	assert.Equal(t, []string{`the --entry function helpers:step\x1b]0;T\x07`}, d.Runs)
	assert.Contains(t, d.Trust, "fixture.json: not in your trust store")
	var b strings.Builder
	require.NoError(t, d.WriteText(&b))
	assert.Contains(t, b.String(), "its tests run none of them until you allow it, reduce trust "+dir)
	assert.NotContains(t, b.String(), "\x1b", "escaped")

	store, err := trust.DefaultStore()
	require.NoError(t, err)
	_, err = Allow(store, dir, false)
	require.NoError(t, err)
	d, err = DescribeFixture(dir, root)
	require.NoError(t, err)
	assert.True(t, d.Mine)
	assert.Equal(t, "allowed with reduce trust", d.Trust)

	// Python someone put in it: said, and nothing is allowed.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "conftest.py"), []byte("import os\n"), 0o644))
	d, err = DescribeFixture(dir, root)
	require.NoError(t, err)
	assert.Equal(t, []string{"conftest.py"}, d.Python)
	b.Reset()
	require.NoError(t, d.WriteText(&b))
	assert.Contains(t, b.String(), "also conftest.py: Python, which reduce never writes into a fixture")
	_, err = Allow(store, dir, false)
	assert.ErrorContains(t, err, "holds conftest.py, which reduce never writes into a fixture and pytest imports")
}
