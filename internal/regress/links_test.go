package regress

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// No link under --out is followed, nor in a fixture's directory: Write,
// WriteCollector and MarkFixed refuse one with an error wrapping ErrLink
// that names it and the fix, and leave the link and what it names as they
// were.
func TestLinksNotFollowed(t *testing.T) {
	written := t.TempDir()
	fixture, err := Write(written, exampleRegression(t, nil))
	require.NoError(t, err)
	name := filepath.Base(fixture)
	collector := []byte(CollectorMark + "9.9.9: reduce's\nprint('v9')\n")

	// outside copies src (a file or a directory of files) to a place
	// outside every out, for a link to name.
	outside := func(t *testing.T, src string) string {
		t.Helper()
		dst := filepath.Join(t.TempDir(), filepath.Base(src))
		fi, err := os.Stat(src)
		require.NoError(t, err)
		if !fi.IsDir() {
			data, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst, data, 0o644))
			return dst
		}
		require.NoError(t, os.Mkdir(dst, 0o755))
		for f, data := range readDir(t, src) {
			require.NoError(t, os.WriteFile(filepath.Join(dst, f), data, 0o644))
		}
		return dst
	}
	// inFixture is a copy of the fixture under out whose file is a link
	// to a copy of it outside.
	inFixture := func(file string) func(t *testing.T, out string) (string, string) {
		return func(t *testing.T, out string) (string, string) {
			dir := outside(t, fixture)
			require.NoError(t, os.Rename(dir, filepath.Join(out, name)))
			link := filepath.Join(out, name, file)
			target := outside(t, link)
			require.NoError(t, os.Remove(link))
			return link, target
		}
	}
	for _, tc := range []struct {
		name string
		link func(t *testing.T, out string) (link, target string)
		do   func(out string) error
	}{
		{"the fixture's directory",
			func(t *testing.T, out string) (string, string) { return filepath.Join(out, name), outside(t, fixture) },
			func(out string) error { _, err := Write(out, exampleRegression(t, nil)); return err }},
		{"batch.bin in the fixture's directory", inFixture(BatchFile),
			func(out string) error { _, err := Write(out, exampleRegression(t, nil)); return err }},
		{"boundary.bin in the fixture's directory", inFixture(BoundaryFile),
			func(out string) error { _, err := Write(out, exampleRegression(t, nil)); return err }},
		{"fixture.json in the fixture's directory", inFixture(RecordFile),
			func(out string) error { _, err := Write(out, exampleRegression(t, nil)); return err }},
		{"conftest.py",
			func(t *testing.T, out string) (string, string) {
				path := filepath.Join(t.TempDir(), CollectorFile)
				require.NoError(t, os.WriteFile(path, collector, 0o644))
				return filepath.Join(out, CollectorFile), path
			},
			func(out string) error { return WriteCollector(out, append(collector, "# newer\n"...)) }},
		{"reduce fixed: fixture.json", inFixture(RecordFile),
			func(out string) error { _, err := MarkFixed(filepath.Join(out, name)); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			link, target := tc.link(t, out)
			require.NoError(t, os.Symlink(target, link))
			before := tree(t, filepath.Dir(target))
			err := tc.do(out)
			require.ErrorIs(t, err, ErrLink)
			assert.ErrorContains(t, err, link+" is a symbolic link: reduce never follows a link under --out; remove it")
			assert.Equal(t, before, tree(t, filepath.Dir(target)), "what the link names is left as it was")
			got, err := os.Readlink(link)
			require.NoError(t, err, "the link is left as it was")
			assert.Equal(t, target, got)
			ents, err := os.ReadDir(out)
			require.NoError(t, err)
			assert.Len(t, ents, 1, "nothing else written under out")
		})
	}
}

// tree is the bytes of every regular file under dir, by path.
func tree(t *testing.T, dir string) map[string]string {
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
