package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
)

const fourClass = "../../fixtures/examples/four_class_targets.bin"

// notes is a file outside --out, with its bytes, that a link names.
func notes(t *testing.T) (path string, data []byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notes.txt")
	data = []byte("my notes: never written by reduce\n")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path, data
}

// runCLI runs reduce with args, and returns its exit code, stdout and
// stderr.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"reduce"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// No link under --out is followed: the lock, the journal (fresh or
// resumed), the fixture's directory, or a fixture.json that `reduce fixed`
// would rewrite, a symbolic link: exit 2, one line naming the link and the
// fix; the link and the file it names are left as they were.
func TestOutLinksExitTwo(t *testing.T) {
	data, err := os.ReadFile(fourClass)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	journal := ".reduce-" + hex.EncodeToString(sum[:])[:12] + ".journal"
	// The fixture of the example, for the links that name a fixture's
	// directory or file.
	code, stdout, stderr := runCLI("--batch", fourClass, "--out", filepath.Join(t.TempDir(), "done"), "-q")
	require.Equal(t, ExitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	fixture := lines[len(lines)-1]
	name := filepath.Base(fixture)

	reduceArgs := func(out string) []string { return []string{"--batch", fourClass, "--out", out, "-q"} }
	for _, tc := range []struct {
		name string
		// link is where the link goes under out; target, when set, makes
		// what it names (else notes.txt).
		link   string
		target func(t *testing.T) string
		args   func(out string) []string
	}{
		{name: "lock", link: ".reduce.lock", args: reduceArgs},
		{name: "journal", link: journal, args: reduceArgs},
		{name: "journal resumed", link: journal, args: func(out string) []string { return append(reduceArgs(out), "--resume") }},
		{name: "fixture directory", link: name, target: func(t *testing.T) string { return fixture }, args: reduceArgs},
		{name: "fixed", link: filepath.Join("fixture", "fixture.json"),
			target: func(t *testing.T) string { return filepath.Join(fixture, "fixture.json") },
			args:   func(out string) []string { return []string{"fixed", filepath.Join(out, "fixture")} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			target, _ := notes(t)
			if tc.target != nil {
				target = tc.target(t)
			}
			before := treeOf(t, filepath.Dir(target))
			link := filepath.Join(out, tc.link)
			require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
			require.NoError(t, os.Symlink(target, link))
			code, stdout, stderr := runCLI(tc.args(out)...)
			assert.Equal(t, ExitUsage, code, stderr)
			assert.Empty(t, stdout)
			assert.True(t, strings.HasPrefix(stderr, "reduce: "), stderr)
			assert.True(t, strings.HasSuffix(stderr, link+" is a symbolic link: reduce never follows a link under --out; remove it\n"), stderr)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %s", stderr)
			assert.Equal(t, before, treeOf(t, filepath.Dir(target)), "what the link names is left as it was")
			got, err := os.Readlink(link)
			require.NoError(t, err, "the link is left as it was")
			assert.Equal(t, target, got)
		})
	}
}

// `reduce convert -o OUT` never replaces an existing OUT, a file or a
// symbolic link, unless --force is given (exit 2 naming OUT and --force);
// with --force, a link is replaced by the file, and what it named is left
// as it was.
func TestConvertExistingOutput(t *testing.T) {
	for _, tc := range []struct {
		name string
		link bool
		ext  string
	}{
		{name: "file", ext: ".bin"},
		{name: "link", link: true, ext: ".bin"},
		{name: "file exported", ext: ".npz"},
		{name: "link exported", link: true, ext: ".safetensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, data := notes(t)
			out := filepath.Join(t.TempDir(), "out"+tc.ext)
			if tc.link {
				require.NoError(t, os.Symlink(target, out))
			} else {
				out = target[:len(target)-len(".txt")] + tc.ext
				require.NoError(t, os.Rename(target, out))
				target = out
			}
			code, stdout, stderr := runCLI("convert", fourClass, "-o", out)
			assert.Equal(t, ExitUsage, code, stderr)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, out)
			assert.Contains(t, stderr, "--force")
			assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
			got, err := os.ReadFile(target)
			require.NoError(t, err)
			assert.Equal(t, data, got, "refused: left as it was")
			if tc.link {
				_, err := os.Readlink(out)
				require.NoError(t, err, "refused: the link is left")
			}

			code, stdout, stderr = runCLI("convert", fourClass, "-o", out, "--force")
			require.Equal(t, ExitOK, code, stderr)
			assert.Equal(t, out+"\n", stdout)
			fi, err := os.Lstat(out)
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "replaced by the file, %v", fi.Mode())
			if tc.ext == ".bin" {
				b, err := fixtures.Read(out)
				require.NoError(t, err)
				assert.Equal(t, int64(3), b.Samples)
			}
			if tc.link {
				got, err := os.ReadFile(target)
				require.NoError(t, err)
				assert.Equal(t, data, got, "the link's target is left as it was")
			}
		})
	}
}

// treeOf is the bytes of every regular file under dir, by path.
func treeOf(t *testing.T, dir string) map[string]string {
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
