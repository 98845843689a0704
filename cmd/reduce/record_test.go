package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/testenv"
)

// TestRecordCommand is `reduce record -- COMMAND` on programs of our own in
// the four shapes real training programs take (testdata/record): an image
// classifier whose step is a loop body inside train(...), over a
// random_split Subset; a GPT script of top-level code that makes its own
// batches (--batch-fn) and fetches the next before its backward; a
// LightningCLI script; a Transformers script with the Trainer. No line of
// them names reduce. Each is recorded as its README would run it (reduce
// record exits with its status, 1), the crash file names the batch's
// dataset indices, `reduce --batch crash.bin` with no other flag replays the
// command and names the injected item, and the fixture's tests run it
// again through the collector: the minimal batch xfails while open.
func TestRecordCommand(t *testing.T) {
	bin := testenv.ReduceBinary(t)
	for _, c := range []struct {
		name, prog string
		python     func(testing.TB) string
		args       []string
		id         string // the culprit's dataset index; "" for a batch function's
		wrapped    string // the index in the dataset a Subset wraps
	}{
		{name: "classifier", prog: "classifier.py", python: torchPython, args: []string{"--epochs", "1"}, id: "459", wrapped: "357"},
		{name: "gpt", prog: "gpt.py", python: torchPython, args: []string{"--max_iters=40"}},
		{name: "lightning_cli", prog: "lightning_cli.py", python: testenv.PythonLightning,
			args: []string{"fit", "--trainer.max_epochs=1", "--trainer.accelerator=cpu", "--trainer.logger=false", "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false"}, id: "123"},
		{name: "trainer", prog: "trainer_cls.py", python: testenv.PythonTransformers,
			args: []string{"--output_dir", "out", "--per_device_train_batch_size", "8", "--num_train_epochs", "1", "--report_to", "none", "--use_cpu", "--save_strategy", "no"}, id: "41"},
	} {
		t.Run(c.name, func(t *testing.T) {
			py := c.python(t)
			t.Parallel()
			proj := t.TempDir()
			data, err := os.ReadFile(filepath.Join("testdata", "record", c.prog))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(proj, c.prog), data, 0o644))
			env := append(os.Environ(), "HF_HUB_OFFLINE=1", "OMP_NUM_THREADS=1", "PYTHONPATH=")
			flags := []string{"record"}
			if c.id == "" {
				flags = append(flags, "--batch-fn", strings.TrimSuffix(c.prog, ".py")+":get_batch")
			}
			rec := exec.Command(bin, append(append(flags, "--", py, c.prog), c.args...)...)
			rec.Dir, rec.Env = proj, env
			out, err := rec.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			assert.Equal(t, 1, exit.ExitCode(), "reduce record exits with the command's status:\n%s", out)
			require.Contains(t, string(out), "reduce: recorded the batch whose step raised", "%s", out)
			b, err := fixtures.Read(filepath.Join(proj, "crash.bin"))
			require.NoError(t, err)
			cmd, err := b.Command()
			require.NoError(t, err)
			require.NotNil(t, cmd)
			assert.Equal(t, c.id != "", b.DatasetIndices(), "%v", b.Meta)
			if c.id != "" {
				assert.Contains(t, b.SampleIDs, c.id)
			}

			outDir := t.TempDir()
			red := exec.Command(bin, "--batch", "crash.bin", "--json", "-q", "--out", outDir)
			red.Dir, red.Env = proj, env
			sum := runSummary(t, red)
			require.Len(t, sum.Culprits, 1, "%+v", sum)
			cul := sum.Culprits[0]
			if c.id != "" {
				assert.Equal(t, []string{c.id}, cul.IDs)
			}
			require.NotEmpty(t, cul.Elements)
			assert.Contains(t, []float64{10, 77, 3, 2}, cul.Elements[0].Value, "%+v", cul.Elements[0])
			if c.wrapped != "" {
				report, err := os.ReadFile(filepath.Join(sum.Fixture, "report.md"))
				require.NoError(t, err)
				assert.Contains(t, string(report), "dataset index `"+c.id+"` (`"+c.wrapped+"` in the dataset the Subset wraps)")
			}

			tests := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", outDir)
			tests.Dir, tests.Env = proj, append(env, testenv.BinaryEnv+"="+bin)
			got, err := tests.CombinedOutput()
			require.NoError(t, err, "%s", got)
			assert.Regexp(t, `\d+ passed.*1 xfailed`, string(got))
			if c.name == "classifier" { // the program changed since: its loader's dataset is another
				changed := strings.Replace(string(data), "def __init__(self, n=600, bad=357):", "def __init__(self, n=610, bad=357):", 1)
				require.NotEqual(t, string(data), changed)
				require.NoError(t, os.WriteFile(filepath.Join(proj, c.prog), []byte(changed), 0o644))
				again := exec.Command(bin, "--batch", "crash.bin", "-q", "--out", t.TempDir())
				again.Dir, again.Env = proj, env
				got, err := again.CombinedOutput()
				require.ErrorAs(t, err, &exit, "%s", got)
				assert.Equal(t, 2, exit.ExitCode(), "%s", got)
				assert.Contains(t, string(got), "crash.bin cannot be replayed: the program raised ValueError: Sum of input lengths does not equal the length of the input dataset! before torch.utils.data.dataset.Subset:500 gave its first batch")
				require.NoError(t, os.WriteFile(filepath.Join(proj, c.prog), data, 0o644))
			}
			entries, err := os.ReadDir(proj)
			require.NoError(t, err)
			for _, e := range entries { // the replays wrote nothing where the command runs
				assert.Contains(t, []string{c.prog, "crash.bin", "out", "config.yaml", "__pycache__"}, e.Name())
			}
		})
	}
}

func torchPython(t testing.TB) string { return testenv.Python(t, "torch") }
