package regress

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
)

// TestReportRanksAndCompiled: what report.md says of a rank file reduce
// chose and of a step compiled with torch.compile. The chosen rank's file
// says neither its world size nor its time (an older recorder): the world
// size is the number of rank files, and no other rank is "later" than it;
// an unreadable file is named with why. A backend the recorder could not
// name ("1") is plain torch.compile.
func TestReportRanksAndCompiled(t *testing.T) {
	dir := t.TempDir()
	chosen := fixtures.RankFile{Path: filepath.Join(dir, "crash.rank1.bin"), Rank: 1, Error: "IndexError: Target 9 is out of bounds."}
	c := &fixtures.RankChoice{Path: chosen.Path, Chosen: &chosen, All: []fixtures.RankFile{
		{Path: filepath.Join(dir, "crash.rank0.bin"), Rank: 0, WorldSize: 3, FailedAt: 1000.5, Error: "RuntimeError: Connection closed by peer"},
		chosen,
		{Path: filepath.Join(dir, "crash.rank2.bin"), Rank: 2, Err: errors.New("bad magic")},
	}}
	r := RanksOf(c)
	require.NotNil(t, r)
	assert.Equal(t, 1, r.Rank)
	assert.Equal(t, 3, r.WorldSize, "the number of rank files when the chosen one does not say")
	require.Len(t, r.Others, 2)
	assert.Nil(t, r.Others[0].Later, "no time to be later than")
	assert.Equal(t, "bad magic", r.Others[1].Unreadable)

	reg := exampleRegression(t, nil)
	reg.Record.Source.Ranks = r
	reg.Record.Compiled = &Compiled{Backend: "1", Eager: EagerPasses}
	out, err := Write(t.TempDir(), reg)
	require.NoError(t, err)
	report := string(readDir(t, out)["report.md"])
	assert.Contains(t, report, "- recorded by rank 1 of 3 under torch.distributed")
	assert.Contains(t, report, "  - `crash.rank0.bin`, rank 0: `RuntimeError: Connection closed by peer`\n")
	assert.Contains(t, report, "  - `crash.rank2.bin`, rank 2: not read (bad magic)\n")
	assert.Contains(t, report, "- torch.compile: the failure needs torch.compile: the minimal batch passes eager\n")

	for _, tc := range []struct {
		c    Compiled
		want string
	}{
		{Compiled{Backend: "inductor", Eager: EagerFails}, "the step was compiled with torch.compile (inductor), and the failure does not need it"},
		{Compiled{Backend: "", Eager: EagerAll}, "the step was compiled with torch.compile when it was recorded; every replay ran eager (--no-compile)"},
		{Compiled{Backend: "1", Eager: EagerOther, EagerFailure: "host_check"}, "with another error (host_check): torch.compile changes how it fails"},
	} {
		assert.Contains(t, tc.c.Words(), tc.want)
	}
}
