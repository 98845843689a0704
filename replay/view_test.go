package replay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/signature"
)

// listRunDirEntry is an --entry module that writes the names in its run
// directory to $REPLAY_RUN_DIR_LOG, then runs the batch's op.
const listRunDirEntry = `import os
import reduce_batch


def run(b):
    names = sorted(os.listdir(os.environ["REDUCE_RUN_DIR"]))
    with open(os.environ["REPLAY_RUN_DIR_LOG"], "a") as f:
        f.write("[" + " ".join(names) + "]\n")
    return reduce_batch.run_op(b.op, b.tensors, b.attrs)
`

// TestViewsWriteNoCandidateFile: the go and torch backends replay a view
// of the recorded file with nothing in the run directory but the output
// FIFOs of a zygote's child, and give the verdict the candidate built and
// written gives. The same backends replaying a built candidate list its
// file, so the listing would show one.
func TestViewsWriteNoCandidateFile(t *testing.T) {
	tmp := t.TempDir()
	path := filepath.Join(tmp, "batch.bin")
	orig, err := fixtures.Read("../fixtures/examples/four_class_targets.bin")
	require.NoError(t, err)
	// Uncompressed, as a large recording is: the source is the file itself.
	require.NoError(t, fixtures.Write(path, orig, fixtures.WithCompression(fixtures.CompressionNone)))
	b, err := fixtures.Read(path)
	require.NoError(t, err)
	src, err := fixtures.NewSource(path, b, tmp)
	require.NoError(t, err)
	defer src.Close()
	require.Equal(t, path, src.Path, "an uncompressed file is its own source")

	views := map[string]*fixtures.View{
		"culprit":    {Rows: []int64{2, 0}},
		"no culprit": {Rows: []int64{0, 1}},
		"set":        {Rows: []int64{2}, Set: []fixtures.ElementSet{{Tensor: 1, Index: []int64{0}, Bits: fixtures.ElementBits(b.Tensors[1].DType, false, 3, 0)}}},
	}
	log := filepath.Join(tmp, "rundirs.log")
	entry := filepath.Join(tmp, "list_run_dir.py")
	require.NoError(t, os.WriteFile(entry, []byte(listRunDirEntry), 0o644))

	goOpts := goOptions(t, DeviceCPU)
	goOpts.Env = append(goOpts.Env, runDirLogEnv+"="+log)
	backends := map[string]Options{"go": goOpts}
	if py := torchPython(t); py != "" {
		for name, noZyg := range map[string]bool{"torch zygote": false, "torch cold": true} {
			o := torchOptions(t, tmp)
			o.Entry, o.NoZygote = entry+":run", noZyg
			o.Env = append(o.Env, runDirLogEnv+"="+log)
			backends[name] = o
		}
	}
	for name, o := range backends {
		t.Run(name, func(t *testing.T) {
			be := newBackend(t, o)
			v, ok := be.(Viewer)
			require.True(t, ok, "%s is no Viewer", be.Kind())
			require.True(t, v.Views())
			for vn, view := range views {
				require.NoError(t, os.RemoveAll(log))
				got, err := v.ReplayView(context.Background(), src, view)
				require.NoError(t, err)
				listed, err := os.ReadFile(log)
				require.NoError(t, err, "%s: the replay did not run", vn)
				for _, f := range strings.Fields(strings.Trim(strings.TrimSpace(string(listed)), "[]")) {
					require.True(t, strings.HasSuffix(f, ".fifo"), "%s: %s in the run directory of a view: %s", vn, f, listed)
				}

				require.NoError(t, os.RemoveAll(log))
				cand, err := b.Apply(view)
				require.NoError(t, err)
				want := replayOK(t, be, cand)
				listed, err = os.ReadFile(log)
				require.NoError(t, err)
				require.Contains(t, string(listed), "candidate.bin", "%s: a built candidate's file is listed", vn)
				require.Equal(t, want.Signature, got.Signature, "%s: %s", vn, got.Result.Stderr)
				require.Equal(t, vn == "culprit", signature.Failing(got.Signature), "%s: %s", vn, got.Signature)
			}
		})
	}
}
