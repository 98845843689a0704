package replay

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/testenv"
)

// shellCommands is testdata/shell_commands.json: the exec backend's
// commands and the words they are given, {batch} standing for Batch. The
// collector's test (python/test_exec_quote.py) reads the same table.
type shellCommands struct {
	Batch    string
	Commands []struct {
		What    string
		Argv    []string
		Want    []string
		Refused bool
	}
}

func readShellCommands(t *testing.T) shellCommands {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "shell_commands.json"))
	require.NoError(t, err)
	var table shellCommands
	require.NoError(t, json.Unmarshal(data, &table))
	require.NotEmpty(t, table.Commands)
	return table
}

// Every form of a POSIX shell's invocation gets {batch} quoted in its
// script and nowhere else; a command whose script cannot be told for
// certain is refused.
func TestCommandArgsTable(t *testing.T) {
	t.Parallel()
	table := readShellCommands(t)
	for _, c := range table.Commands {
		args, err := commandArgs(c.Argv, table.Batch)
		if c.Refused {
			assert.Error(t, err, "%s: %q gives %q", c.What, c.Argv, args)
			continue
		}
		if assert.NoError(t, err, "%s: %q", c.What, c.Argv) {
			assert.Equal(t, c.Want, append([]string{c.Argv[0]}, args...), "%s", c.What)
		}
	}
}

// The run directory travels into a script inside quotes: a placeholder of
// the user's own that would put it there unquoted is refused.
func TestCommandArgsReserved(t *testing.T) {
	t.Parallel()
	_, err := commandArgs([]string{"sh", "-c", "cat " + runDirQuotedArg + "/x {batch}"}, RunDirArg+"/batch.bin")
	assert.ErrorContains(t, err, runDirQuotedArg)
	// The user's {rundir} in a script is quoted as {batch} is.
	args, err := commandArgs([]string{"sh", "-c", "cat {batch} >{rundir}/copy"}, RunDirArg+"/batch.bin")
	require.NoError(t, err)
	assert.Equal(t, []string{"-c", "cat '" + runDirQuotedArg + "/batch.bin' >'" + runDirQuotedArg + "'/copy"}, args)
}

// hostileNames are names of a directory that a shell reads as code, or
// splits, where a path holding one is inserted into a script unquoted (or
// quoted before the directory is inserted): the commands of the tests below
// create $PWNED when they run what the name holds.
var hostileNames = []string{
	"with blank",
	"$(touch $PWNED)",
	"a'$(touch $PWNED)'b",
	"a'`touch $PWNED`'b",
	"`touch $PWNED`",
	`"$(touch $PWNED)"`,
	"new\nline",
	"tab\there;touch $PWNED",
}

// shellReplays are exec commands, each a shell in another spelling, that
// exit 7 when the candidate file is there and 9 when it is not.
var shellReplays = []string{
	"sh -c " + shellQuote("test -f {batch} && exit 7; exit 9"),
	"sh -ec " + shellQuote("test -f {batch} && exit 7; exit 9"),
	"sh -e -c " + shellQuote("test -f {batch} && exit 7; exit 9"),
	"sh -c -e " + shellQuote("test -f {batch} && exit 7; exit 9"),
	"bash -xc " + shellQuote("test -f {batch} && exit 7; exit 9"),
	"bash --norc -c " + shellQuote("test -f {batch} && exit 7; exit 9"),
	"bash -o pipefail -c " + shellQuote("test -f {batch} && exit 7; exit 9"),
	"bash -eo pipefail -c " + shellQuote("cat {batch} | cat >/dev/null && exit 7; exit 9"),
	"sh -c " + shellQuote(`test -f "$1" && exit 7; exit 9`) + " sh {batch}",
}

// A run directory whose name a shell would read as code or split: the
// command's script gets the candidate's path quoted whatever the name
// holds, so that nothing in it runs and the command finds the file.
func TestExecQuoteHostileTempRoot(t *testing.T) {
	t.Parallel()
	for _, name := range hostileNames {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			root := filepath.Join(base, name)
			require.NoError(t, os.Mkdir(root, 0o700))
			pwned := filepath.Join(base, "PWNED")
			for _, replay := range shellReplays {
				be := exampleBackend(t, Options{Kind: KindExec, TempRoot: root, Replay: replay, Env: []string{"PWNED=" + pwned}}, "four_class_targets")
				v := replayOK(t, be, keep([]int64{0, 1}))
				assert.Equal(t, 7, v.Result.ExitCode, "%s: stderr %q", replay, v.Result.Stderr)
				assert.NoFileExists(t, pwned, "%s ran what the directory's name holds", replay)
				os.Remove(pwned)
				require.NoError(t, be.Close())
				emptyDir(t, root)
			}
		})
	}
}

// The most hostile of names, for a Python command run cold and warm (the
// fork server's sys.argv: no shell reads it).
func TestExecQuoteHostilePython(t *testing.T) {
	t.Parallel()
	py := testenv.Python(t, "torch")
	script := filepath.Join(entryDir(t), "exec_reader.py")
	for _, noZygote := range []bool{true, false} {
		base := t.TempDir()
		root := filepath.Join(base, strings.Join(hostileNames, ""))
		require.NoError(t, os.Mkdir(root, 0o700))
		be := exampleBackend(t, Options{Kind: KindExec, TempRoot: root, NoZygote: noZygote,
			Replay: shellQuote(py) + " " + shellQuote(script) + " {batch} --exit 7"}, "four_class_targets")
		v := replayOK(t, be, keep([]int64{0, 1}))
		assert.Equal(t, 7, v.Result.ExitCode, "cold %v: stderr %q", noZygote, v.Result.Stderr)
		assert.Equal(t, !noZygote, v.Zygote)
		require.NoError(t, be.Close())
		emptyDir(t, root)
	}
}

// A relative temporary root whose name starts with "-": the candidate's
// path is absolute, never read as an option.
func TestExecQuoteRelativeTempRoot(t *testing.T) {
	t.Chdir(t.TempDir())
	require.NoError(t, os.Mkdir("-n", 0o700))
	be := exampleBackend(t, Options{Kind: KindExec, TempRoot: "-n", Replay: "sh -c " + shellQuote("cat {batch} >/dev/null && exit 7; exit 9")}, "four_class_targets")
	v := replayOK(t, be, keep([]int64{0, 1}))
	assert.Equal(t, 7, v.Result.ExitCode, "stderr %q", v.Result.Stderr)
	v = replayOK(t, newBackend(t, Options{Kind: KindExec, TempRoot: "-n", Replay: "cat {batch}"}, exampleBatch(t, "four_class_targets")), whole)
	assert.Equal(t, 0, v.Result.ExitCode, "stderr %q", v.Result.Stderr)
}

// A command whose shell's script reduce cannot find for certain is an
// error of New that names the command and the fix.
func TestExecQuoteRefused(t *testing.T) {
	t.Parallel()
	for replay, fix := range map[string]string{
		"env A=1 sh -c 'test -f {batch}'":      "sh -c '...'",
		"sh -T x -c 'test -f {batch}'":         "inside the script",
		"bash --init-file=x -c 'true {batch}'": "inside the script",
	} {
		_, err := New(Options{Kind: KindExec, Replay: replay, Batch: exampleBatch(t, "four_class_targets")})
		if assert.Error(t, err, replay) {
			assert.Contains(t, err.Error(), fmt.Sprintf("--replay %q", replay))
			assert.Contains(t, err.Error(), fix)
		}
	}
}

// Under the Slurm launcher the run directory is made on the node, in its
// TMPDIR (the fake srun runs the job here), or in --shared-dir: the
// wrapper and the Runner insert it quoted into the script.
func TestExecQuoteHostileSlurm(t *testing.T) {
	fake, err := filepath.Abs("testdata/fakeslurm")
	require.NoError(t, err)
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_SRUN_ONCE", "")
	for _, shared := range []bool{false, true} {
		base := t.TempDir()
		root := filepath.Join(base, strings.Join(hostileNames, ""))
		require.NoError(t, os.Mkdir(root, 0o700))
		pwned := filepath.Join(base, "PWNED")
		o := Options{Kind: KindExec, Launcher: LauncherSlurm, Notice: func(string) {}, Env: []string{"PWNED=" + pwned}}
		if shared {
			o.SharedDir = root
		} else {
			t.Setenv("TMPDIR", root)
		}
		for _, replay := range shellReplays {
			o.Replay = replay
			be := exampleBackend(t, o, "four_class_targets")
			v := replayOK(t, be, keep([]int64{0, 1}))
			assert.Equal(t, 7, v.Result.ExitCode, "shared %v: %s: stderr %q", shared, replay, v.Result.Stderr)
			assert.NoFileExists(t, pwned, "shared %v: %s ran what the directory's name holds", shared, replay)
			os.Remove(pwned)
			require.NoError(t, be.Close())
			emptyDir(t, root)
		}
	}
}
