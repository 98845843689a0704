package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/internal/regress"
)

// signalStep is an exec backend's step: it fails like the recorded error
// where `reduce replay` says the candidate reproduces it, logs a line per
// candidate once it has decided, and from the fourth candidate on it takes
// a minute (ignoring SIGINT when $STEP_STUBBORN is set, so that only the
// kill after the grace ends it).
const signalStep = `fail=0
if "$REDUCE_BIN" replay "$1" >/dev/null 2>&1; then fail=1; fi
n=$(cat "$STEP_LOG" 2>/dev/null | wc -l)
echo "$n" >> "$STEP_LOG"
if [ "$n" -ge 3 ]; then
	if [ -n "$STEP_STUBBORN" ]; then trap '' INT; fi
	sleep 60
fi
if [ $fail = 1 ]; then
	echo "IndexError: Target -1 is out of bounds." >&2
	exit 1
fi
exit 0
`

// signaled runs reduce with the arguments args gives for the exec
// backend's flags under a fresh TMPDIR, sends sigs (one right after the
// other) once the step runs its fourth candidate (prior lines in its log
// count), and returns the exit status, the output and the TMPDIR.
func signaled(t *testing.T, stubborn bool, sigs []syscall.Signal, prior int, args func(backend ...string) []string) (code int, stdout, stderr, tmp string) {
	t.Helper()
	bin := reduceBinary(t)
	work := t.TempDir()
	tmp = filepath.Join(work, "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o755))
	step, log := filepath.Join(work, "step.sh"), filepath.Join(work, "log")
	require.NoError(t, os.WriteFile(step, []byte(signalStep), 0o644))
	require.NoError(t, os.WriteFile(log, []byte(strings.Repeat("x\n", prior)), 0o644))
	// reduce starts with SIGHUP at its default even where this test runs
	// under nohup (ignored: reduce then leaves it alone, as it must): a
	// signal this process handles is reset by exec, one it ignores is not.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cmd := exec.Command(bin, args("--backend", "exec", "--replay", "sh "+step+" {batch}")...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "STEP_LOG="+log, "REDUCE_BIN="+bin)
	if stubborn {
		cmd.Env = append(cmd.Env, "STEP_STUBBORN=1")
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(log)
		if bytes.Count(data, []byte("\n")) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("the fourth replay never ran:\n%s", errOut.String())
		}
	}
	for _, s := range sigs {
		require.NoError(t, cmd.Process.Signal(s))
		time.Sleep(10 * time.Millisecond)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("reduce still runs a minute after %v:\n%s", sigs, errOut.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode() // -1 when a signal killed it
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errOut.String(), tmp
}

// assertNothingLeft: no temporary directory of the run is left in tmp.
func assertNothingLeft(t *testing.T, tmp string) {
	t.Helper()
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	assert.Empty(t, left, "temporary directories left in TMPDIR")
}

// TestSignalsReduce: SIGHUP and SIGTERM stop `reduce --batch` as Ctrl-C
// does: exit 4, the best result so far written as a partial fixture, the
// lock on --out and the temporary directories gone. Two signals in a row
// (the replay in flight ignoring SIGINT) cut its grace short, and still
// leave no lock, no temporary directory and no half-written fixture.
func TestSignalsReduce(t *testing.T) {
	batch, err := filepath.Abs("../../fixtures/examples/offset_slice.bin")
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		sigs     []syscall.Signal
		stubborn bool
	}{
		{"SIGHUP", []syscall.Signal{syscall.SIGHUP}, false},
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}, false},
		{"SIGINT twice", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, true},
		{"SIGTERM then SIGHUP", []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "regress")
			code, stdout, stderr, tmp := signaled(t, tc.stubborn, tc.sigs, 0, func(backend ...string) []string {
				return append([]string{"--batch", batch, "--out", out, "-q"}, backend...)
			})
			assert.Equal(t, ExitInterrupted, code, stderr)
			assert.Contains(t, stderr, "interrupted")
			assert.NoFileExists(t, filepath.Join(out, ".reduce.lock"))
			assertNothingLeft(t, tmp)
			entries, err := os.ReadDir(out)
			require.NoError(t, err)
			var fixtures []string
			for _, e := range entries {
				switch {
				case e.Name() == regress.VendoredDir: // the package's zip beside conftest.py
				case e.IsDir() && strings.HasPrefix(e.Name(), "."):
					t.Errorf("a fixture's temporary directory is left: %s", e.Name())
				case e.IsDir():
					fixtures = append(fixtures, filepath.Join(out, e.Name()))
				}
			}
			if len(tc.sigs) == 1 {
				require.Len(t, fixtures, 1, "a partial fixture:\n%s", stderr)
				lines := strings.Split(strings.TrimSpace(stdout), "\n")
				assert.Equal(t, fixtures[0], lines[len(lines)-1], "the fixture's path is the last line")
			}
			for _, dir := range fixtures { // whole, or not there
				data, err := os.ReadFile(filepath.Join(dir, regress.RecordFile))
				require.NoError(t, err)
				var rec regress.Record
				require.NoError(t, json.Unmarshal(data, &rec))
				assert.True(t, rec.Partial, "marked partial")
				for _, f := range []string{regress.BatchFile, regress.ReportFile} {
					assert.FileExists(t, filepath.Join(dir, f))
				}
			}
		})
	}
}

// TestSignalsReplay: `reduce replay` stops on SIGHUP and SIGTERM as on
// Ctrl-C: exit 4, and its replay's run directory removed.
func TestSignalsReplay(t *testing.T) {
	batch, err := filepath.Abs("../../fixtures/examples/offset_slice.bin")
	require.NoError(t, err)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			// Three candidates logged already: the one replay is slow.
			code, _, stderr, tmp := signaled(t, false, []syscall.Signal{sig}, 3, func(backend ...string) []string {
				return append(append([]string{"replay"}, backend...), batch)
			})
			assert.Equal(t, ExitInterrupted, code, stderr)
			assert.Contains(t, stderr, "interrupted")
			assertNothingLeft(t, tmp)
		})
	}
}
