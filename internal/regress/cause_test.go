package regress

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
)

// readRegression reads a fixture directory's minimal batch and record
// (batch.bin and fixture.json), as a reduction wrote them.
func readRegression(t *testing.T, dir string) *Regression {
	t.Helper()
	b, err := fixtures.Read(filepath.Join(dir, BatchFile))
	require.NoError(t, err)
	js, err := os.ReadFile(filepath.Join(dir, RecordFile))
	require.NoError(t, err)
	reg := &Regression{Batch: b}
	require.NoError(t, json.Unmarshal(js, &reg.Record), dir)
	return reg
}

// absPathInTitle finds an absolute path (POSIX, Windows or under "~") in
// the title or headline of report.md.
var absPathInTitle = regexp.MustCompile(`(?:^|[\s(\x60'"])(?:/|~/|[A-Za-z]:\\)\S`)

// TestCauseOfRealReductions: report.md of fixtures that reduce wrote from
// batches recorded by real torch (testdata/cause: Debian's torch 1.13 and
// PyPI's 2.15, each a reduction of a script's failing batch with
// `reduce --batch crash.bin`) names the contract or rule the inputs break,
// or the step's own exception, with the fix, and offers no upstream issue:
//
//   - step_own_raise: the step's own ValueError (it wants 3 channels);
//   - step_target_rank2, op_target_rank2: a [N, 1] target for
//     cross_entropy, "0D or 1D target tensor expected, multi-target not
//     supported" under both torches (on the CPU 2.15 prints 1.13's text);
//   - step_all_ignored: a last batch whose every target is -100: the mean
//     loss is NaN under both torches (neither raises), and the step's
//     finiteness check raises;
//   - step_batchnorm_one: BatchNorm1d in training on one sample, "Expected
//     more than 1 value per channel when training" under both.
//
// Their titles and headlines hold no absolute path, though the record names
// the step by its script's absolute path.
func TestCauseOfRealReductions(t *testing.T) {
	want := map[string][]string{
		"step_own_raise": {"The step raised this exception itself", "`train_step` in `train.py`",
			"`ValueError: expected RGB images with 3 channels, got 1`", "fix: if the step's check is right",
			"No upstream issue: the step's own code raised it."},
		"step_target_rank2": {"A misuse of `cross_entropy`, not a bug of PyTorch's",
			"`RuntimeError: 0D or 1D target tensor expected, multi-target not supported`",
			"contract: `target` must hold one class index per sample, shape [N], for `input` [N, C]",
			"fix: a column of labels [N, 1] needs `target.squeeze(1)`", "No upstream issue: these inputs break the op's contract."},
		"op_target_rank2": {"A misuse of `torch.nn.functional.cross_entropy`",
			"here `input` is float32 [1, 3] and `target` is int64 [1, 1]", "`target.squeeze(1)`",
			"No upstream issue: these inputs break the op's contract."},
		"step_all_ignored": {"documented rule of `torch.nn.functional.cross_entropy` and `torch.nn.functional.nll_loss`",
			"`target` (int64 [1]) holds -100 (`ignore_index`) in every element", "`FloatingPointError: loss is nan`",
			"rule: with `reduction='mean'`", "0/0 = NaN", "fix: skip a batch with no target left",
			"No upstream issue: the batch breaks a documented rule."},
		"step_batchnorm_one": {"A documented rule of `torch.nn.functional.batch_norm`",
			"`ValueError: Expected more than 1 value per channel when training, got input size torch.Size([1, 16])`",
			"rule: In training mode BatchNorm normalizes each channel by the statistics of the batch",
			"fix: Train on batches of two samples or more: `DataLoader(..., drop_last=True)`",
			"No upstream issue: the batch breaks a documented rule."},
	}
	dirs, err := filepath.Glob(filepath.Join("testdata", "cause", "*"))
	require.NoError(t, err)
	met := map[string]int{}
	for _, dir := range dirs {
		name, _, _ := strings.Cut(filepath.Base(dir), "-")
		words, ok := want[name]
		require.True(t, ok, "%s: no expectations", dir)
		met[name]++
		reg := readRegression(t, dir)
		if strings.HasPrefix(name, "step_") {
			require.True(t, filepath.IsAbs(strings.Split(reg.Record.Step, ":")[0]), "%s: the record names its step by its script's path", dir)
			require.NotNil(t, reg.Record.Raised, "%s: the reduction read where the exception was raised", dir)
		}
		report := string(regressReport(t.TempDir(), &reg.Record, reg))
		i := strings.Index(report, "\n## Cause\n")
		require.GreaterOrEqual(t, i, 0, "%s: no cause section:\n%s", dir, report)
		end := strings.Index(report[i+1:], "\n## ")
		require.Greater(t, end, 0)
		section := report[i+1 : i+1+end]
		for _, w := range words {
			assert.Contains(t, section, w, dir)
		}
		if name == "step_own_raise" {
			assert.Contains(t, report, "The step's own check raised (see Cause)", dir)
			assert.NotContains(t, report, "against the op's contract", dir)
		}
		assert.NotContains(t, report, "Upstream issue", dir)
		assert.NotContains(t, report, "ready to paste", dir)
		lines := strings.SplitN(report, "\n", 4)
		for _, l := range lines[:3] {
			assert.NotRegexp(t, absPathInTitle, l, "%s: an absolute path in the title or headline", dir)
		}
		if strings.HasPrefix(name, "step_") {
			assert.Equal(t, `# Regression: train.py:train\_step`, lines[0], dir)
		}
		if testing.Verbose() {
			t.Logf("%s:\n%s", dir, section)
		}
	}
	for name := range want {
		assert.NotZero(t, met[name], "no fixture of %s in testdata/cause", name)
	}
}

// TestCommittedReportsUpstream: a committed fixture's report.md ends with
// an upstream issue exactly when judge finds its inputs valid, and has a
// cause section when it names a misuse, a rule or the step's own
// exception: a committed report written before the judge changed is stale
// (regenerate it with scripts/regress-fixtures.sh).
func TestCommittedReportsUpstream(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "fixtures", "regress", "*"))
	require.NoError(t, err)
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, RecordFile)); err != nil {
			continue
		}
		reg := readRegression(t, dir)
		report, err := os.ReadFile(filepath.Join(dir, ReportFile))
		require.NoError(t, err)
		j := judge(&reg.Record, reg)
		assert.Equal(t, j.verdict == verdictValid, strings.Contains(string(report), "\n## Upstream issue\n"), "%s: upstream issue", dir)
		assert.Equal(t, causeSection(j) != "", strings.Contains(string(report), "\n## Cause\n"), "%s: cause section", dir)
	}
}

// TestHeadlineText: titles and headlines keep no directory of a path (a
// POSIX, Windows or home path), and no user or host name.
func TestHeadlineText(t *testing.T) {
	red := newRedactor(&Record{}, &Regression{Batch: &fixtures.Batch{SampleIDs: []string{"img-007"},
		Meta: map[string]string{"user": "alice", "host": "gpu-node-7"}}}).people()
	for in, want := range map[string]string{
		"/home/alice/proj/train.py:train_step":                       "train.py:train_step",
		"/tmp/scratch/t2/train.py:train_step":                        "train.py:train_step",
		`C:\Users\bob\proj\train.py:step`:                            "train.py:step",
		"~/proj/train.py:step":                                       "train.py:step",
		"the step f: host_check in sample 7 (img-007) on gpu-node-7": "the step f: host_check in sample 7 (img-007) on <host>",
		"reading '/data/alice/x.png' failed, mean loss 0/0":          "reading 'x.png' failed, mean loss 0/0",
		"torch.Size([1, 16]) at https://example.org/a/b":             "torch.Size([1, 16]) at https://example.org/a/b",
	} {
		assert.Equal(t, want, headlineText(shortName(in), red), in)
	}
	assert.Equal(t, "train.py:train_step", shortName("/a/b/train.py:train_step"))
	assert.Equal(t, "textclf:train_step", shortName("textclf:train_step"))
	assert.Equal(t, "mod:Model.step", shortName("mod:Model.step"))
}
