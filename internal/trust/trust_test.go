package trust

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func TestStore(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "store")}
	d := digestOf([]byte("a recording"))
	_, ok := s.Lookup(d)
	assert.False(t, ok, "an empty store holds nothing")

	require.NoError(t, s.Add(d, Entry{Kind: KindRecording, Path: "/somewhere/crash.bin"}))
	e, ok := s.Lookup(d)
	require.True(t, ok)
	assert.Equal(t, KindRecording, e.Kind)
	assert.Equal(t, d, e.Digest)
	st, err := os.Stat(s.Dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "only the user reads and writes the store")

	had, err := s.Remove(d)
	require.NoError(t, err)
	assert.True(t, had)
	_, ok = s.Lookup(d)
	assert.False(t, ok)
	had, err = s.Remove(d)
	require.NoError(t, err)
	assert.False(t, had)

	assert.Error(t, s.Add("sha256:../../etc/passwd", Entry{Kind: KindAllowed}), "a digest is never a path")
	assert.Error(t, s.Add("md5:00", Entry{Kind: KindAllowed}))
}

// TestStoreRefuses: an entry counts only as a regular file whose JSON names
// its own digest: a link planted in the store, or an entry copied under
// another file's name, says nothing.
func TestStoreRefuses(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	mine, other := digestOf([]byte("mine")), digestOf([]byte("other"))
	require.NoError(t, s.Add(mine, Entry{Kind: KindRecording}))
	minePath := filepath.Join(s.Dir, strings.TrimPrefix(mine, "sha256:")+".json")
	otherPath := filepath.Join(s.Dir, strings.TrimPrefix(other, "sha256:")+".json")

	data, err := os.ReadFile(minePath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(otherPath, data, 0o600))
	_, ok := s.Lookup(other)
	assert.False(t, ok, "an entry of another digest")

	require.NoError(t, os.Remove(otherPath))
	require.NoError(t, os.Symlink(minePath, otherPath))
	_, ok = s.Lookup(other)
	assert.False(t, ok, "a link")
}

func TestDefaultStore(t *testing.T) {
	for _, c := range []struct {
		env, xdg, home string
		want           string // "" for ErrNoHome
	}{
		{"", "", "/home/someone", "/home/someone/.local/share/reduce/trusted"},
		{"", "relative/data", "/home/someone", "/home/someone/.local/share/reduce/trusted"}, // the XDG spec: ignored
		{"", "/data", "/home/someone", "/data/reduce/trusted"},
		{"/elsewhere", "/data", "/home/someone", "/elsewhere"},
		{"", "", "", ""},                // no HOME: no store, never one relative to a working directory
		{"", "", "relative", ""},        // nor a relative HOME's
		{"relative", "", "/home/x", ""}, // nor a relative REDUCE_TRUST_DIR
	} {
		t.Setenv(StoreEnv, c.env)
		t.Setenv("XDG_DATA_HOME", c.xdg)
		t.Setenv("HOME", c.home)
		s, err := DefaultStore()
		if c.want == "" {
			assert.ErrorIs(t, err, ErrNoHome, "%+v", c)
			continue
		}
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, c.want, s.Dir, "%+v", c)
	}
}

// gitRepo makes a repository at dir with one commit of files (name →
// content), and returns a function that runs git there.
func gitRepo(t *testing.T, dir string, files map[string]string) func(args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return string(out)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	run("init", "-q")
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		run("add", name)
	}
	run("commit", "-q", "-m", "files")
	return run
}

func committed(t *testing.T, root, path string) bool {
	t.Helper()
	d, err := Digest(path)
	require.NoError(t, err)
	_, ok, _ := Committed(root, path, d)
	return ok
}

func TestCommitted(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "repo")
	git := gitRepo(t, repo, map[string]string{"regress/a/fixture.json": `{"step": "train:step"}`, "crash.bin": "bytes"})
	fixture := filepath.Join(repo, "regress", "a", "fixture.json")

	assert.True(t, committed(t, repo, fixture), "committed with these bytes")
	assert.True(t, committed(t, filepath.Join(repo, "regress"), fixture), "root anywhere in the work tree")
	assert.False(t, committed(t, t.TempDir(), fixture), "root in no repository")

	require.NoError(t, os.WriteFile(fixture, []byte(`{"step": "evil:run"}`), 0o644))
	assert.False(t, committed(t, repo, fixture), "changed since HEAD")
	git("add", "regress/a/fixture.json")
	assert.False(t, committed(t, repo, fixture), "staged is not committed")
	git("commit", "-q", "-m", "change")
	assert.True(t, committed(t, repo, fixture))

	untracked := filepath.Join(repo, "regress", "b", "fixture.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(untracked), 0o755))
	require.NoError(t, os.WriteFile(untracked, []byte(`{}`), 0o644))
	assert.False(t, committed(t, repo, untracked), "a directory unpacked into the repository")

	// A directory from elsewhere that carries a .git of its own, which
	// "commits" its file: the repository is the one reduce runs in.
	foreign := filepath.Join(repo, "regress", "foreign")
	gitRepo(t, foreign, map[string]string{"fixture.json": `{"step": "evil:run"}`})
	inForeign := filepath.Join(foreign, "fixture.json")
	assert.False(t, committed(t, repo, inForeign), "committed only in a nested repository")
	assert.True(t, committed(t, foreign, inForeign), "(the nested repository itself, run in, commits it)")

	// A link to a committed file commits nothing outside the repository.
	outside := filepath.Join(t.TempDir(), "outside.bin")
	require.NoError(t, os.WriteFile(outside, []byte("bytes"), 0o644))
	assert.False(t, committed(t, repo, outside), "a file outside the repository with a committed file's bytes")
}

// TestCommittedLFS: a file stored with Git LFS is committed when HEAD's
// pointer names its SHA-256; another pointer, or another file, is not.
func TestCommittedLFS(t *testing.T) {
	content := []byte("a batch stored with Git LFS")
	oid := strings.TrimPrefix(digestOf(content), "sha256:")
	pointer := "version https://git-lfs.github.com/spec/v1\noid sha256:" + oid + "\nsize 27\n"
	repo := filepath.Join(t.TempDir(), "repo")
	gitRepo(t, repo, map[string]string{"crash.bin": pointer, "other.bin": strings.Replace(pointer, oid[:8], "00000000", 1)})
	for _, name := range []string{"crash.bin", "other.bin"} {
		require.NoError(t, os.WriteFile(filepath.Join(repo, name), content, 0o644)) // git lfs checkout
	}
	assert.True(t, committed(t, repo, filepath.Join(repo, "crash.bin")))
	assert.False(t, committed(t, repo, filepath.Join(repo, "other.bin")), "a pointer to other bytes")
}

func TestCheck(t *testing.T) {
	t.Setenv(StoreEnv, filepath.Join(t.TempDir(), "store"))
	repo := filepath.Join(t.TempDir(), "repo")
	gitRepo(t, repo, map[string]string{"committed.bin": "committed"})
	recorded := filepath.Join(t.TempDir(), "crash.bin")
	require.NoError(t, os.WriteFile(recorded, []byte("recorded here"), 0o644))
	foreign := filepath.Join(repo, "foreign.bin")
	require.NoError(t, os.WriteFile(foreign, []byte("from an issue"), 0o644))
	store, err := DefaultStore()
	require.NoError(t, err)
	d, err := Digest(recorded)
	require.NoError(t, err)
	require.NoError(t, store.Add(d, Entry{Kind: KindRecording}))

	v, err := Check(recorded, "", repo)
	require.NoError(t, err)
	assert.Equal(t, Verdict{Mine: true, How: "written by your recorder", Digest: d}, v)

	v, err = Check(filepath.Join(repo, "committed.bin"), "", repo)
	require.NoError(t, err)
	assert.True(t, v.Mine)
	assert.Equal(t, "committed in "+repo, v.How)

	v, err = Check(foreign, "", repo)
	require.NoError(t, err)
	assert.False(t, v.Mine)
	assert.Contains(t, v.How, "not in your trust store ("+store.Dir+")")
	assert.Contains(t, v.How, "not committed in "+repo)

	_, err = Check(filepath.Join(repo, "missing.bin"), "", repo)
	assert.Error(t, err, "a file that cannot be read")
}

func TestOwnStep(t *testing.T) {
	dir := t.TempDir()
	renamed := filepath.Join(dir, "helpers.py") // a vendored recorder under another name
	require.NoError(t, os.WriteFile(renamed, []byte("\"\"\"Record a failing PyTorch batch for `reduce` (record_on_failure)\"\"\"\n"), 0o644))
	collector := filepath.Join(dir, "conftest.py")
	require.NoError(t, os.WriteFile(collector, []byte("# reduce collector 0.20.0: written by reduce\n"), 0o644))
	mine := filepath.Join(dir, "train.py")
	require.NoError(t, os.WriteFile(mine, []byte("def step(batch):\n    pass\n"), 0o644))

	for _, c := range []struct {
		module, qualname, file string
		own                    bool
	}{
		{"reduce_batch", "save", "", true},
		{"vendor.reduce_batch", "save", "", true},
		{"reduce_collect", "run_in_child", "", true},
		{"reduce_replay", "main", "", true},
		{"reduce_hooks", "record_trainer", "", true},
		{"__main__", "save", "/home/someone/proj/reduce_batch.py", true},
		{"__main__", "lightning_step", "/home/someone/proj/reduce_hooks.py", true},
		{"helpers", "save", renamed, true},
		{"conftest", "run_in_child", collector, true},
		{"reduce_hooks", "lightning_step", "/home/someone/proj/reduce_hooks.py", false},
		{"reduce_hooks", "trainer_step", "", false},
		{"train", "step", mine, false},
		{"__main__", "step", mine, false},
		{"reduce_batches", "step", "", false},
	} {
		why := OwnStep(c.module, c.qualname, c.file)
		assert.Equal(t, c.own, why != "", "%s:%s (%s): %q", c.module, c.qualname, c.file, why)
	}
}

// TestRecordStatus: a fixture's record marked fixed (by hand, or `reduce
// fixed`) keeps its digest, in the store and against HEAD; any other change
// does not.
func TestRecordStatus(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "repo")
	open := `{"version": 2, "status": "open", "step": "train:step"}` + "\n"
	gitRepo(t, repo, map[string]string{"regress/a/fixture.json": open})
	path := filepath.Join(repo, "regress", "a", "fixture.json")
	before, err := Digest(path)
	require.NoError(t, err)
	for _, fixed := range []string{
		`{"version": 2, "status": "fixed", "step": "train:step"}` + "\n",
		`{"version": 2, "status":"fixed", "step": "train:step"}` + "\n",
	} {
		require.NoError(t, os.WriteFile(path, []byte(fixed), 0o644))
		after, err := Digest(path)
		require.NoError(t, err)
		assert.Equal(t, before, after, "the status is no part of the digest: %s", fixed)
		assert.True(t, committed(t, repo, path), "still committed, its status aside")
	}
	require.NoError(t, os.WriteFile(path, []byte(`{"version": 2, "status": "fixed", "step": "evil:run"}`+"\n"), 0o644))
	after, err := Digest(path)
	require.NoError(t, err)
	assert.NotEqual(t, before, after)
	assert.False(t, committed(t, repo, path))

	other := filepath.Join(repo, "notes.json") // only a fixture's record
	require.NoError(t, os.WriteFile(other, []byte(open), 0o644))
	a, err := Digest(other)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(other, []byte(strings.Replace(open, "open", "fixed", 1)), 0o644))
	b, err := Digest(other)
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
}

// TestOf: a batch file is the user's by the store alone; a commit is no
// proof for one (a directory from elsewhere may carry a .git that commits
// it), and a file that names nothing runs nothing of its own.
func TestOf(t *testing.T) {
	t.Setenv(StoreEnv, filepath.Join(t.TempDir(), "store"))
	repo := filepath.Join(t.TempDir(), "repo")
	gitRepo(t, repo, map[string]string{"crash.bin": "committed by someone"})
	t.Chdir(repo)
	committed, err := Digest(filepath.Join(repo, "crash.bin"))
	require.NoError(t, err)
	runs := []string{"the step evil:run"}
	v := Of(committed, runs)
	assert.False(t, v.Mine, "committed in the repository reduce runs in: no proof for a batch file")
	assert.Contains(t, v.How, "not in your trust store")
	assert.True(t, Of(committed, nil).Mine, "a file that names nothing to run")

	store, err := DefaultStore()
	require.NoError(t, err)
	require.NoError(t, store.Add(committed, Entry{Kind: KindAllowed}))
	v = Of(committed, runs)
	assert.Equal(t, Verdict{Mine: true, How: "allowed with reduce trust", Digest: committed}, v)

	t.Setenv(StoreEnv, "")
	t.Setenv("HOME", "")
	t.Setenv("XDG_DATA_HOME", "")
	v = Of(committed, runs)
	assert.False(t, v.Mine)
	assert.Contains(t, v.How, "no trust store")
}

// TestOwnStepNeverBlocks: a file names its step's file, which may be a FIFO
// (or a terminal): OwnStep reads regular files only, and never waits.
func TestOwnStepNeverBlocks(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "step.py")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	done := make(chan string)
	go func() { done <- OwnStep("__main__", "step", fifo) }()
	select {
	case why := <-done:
		assert.Empty(t, why)
	case <-time.After(10 * time.Second):
		t.Fatal("OwnStep blocked on a FIFO")
	}
}

// TestCarry: the output of a file of the user's is theirs, of the same kind;
// of a file that is not, nothing is recorded.
func TestCarry(t *testing.T) {
	t.Setenv(StoreEnv, filepath.Join(t.TempDir(), "store"))
	store, err := DefaultStore()
	require.NoError(t, err)
	dir := t.TempDir()
	out := filepath.Join(dir, "plain.bin")
	require.NoError(t, os.WriteFile(out, []byte("converted"), 0o644))
	mine, theirs := digestOf([]byte("recorded here")), digestOf([]byte("from an issue"))
	require.NoError(t, store.Add(mine, Entry{Kind: KindRecording}))

	did, err := Carry(theirs, out)
	require.NoError(t, err)
	assert.False(t, did)
	d, err := Digest(out)
	require.NoError(t, err)
	_, ok := store.Lookup(d)
	assert.False(t, ok)

	did, err = Carry(mine, out)
	require.NoError(t, err)
	assert.True(t, did)
	e, ok := store.Lookup(d)
	require.True(t, ok)
	assert.Equal(t, KindRecording, e.Kind)
}
