package reduction_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
)

// TestCompileProbe: a batch whose meta says its step was compiled with
// torch.compile ends with one replay of the minimal batch eager (the
// candidate's meta says replay_compile=eager), whose answer says whether
// the failure needs the compile; with NoCompile (every replay eager) there
// is no probe; a step recorded eager gets neither.
func TestCompileProbe(t *testing.T) {
	for _, tc := range []struct {
		name      string
		meta      string
		eager     string // what the step does eager: "same", "pass" or "other"
		noCompile bool
		want      *regress.Compiled
		probes    int
	}{
		{"needs compile", "inductor", "pass", false, &regress.Compiled{Backend: "inductor", Eager: regress.EagerPasses}, 1},
		{"fails eager too", "inductor", "same", false, &regress.Compiled{Backend: "inductor", Eager: regress.EagerFails}, 1},
		{"fails otherwise", "1", "other", false, &regress.Compiled{Backend: "1", Eager: regress.EagerOther,
			EagerFailure: "host_check(cpu) IndexError: index out of range in self [IndexError]"}, 1},
		{"no compile", "inductor", "pass", true, &regress.Compiled{Backend: "inductor", Eager: regress.EagerAll}, 0},
		{"eager step", "", "pass", false, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := labelBatch(8)
			b.Step = &fixtures.Step{Module: "train", Qualname: "step"}
			if tc.meta != "" {
				b.Meta = map[string]string{fixtures.MetaCompiled: tc.meta}
			}
			label := b.Tensor("label").Tensor
			label.StoreInt(5, 9) // sample 5: the culprit
			step := func(b *fixtures.Batch) signature.Signature {
				bad := false
				label := b.Tensor("label").Tensor
				for i := int64(0); i < b.Samples; i++ {
					bad = bad || label.LoadInt(i) == 9
				}
				switch {
				case !bad:
					return pass
				case b.Meta[fixtures.ReplayCompileKey] != fixtures.ReplayCompileEager || tc.eager == "same":
					return raise("RuntimeError: index out of bounds: 0 <= tmp2 < 8")
				case tc.eager == "other":
					return raise("IndexError: index out of range in self")
				}
				return pass
			}
			path := recordStep(t, b, step)
			res, err := reduce(t, b, path, newStep(step), reduction.Options{NoCompile: tc.noCompile})
			require.NoError(t, err)
			require.Len(t, res.Findings, 1)
			assert.Equal(t, []int{5}, res.Findings[0].Indices)
			assert.Equal(t, tc.want, res.Compiled)
			assert.Equal(t, tc.probes, res.Phases[reduction.PhaseCompile].Replays)
			assert.Empty(t, res.OtherFailures, "the eager probe's failure is no other failure of the run")
			// Reduced eager, the fixture's tests replay it eager (the
			// collector reads the batch's meta).
			for _, name := range []string{"batch.bin", "without_culprits.bin"} {
				got, err := fixtures.Read(filepath.Join(res.Fixtures[0], name))
				require.NoError(t, err)
				want := ""
				if tc.noCompile {
					want = fixtures.ReplayCompileEager
				}
				assert.Equal(t, want, got.Meta[fixtures.ReplayCompileKey], name)
			}
		})
	}
}
