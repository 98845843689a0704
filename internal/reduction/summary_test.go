package reduction_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
)

// twoFindings is a result of two culprit sets, one with an element and
// one by a relation, with another failure met, on Slurm, resumed and
// interrupted.
func twoFindings() *reduction.Result {
	passing := 3.0
	want := signature.Recorded("IndexError: Target 4 is out of bounds.")
	return &reduction.Result{
		Want: want, WantNote: "a note", Mode: reduction.ModeSamples, ModeReason: "the failure depends on which samples are in the batch",
		Findings: []reduction.Finding{
			{Indices: []int{4}, IDs: []string{"img-4"}, Elements: []reduction.Element{{Element: regress.Element{
				Tensor: "target", Index: []int64{4}, Value: 4, Passing: &passing, Rule: "valid range [0, 4)"}}}},
			{Indices: []int{1, 2}, Relation: &regress.Relation{Kind: "equal", Text: "key[1] = key[2] = 7",
				Elements: []regress.ElementRef{{Tensor: "key", Index: []int64{1}}, {Tensor: "key", Index: []int64{2}}}},
				Elements: []reduction.Element{{Element: regress.Element{Tensor: "key", Index: []int64{1}, Value: 7}},
					{Element: regress.Element{Tensor: "key", Index: []int64{2}, Value: 7}}}},
		},
		Fixtures:      []string{"out/a", "out/b"},
		Replays:       12,
		Resumed:       3,
		Phases:        map[reduction.Phase]reduction.PhaseCount{reduction.PhaseSamples: {Replays: 12, Resumed: 3}},
		OtherFailures: []regress.OtherFailure{{Signature: signature.Recorded("ValueError: other"), Count: 2}},
		Launch:        replay.LaunchInfo{Launcher: replay.LauncherSlurm, Nodes: []string{"n1", "n2"}, Jobs: 14, Retried: 2, Unresolved: map[string]int{replay.SlurmPreempted: 1}},
		Seconds:       1.25,
		Partial:       true,
	}
}

// TestResultText: what the main job prints for a person, the first
// fixture's path last.
func TestResultText(t *testing.T) {
	var out bytes.Buffer
	twoFindings().WriteText(&out)
	assert.Equal(t, `signature: host_check(cpu) IndexError: Target N is out of bounds. [IndexError]
  (a note)
mode: samples (the failure depends on which samples are in the batch)
culprit: samples [4] img-4
  target[4] = 4 triggers the failure; 3 passes (valid range [0, 4))
  fixture: out/a
culprit: samples [1 2]
  relation: key[1] = key[2] = 7 (equal values fail; either one changed to a value found nowhere in the batch passes)
  fixture: out/b
other failure (not followed), 2 times: host_check(cpu) ValueError: other [ValueError]
slurm: 14 jobs on n1,n2, 2 retried, 1 lost map[preempted:1]
replays: 12 in 1.2s, 3 answers from the journal (interrupted: partial)
out/a
`, out.String())

	size := &reduction.Result{Want: signature.Signature{Family: signature.FamilyOOM}, Mode: reduction.ModeSize, ModeReason: "out of memory",
		Size: &regress.SizeResult{SmallestFailing: 5, LargestPassing: 4}, Findings: []reduction.Finding{{Indices: []int{0, 1, 2, 3, 4}, ContentFree: true}},
		Fixtures: []string{"out/oom"}, Replays: 4, Seconds: 2}
	out.Reset()
	size.WriteText(&out)
	assert.Equal(t, "signature: oom\nmode: size (out of memory)\nsize: 5 samples fail, 4 pass\nreplays: 4 in 2.0s\nout/oom\n", out.String())
}

// TestResultSummary: the --json summary lists every culprit set with its
// fixture, and decodes to itself.
func TestResultSummary(t *testing.T) {
	res := twoFindings()
	s := res.Summary()
	assert.Equal(t, "summary", s.Event)
	assert.Equal(t, "out/a", s.Fixture)
	require.Len(t, s.Culprits, 2)
	assert.Equal(t, "out/b", s.Culprits[1].Fixture)
	assert.Equal(t, []string{}, s.Culprits[1].IDs)
	assert.Equal(t, res.Phases, s.Phases)
	data, err := json.Marshal(s)
	require.NoError(t, err)
	var back reduction.Summary
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, s, back)
	assert.Contains(t, string(data), `"signature_note":"a note"`)
	assert.NotContains(t, string(data), `"shape"`)
}
