package replay

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecordStatus: reduce record exits with the command's own status,
// names only the crash files the command wrote (a file there before, and
// not written again, is not one), and gives every process the startup hook
// first on PYTHONPATH, before what the environment had. A command that
// cannot start, or a crash file whose folder is not there, is an error.
func TestRecordStatus(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "crash.bin")
	require.NoError(t, os.WriteFile(out, []byte("an earlier run's"), 0o644))
	seen := filepath.Join(dir, "env")
	r, err := Record(context.Background(), RecordOptions{Out: out, Env: []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=/mine"},
		Argv: []string{"sh", "-c", `echo "$PYTHONPATH" > "$0"; echo x > "$1"; exit 7`, seen, filepath.Join(dir, "crash.rank1.bin")}})
	require.NoError(t, err)
	assert.Equal(t, 7, r.Status)
	assert.Equal(t, []string{filepath.Join(dir, "crash.rank1.bin")}, r.Files)
	got, err := os.ReadFile(seen)
	require.NoError(t, err)
	assert.Regexp(t, `^/\S*reduce-hook-[^:]*:\S*reduce-hook-\S*/reduce_batch-\S*\.zip:/mine\n$`, string(got))

	_, err = Record(context.Background(), RecordOptions{Out: out, Argv: []string{"no-such-command-here"}})
	assert.ErrorContains(t, err, "no-such-command-here")
	_, err = Record(context.Background(), RecordOptions{Out: filepath.Join(dir, "nope", "crash.bin"), Argv: []string{"true"}})
	assert.ErrorContains(t, err, "its directory does not exist")
	_, err = Record(context.Background(), RecordOptions{Out: out})
	assert.ErrorContains(t, err, "no command")
}
