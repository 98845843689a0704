package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/testenv"
)

// project copies testdata/project into a temporary directory with
// reduce_batch.py vendored, as the README says, and records the crash
// there; it returns the project's directory and the fixture's, reduced by
// `reduce --batch crash.bin` from the project.
func project(t *testing.T, crash string) (proj, fixture string) {
	t.Helper()
	py := testenv.Python(t, "torch", "pytest")
	bin := reduceBinary(t)
	proj = t.TempDir()
	for _, f := range []string{"train.py", "textclf.py"} {
		data, err := os.ReadFile(filepath.Join("testdata", "project", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(proj, f), data, 0o644))
	}
	// The repository's pytest configuration: its rootdir, whose conftest.py
	// the fixture's tests see.
	require.NoError(t, os.WriteFile(filepath.Join(proj, "pytest.ini"), []byte("[pytest]\n"), 0o644))
	rec, err := exec.Command(bin, "recorder").Output()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(proj, "reduce_batch.py"), rec, 0o644))
	train := exec.Command(py, "train.py", "--crash", crash, "--out", "crash.bin")
	train.Dir = proj
	out, err := train.CombinedOutput()
	require.Error(t, err, "the training run must crash:\n%s", out)
	cmd := exec.Command(bin, "--batch", "crash.bin", "--out", "regress", "--json", "-q")
	cmd.Dir = proj
	sum := runSummary(t, cmd)
	require.Len(t, sum.Fixtures, 1)
	return proj, filepath.Join(proj, sum.Fixtures[0])
}

// pytestOutcomes runs pytest over dir from the project's directory (the
// user's repository: its modules and reduce_batch.py importable; the
// fixture collected by the conftest.py reduce wrote at the root of --out)
// and returns each test's outcome by name ("minimal_batch",
// "passing_batch[boundary.bin]"), with the output.
func pytestOutcomes(t *testing.T, proj, dir string) (map[string]string, string) {
	t.Helper()
	py := testenv.Python(t, "torch", "pytest")
	cmd := exec.Command(py, "-m", "pytest", "-v", "-rA", "-p", "no:cacheprovider", dir)
	cmd.Dir = proj
	cmd.Env = append(os.Environ(), "PYTHONPATH="+proj, testenv.BinaryEnv+"="+reduceBinary(t))
	out, _ := cmd.CombinedOutput()
	res := map[string]string{}
	re := regexp.MustCompile(`(?m)^\S+/fixture\.json::(\S+) (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		res[m[1]] = m[2]
	}
	return res, string(out)
}

// dataFixLife writes the user's conftest.py, then asserts that the data
// test `data` fails saying `says` while the minimal batch is an expected
// failure, and passes once textclf.py's data pipeline is fixed (old to
// new).
func dataFixLife(t *testing.T, proj, dir, conftest, data, says, old, new string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(proj, "conftest.py"), []byte(conftest), 0o644))
	res, out := pytestOutcomes(t, proj, dir)
	assert.Equal(t, "FAILED", res[data], out)
	assert.Contains(t, out, says)
	assert.Equal(t, "XFAIL", res["minimal_batch"], out)
	edit(t, filepath.Join(proj, "textclf.py"), old, new)
	res, out = pytestOutcomes(t, proj, dir)
	assert.Equal(t, "PASSED", res[data], out)
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(data), old)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644))
}

// TestRegressionLifeStep follows a fixture through the collector over the
// life of a bug in the step, with real pytest and torch: a sequence longer
// than the model's learned positions. Before the fix the suite is green
// with the minimal batch xfailed; the step fixed (it truncates), the
// XPASS(strict) turns it red with the message that names the one data
// change that marks it fixed; marked fixed (`reduce fixed`: that one line
// of fixture.json), green; the bug put back, red, saying so.
func TestRegressionLifeStep(t *testing.T) {
	proj, dir := project(t, "length")
	collector, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "conftest.py"))
	require.NoError(t, err, "reduce writes its collector at the root of --out")
	assert.Contains(t, string(collector), "# reduce collector ")
	res, out := pytestOutcomes(t, proj, dir)
	assert.Equal(t, "XFAIL", res["minimal_batch"], out)
	assert.Equal(t, "PASSED", res["passing_batch[boundary.bin]"], out)
	assert.NotEmpty(t, res, "no test outcome read from pytest's output:\n%s", out)
	for name, o := range res {
		assert.NotEqual(t, "FAILED", o, "%s\n%s", name, out)
	}

	textclf := filepath.Join(proj, "textclf.py")
	orig, err := os.ReadFile(textclf)
	require.NoError(t, err)
	edit(t, textclf, `    logits = model(batch["tokens"], batch["lengths"])`,
		`    logits = model(batch["tokens"][:, :MAX_LEN], batch["lengths"].clamp(max=MAX_LEN))`)
	res, out = pytestOutcomes(t, proj, dir)
	assert.Equal(t, "FAILED", res["minimal_batch"], out)
	assert.Contains(t, out, "XPASS(strict)", out)
	rel, err := filepath.Rel(proj, dir)
	require.NoError(t, err)
	assert.Contains(t, out, `by changing "status": "open" to "status": "fixed" in `+filepath.Join(rel, "fixture.json"),
		"the message names the one data change that marks it fixed")
	assert.Contains(t, out, "reduce fixed "+rel, "and the command that makes it")
	assert.Equal(t, "PASSED", res["passing_batch[boundary.bin]"], out)

	record := filepath.Join(dir, "fixture.json")
	before, err := os.ReadFile(record)
	require.NoError(t, err)
	fixed := exec.Command(reduceBinary(t), "fixed", dir)
	fixed.Dir = proj
	got, err := fixed.CombinedOutput()
	require.NoError(t, err, "%s", got)
	after, err := os.ReadFile(record)
	require.NoError(t, err)
	assert.Equal(t, strings.Replace(string(before), `"status": "open"`, `"status": "fixed"`, 1), string(after))
	res, out = pytestOutcomes(t, proj, dir)
	assert.Equal(t, "PASSED", res["minimal_batch"], out)
	assert.Equal(t, "PASSED", res["passing_batch[boundary.bin]"], out)

	require.NoError(t, os.WriteFile(textclf, orig, 0o644))
	res, out = pytestOutcomes(t, proj, dir)
	assert.Equal(t, "FAILED", res["minimal_batch"], out)
	assert.Contains(t, out, "the bug is back", out)
	assert.Contains(t, out, "IndexError", out)
}

// TestRegressionLifeData follows the collector's data test through a fix
// in the data pipeline: a label mapping that gives one sample class 4 of 4.
// Until the user defines reduce_sample (in the repository's conftest.py,
// not the collector reduce keeps) it skips with the how-to; defined, it
// fails on the bad label; with the mapping fixed it passes, while the
// minimal batch (which holds the bad label) stays an expected failure.
func TestRegressionLifeData(t *testing.T) {
	proj, dir := project(t, "label")
	res, out := pytestOutcomes(t, proj, dir)
	assert.Equal(t, "XFAIL", res["minimal_batch"], out)
	data := "culprit_sample[txt-037:label]"
	assert.Equal(t, "SKIPPED", res[data], out)
	assert.Contains(t, out, "def reduce_sample", "the skip says how to define the fixture")

	conftest := "import pytest\nimport textclf\n\n\n@pytest.fixture\ndef reduce_sample():\n" +
		"    samples = {s[\"id\"]: s for s in textclf.Texts(crash=\"label\")}\n    return samples.__getitem__\n"
	require.NoError(t, os.WriteFile(filepath.Join(proj, "conftest.py"), []byte(conftest), 0o644))
	res, out = pytestOutcomes(t, proj, dir)
	assert.Equal(t, "FAILED", res[data], out)
	assert.Contains(t, out, "txt-037", out)
	assert.Equal(t, "XFAIL", res["minimal_batch"], out)

	edit(t, filepath.Join(proj, "textclf.py"), `s["label"] = CLASSES`, `s["label"] = CLASSES - 1`)
	res, out = pytestOutcomes(t, proj, dir)
	assert.Equal(t, "PASSED", res[data], out)
	assert.Equal(t, "XFAIL", res["minimal_batch"], out)
}

// TestRegressionLifeCollated: the data tests take the collated one-sample
// batch where reduce_sample returns one (the collate renames or adds keys:
// this one adds lengths and ids): a label out of range, and a sequence
// longer than the model's learned positions, whose data test is the length
// found by the shape search. Each fails on the recorded data and passes
// once the data pipeline is fixed.
func TestRegressionLifeCollated(t *testing.T) {
	conftest := "import pytest\nimport textclf\n\n\n@pytest.fixture\ndef reduce_sample():\n" +
		"    samples = {s[\"id\"]: s for s in textclf.Texts(crash=%[1]q)}\n" +
		"    collate = textclf.collate_renamed if %[1]q == \"renamed\" else textclf.collate\n" +
		"    return lambda sample_id: collate([samples[sample_id]])\n"
	for _, tc := range []struct{ crash, data, says, old, new string }{
		{"label", "culprit_sample[txt-037:label]", "want a value in [0, 3]", `s["label"] = CLASSES`, `s["label"] = CLASSES - 1`},
		// A collate that renames the Dataset's keys: the collated batch has them.
		{"renamed", "culprit_sample[txt-037:labels]", "want a value in [0, 3]", `s["label"] = CLASSES`, `s["label"] = CLASSES - 1`},
		{"length", "culprit_sample[txt-037:tokens]", "want at most 64", `s["tokens"] = torch.randint(1, VOCAB, (70,), generator=g)`,
			`s["tokens"] = torch.randint(1, VOCAB, (64,), generator=g)`},
	} {
		t.Run(tc.crash, func(t *testing.T) {
			proj, dir := project(t, tc.crash)
			if tc.crash == "renamed" {
				// The Dataset's sample lacks the batch's key: a failure that
				// says what to return, not a skip.
				own := "import pytest\nimport textclf\n\n\n@pytest.fixture\ndef reduce_sample():\n" +
					"    return {s[\"id\"]: s for s in textclf.Texts(crash=\"renamed\")}.__getitem__\n"
				require.NoError(t, os.WriteFile(filepath.Join(proj, "conftest.py"), []byte(own), 0o644))
				res, out := pytestOutcomes(t, proj, dir)
				assert.Equal(t, "FAILED", res[tc.data], out)
				assert.Contains(t, out, "the sample has no 'labels' (it has keys 'id', 'tokens', 'label', 'key')", out)
			}
			dataFixLife(t, proj, dir, fmt.Sprintf(conftest, tc.crash), tc.data, tc.says, tc.old, tc.new)
		})
	}
}

// TestRegressionLifeRules: the data tests of the rules that are no value
// of one element, each failing on the recorded data and passing once the
// data pipeline is fixed: a label read as a list of one, which the collate
// makes a column [N, 1] (the rank found by dropping its dim, through the
// Dataset's sample and through the collated one-sample batch); a last
// batch of unlabelled samples, every target -100 (no batch of the loader
// may hold it in every sample); and a last batch of one sample under
// BatchNorm (every batch of the loader at least 2).
func TestRegressionLifeRules(t *testing.T) {
	conftest := "import pytest\nimport textclf\n\n\n@pytest.fixture\ndef reduce_sample():\n" +
		"    samples = {s[\"id\"]: s for s in textclf.Texts(crash=%[1]q)}\n" +
		"    return (lambda sample_id: textclf.collate([samples[sample_id]])) if %[2]v else samples.__getitem__\n\n\n" +
		"@pytest.fixture\ndef reduce_loader():\n    return textclf.loader(%[1]q)\n"
	for _, tc := range []struct {
		crash, data, says, old, new string
		collated                    bool
	}{
		{"column", "culprit_sample[txt-015:label]", "rank of label = 1, want 0", `s["label"] = [s["label"]]`, `s["label"] = s["label"]`, false},
		{"column", "culprit_sample[txt-015:label]", "rank of label = 1, want 0", `s["label"] = [s["label"]]`, `s["label"] = s["label"]`, true},
		{"ignored", "loader_batches[label]", "holds label = -100 (the rule reduce found", "KEEP_UNLABELLED = True", "KEEP_UNLABELLED = False", false},
		{"small", "loader_batches[batch_size]", "holds 1 sample, want at least 2", "DROP_LAST = False", "DROP_LAST = True", false},
	} {
		t.Run(fmt.Sprintf("%s/collated=%v", tc.crash, tc.collated), func(t *testing.T) {
			proj, dir := project(t, tc.crash)
			collated := "False"
			if tc.collated {
				collated = "True"
			}
			res, out := pytestOutcomes(t, proj, dir)
			assert.Equal(t, "SKIPPED", res[tc.data], out)
			dataFixLife(t, proj, dir, fmt.Sprintf(conftest, tc.crash, collated), tc.data, tc.says, tc.old, tc.new)
		})
	}
}
