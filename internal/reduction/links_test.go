package reduction_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/reduction"
)

// linkTarget is a file outside every --out, with its bytes, that a link
// under --out names: a reduction must leave it as it is.
func linkTarget(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
	return path
}

// journalName is the journal's name under --out of a reduction of the file
// at path.
func journalName(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	return ".reduce-" + hex.EncodeToString(sum[:])[:12] + ".journal"
}

// copyDir copies the regular files of src into dst, a new directory.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dst, 0o755))
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644))
	}
}

// snapshot is every regular file's bytes under dir, by path.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			files[p] = string(data)
			return err
		}
		return err
	}))
	return files
}

// No link under --out is followed: a lock, a journal (fresh or resumed),
// a fixture's directory or a file in an existing one that is a symbolic
// link stops the run, bad usage, naming the link and the fix; the file or
// directory it names is left as it was, and the link too.
func TestOutLinksNotFollowed(t *testing.T) {
	b, path := crossEntropy(t, 4, map[int]int64{1: 4})

	// A fixture of this reduction, and a journal of it interrupted, to be
	// linked to from another --out.
	done := t.TempDir()
	res, err := reduce(t, b, path, newStep(kernelStep), reduction.Options{Out: done, MaxFindings: 1})
	require.NoError(t, err)
	fixture := res.Fixtures[0]
	name := filepath.Base(fixture)
	interrupted := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	be := newStep(kernelStep)
	be.cancel, be.cancelAt = cancel, 2
	_, err = run(ctx, b, be, reduction.Options{Source: path, Out: interrupted})
	require.ErrorIs(t, err, reduction.ErrInterrupted)
	journal, err := os.ReadFile(filepath.Join(interrupted, journalName(t, path)))
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		resume bool
		// link makes the link under out and returns its path and what it
		// names, outside out.
		link func(t *testing.T, out string) (link, target string)
	}{
		{name: "lock", link: func(t *testing.T, out string) (string, string) {
			return filepath.Join(out, ".reduce.lock"), linkTarget(t, "my notes\n")
		}},
		{name: "journal", link: func(t *testing.T, out string) (string, string) {
			return filepath.Join(out, journalName(t, path)), linkTarget(t, "my notes\n")
		}},
		{name: "journal resumed", resume: true, link: func(t *testing.T, out string) (string, string) {
			// A journal of this very reduction: followed, it would be
			// read and appended to.
			return filepath.Join(out, journalName(t, path)), linkTarget(t, string(journal))
		}},
		{name: "fixture directory", link: func(t *testing.T, out string) (string, string) {
			// The same fixture, elsewhere: followed, it would be kept in
			// silence and named as written.
			target := filepath.Join(t.TempDir(), name)
			copyDir(t, fixture, target)
			return filepath.Join(out, name), target
		}},
		{name: "batch.bin in the fixture directory", link: func(t *testing.T, out string) (string, string) {
			copyDir(t, fixture, filepath.Join(out, name))
			target := filepath.Join(t.TempDir(), "batch.bin")
			data, err := os.ReadFile(filepath.Join(fixture, "batch.bin"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(target, data, 0o644))
			link := filepath.Join(out, name, "batch.bin")
			require.NoError(t, os.Remove(link))
			return link, target
		}},
		{name: "fixture.json in the fixture directory", link: func(t *testing.T, out string) (string, string) {
			copyDir(t, fixture, filepath.Join(out, name))
			target := filepath.Join(t.TempDir(), "fixture.json")
			data, err := os.ReadFile(filepath.Join(fixture, "fixture.json"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(target, data, 0o644))
			link := filepath.Join(out, name, "fixture.json")
			require.NoError(t, os.Remove(link))
			return link, target
		}},
		{name: "conftest.py", link: func(t *testing.T, out string) (string, string) {
			data, err := os.ReadFile(filepath.Join(done, "conftest.py"))
			require.NoError(t, err)
			return filepath.Join(out, "conftest.py"), linkTarget(t, string(data))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			link, target := tc.link(t, out)
			require.NoError(t, os.Symlink(target, link))
			before := snapshot(t, filepath.Dir(target))
			be := newStep(kernelStep)
			_, err := reduce(t, b, path, be, reduction.Options{Out: out, MaxFindings: 1, Resume: tc.resume})
			require.ErrorIs(t, err, reduction.ErrUsage)
			assert.ErrorContains(t, err, link+" is a symbolic link: reduce never follows a link under --out; remove it")
			assert.Equal(t, before, snapshot(t, filepath.Dir(target)), "what the link names is left as it was")
			fi, err := os.Lstat(link)
			require.NoError(t, err)
			assert.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the link is left as it was")
			got, err := os.Readlink(link)
			require.NoError(t, err)
			assert.Equal(t, target, got)
		})
	}
}

// --out itself, as the user gave it, may be a symbolic link to a
// directory: it is followed, once.
func TestOutItselfALink(t *testing.T) {
	b, path := crossEntropy(t, 4, map[int]int64{1: 4})
	dir := t.TempDir()
	out := filepath.Join(t.TempDir(), "regress")
	require.NoError(t, os.Symlink(dir, out))
	res, err := reduce(t, b, path, newStep(kernelStep), reduction.Options{Out: out, MaxFindings: 1})
	require.NoError(t, err)
	require.Len(t, res.Fixtures, 1)
	assert.Equal(t, out, filepath.Dir(res.Fixtures[0]))
	assert.FileExists(t, filepath.Join(dir, filepath.Base(res.Fixtures[0]), "fixture.json"), "written where the link points")
	assert.NoFileExists(t, filepath.Join(dir, ".reduce.lock"))
}
