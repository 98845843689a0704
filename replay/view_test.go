package replay

import (
	"encoding/json"
	"fmt"
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
import reduce_batch.ops


def run(b):
    names = sorted(os.listdir(os.environ["REDUCE_RUN_DIR"]))
    with open(os.environ["REPLAY_RUN_DIR_LOG"], "a") as f:
        f.write("[" + " ".join(names) + "]\n")
    return reduce_batch.ops.run_op(b.op, b.tensors, b.attrs)
`

// viewSource writes batch to path uncompressed and returns it as read
// back.
func viewSource(t *testing.T, path string, batch *fixtures.Batch) *fixtures.Batch {
	t.Helper()
	require.NoError(t, fixtures.Write(path, batch, fixtures.WithCompression(fixtures.CompressionNone)))
	b, err := fixtures.Read(path)
	require.NoError(t, err)
	return b
}

// TestViewsWriteNoCandidateFile: the go and torch backends replay a view
// of the recorded file with nothing in the run directory but the output
// FIFOs of a zygote's child, and give the verdict the candidate built, as
// a batch of its own, gives.
func TestViewsWriteNoCandidateFile(t *testing.T) {
	tmp := t.TempDir()
	path := filepath.Join(tmp, "batch.bin")
	orig, err := fixtures.Read("../fixtures/examples/four_class_targets.bin")
	require.NoError(t, err)
	// Uncompressed, as a large recording is: the source is the file itself.
	b := viewSource(t, path, orig)

	views := map[string]*fixtures.View{
		"culprit":    {Rows: []int64{2, 0}},
		"no culprit": {Rows: []int64{0, 1}},
	}
	set := fixtures.ElementSet{Tensor: 1}
	set.Add(0, fixtures.ElementBits(b.Tensors[1].DType, false, 3, 0))
	views["set"] = &fixtures.View{Rows: []int64{2}, Set: []fixtures.ElementSet{set}}
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
			o.File = path
			be := newBackend(t, o, b)
			src := boundOf(t, be).src
			st1, err := os.Stat(path)
			require.NoError(t, err)
			st2, err := os.Stat(src.Path)
			require.NoError(t, err)
			require.True(t, os.SameFile(st1, st2), "an uncompressed file is its own source: %s", src.Path)
			for vn, view := range views {
				require.NoError(t, os.RemoveAll(log))
				got := replayOK(t, be, view)
				listed, err := os.ReadFile(log)
				require.NoError(t, err, "%s: the replay did not run", vn)
				for _, f := range strings.Fields(strings.Trim(strings.TrimSpace(string(listed)), "[]")) {
					require.True(t, strings.HasSuffix(f, ".fifo"), "%s: %s in the run directory of a view: %s", vn, f, listed)
				}

				cand, err := b.Apply(view)
				require.NoError(t, err)
				var want Verdict
				if _, ok := be.(*torchBackend); ok {
					want = replayBatch(t, be, cand, whole) // the same zygote
				} else {
					oc := o
					oc.File = "" // cand is no file's
					want = replayOK(t, newBackend(t, oc, cand), whole)
				}
				require.Equal(t, want.Signature, got.Signature, "%s: %s", vn, got.Result.Stderr)
				require.Equal(t, vn == "culprit", signature.Failing(got.Signature), "%s: %s", vn, got.Signature)
			}
		})
	}

	// A recording written again at the same path during the reduction (a
	// recorder renames its new file over the old one) does not change what
	// the replays read: the source is the file that was opened.
	two, err := b.Select([]int64{0, 1})
	require.NoError(t, err)
	goOpts.File = path
	be := newBackend(t, goOpts, b)
	require.NoError(t, fixtures.Write(path, two, fixtures.WithCompression(fixtures.CompressionNone)))
	got := replayOK(t, be, views["culprit"])
	require.True(t, signature.Failing(got.Signature), "the replaced file was read: %s\n%s", got.Signature, got.Result.Stderr)
}

// TestViewLargePlan: a plan larger than a zygote request carries (here the
// ids of 6,000 samples) travels as plan.json in the run directory, and the
// child replays it as it would replay it inline.
func TestViewLargePlan(t *testing.T) {
	py := torchPython(t)
	tmp := t.TempDir()
	orig, err := fixtures.Read("../fixtures/examples/four_class_targets.bin")
	require.NoError(t, err)
	// Copies of the samples that pass, and the culprit (sample 2) once.
	var pass []int64
	for i := range orig.Samples {
		if i != 2 {
			pass = append(pass, i)
		}
	}
	rows := make([]int64, 6000)
	for i := range rows {
		rows[i] = pass[i%len(pass)]
	}
	rows[4321] = 2
	big, err := orig.Select(rows)
	require.NoError(t, err)
	for i := range big.SampleIDs {
		big.SampleIDs[i] = fmt.Sprintf("sample-%05d", i)
	}
	path := filepath.Join(tmp, "big.bin")
	b := viewSource(t, path, big)
	plan, err := b.Plan(&fixtures.View{}, path)
	require.NoError(t, err)
	raw, err := json.Marshal(plan)
	require.NoError(t, err)
	require.Greater(t, len(raw), maxInlinePlan)

	log := filepath.Join(tmp, "rundirs.log")
	entry := filepath.Join(tmp, "list_run_dir.py")
	require.NoError(t, os.WriteFile(entry, []byte(listRunDirEntry), 0o644))
	o := torchOptions(t, tmp)
	o.Python, o.Entry = py, entry+":run"
	o.Env = append(o.Env, runDirLogEnv+"="+log)
	o.File = path
	be := newBackend(t, o, b)
	first := make([]int64, 4000)
	for i := range first {
		first[i] = int64(i)
	}
	for _, v := range []*fixtures.View{{}, {Rows: first}} {
		require.NoError(t, os.RemoveAll(log))
		got := replayOK(t, be, v)
		listed, err := os.ReadFile(log)
		require.NoError(t, err)
		require.Contains(t, string(listed), planFile)
		require.NotContains(t, string(listed), "candidate.bin")
		require.Equal(t, v.Rows == nil, signature.Failing(got.Signature), "%s\n%s", got.Signature, got.Result.Stderr)
	}
}
