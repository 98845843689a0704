package replay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunnerStartFailure(t *testing.T) {
	r, root := faultRunner(t, testLong)
	for _, path := range []string{"/nonexistent/worker", "reduce-no-such-program-on-path", "/dev/null"} {
		res := r.Run(context.Background(), Command{Path: path, TempDir: true, Files: map[string][]byte{"c": nil}})
		if res.Err == nil || res.Started || res.ExitCode != -1 || res.Harness || res.TimedOut {
			t.Errorf("%s: want a start failure: %s", path, describe(res))
		}
		assertEmpty(t, root)
	}
}

func TestRunnerBadFileName(t *testing.T) {
	r, root := faultRunner(t, testLong)
	for _, name := range []string{"", ".", "..", "a/b", "../escape"} {
		res := r.Run(context.Background(), Command{Path: "/bin/true", Files: map[string][]byte{name: nil}})
		if res.Err == nil || res.Started {
			t.Errorf("Files[%q]: want an error: %s", name, describe(res))
		}
	}
	assertEmpty(t, root)
}

func TestRunnerCancel(t *testing.T) {
	r, root := faultRunner(t, testLong)
	readyFile := filepath.Join(t.TempDir(), "ready")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if _, err := os.Stat(readyFile); err == nil {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	res := r.Run(ctx, faultCmd(t, "hang", readyEnv+"="+readyFile))
	if !res.Canceled || res.TimedOut || res.Err != nil || res.Harness {
		t.Fatalf("want cancelled: %s", describe(res))
	}
	if res.Signal != syscall.SIGINT {
		t.Errorf("want killed by SIGINT: %s", describe(res))
	}
	if !bytes.Contains(res.Stderr, []byte("worker: hanging")) {
		t.Errorf("stderr %q", res.Stderr)
	}
	assertClean(t, res, root)
}

func TestRunnerCanceledBeforeStart(t *testing.T) {
	r, root := faultRunner(t, testLong)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := r.Run(ctx, faultCmd(t, "exit1"))
	if !res.Canceled || res.Started || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("want not started: %s", describe(res))
	}
	assertEmpty(t, root)
}

func TestRunnerCommandTimeout(t *testing.T) {
	r, root := faultRunner(t, testLong)
	r.Grace = -1 // SIGKILL at once
	cmd := faultCmd(t, "hang")
	cmd.Timeout = testShort
	res := r.Run(context.Background(), cmd)
	if !res.TimedOut || res.Signal != syscall.SIGKILL {
		t.Fatalf("want killed by SIGKILL at the command's timeout: %s", describe(res))
	}
	assertClean(t, res, root)
}

func TestRunnerStdin(t *testing.T) {
	r, root := faultRunner(t, testLong)
	in := junk(3, 3<<20) // more than a pipe holds
	cmd := faultCmd(t, "cat")
	cmd.Stdin = in
	r.CaptureLimit = 4 << 20
	res := r.Run(context.Background(), cmd)
	if res.ExitCode != 0 || !bytes.Equal(res.Stdout, in) {
		t.Fatalf("cat: %d bytes back of %d: %s", len(res.Stdout), len(in), describe(res))
	}
	assertClean(t, res, root)

	// A child that never reads its stdin does not block Run.
	cmd = faultCmd(t, "ignore-stdin")
	cmd.Stdin = in
	res = r.Run(context.Background(), cmd)
	if res.ExitCode != 0 || res.Err != nil {
		t.Fatalf("ignore-stdin: %s", describe(res))
	}
	assertClean(t, res, root)

	// No Stdin is /dev/null: cat sees EOF at once.
	res = r.Run(context.Background(), faultCmd(t, "cat"))
	if res.ExitCode != 0 || len(res.Stdout) != 0 {
		t.Fatalf("no stdin: %s", describe(res))
	}
}

func TestRunnerEnvAndRunDir(t *testing.T) {
	r, root := faultRunner(t, testLong)
	r.Environ = []string{
		"PATH=/usr/bin:/bin", "KEEP=inherited", "OVERRIDE=inherited",
		"PYTHONINSPECT=1", "FORCE_COLOR=1", "malformed",
	}
	cmd := faultCmd(t, "env", "OVERRIDE=command")
	cmd.Env = append(cmd.Env, DeviceEnv(DeviceCUDA, true)...)
	cmd.Env = append(cmd.Env, PythonEnv()...)
	cmd.Args = append(cmd.Args, RunDirArg+"/candidate.bin")
	cmd.Dir = RunDirArg
	res := r.Run(context.Background(), cmd)
	if res.ExitCode != 0 {
		t.Fatalf("env: %s", describe(res))
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(res.Stdout), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := env[k]; dup {
			t.Errorf("%s set twice", k)
		}
		env[k] = v
	}
	for k, want := range map[string]string{
		"KEEP": "inherited", "OVERRIDE": "command", "CUDA_LAUNCH_BLOCKING": "1",
		"PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1",
	} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	for _, k := range []string{"PYTHONINSPECT", "FORCE_COLOR", "malformed"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s inherited", k)
		}
	}
	dir := env[RunDirEnv]
	if filepath.Dir(dir) != root || env["TMPDIR"] != dir {
		t.Errorf("REDUCE_RUN_DIR=%q TMPDIR=%q, want a directory in %s", dir, env["TMPDIR"], root)
	}
	want := "args=[\"-test.run=^$\" \"" + dir + "/candidate.bin\"]\nwd=" + dir + "\n"
	if string(res.Stderr) != want {
		t.Errorf("stderr %q, want %q", res.Stderr, want)
	}
	assertClean(t, res, root)
}

func TestRunnerNoRunDir(t *testing.T) {
	r, root := faultRunner(t, testLong)
	cmd := faultCmd(t, "env")
	cmd.Files = nil
	res := r.Run(context.Background(), cmd)
	if res.ExitCode != 0 || bytes.Contains(res.Stdout, []byte(RunDirEnv+"=")) {
		t.Fatalf("a run dir without asking: %s", describe(res))
	}
	assertClean(t, res, root)
}

func TestRunnerCleansUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Log("as root, a mode-0 directory is removable anyway")
	}
	r, root := faultRunner(t, testLong)
	res := r.Run(context.Background(), faultCmd(t, "chmod"))
	if res.ExitCode != 0 || res.Err != nil {
		t.Fatalf("chmod: %s", describe(res))
	}
	assertClean(t, res, root)
}

func TestRunnerTempFile(t *testing.T) {
	r, root := faultRunner(t, testLong)
	path, cleanup, err := r.TempFile("cand-*.bin", []byte("data"))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != root || !strings.HasPrefix(filepath.Base(path), "cand-") {
		t.Errorf("path %s", path)
	}
	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Errorf("content %q", b)
	}
	res := r.Run(context.Background(), Command{Path: "/bin/cat", Args: []string{path}})
	if string(res.Stdout) != "data" {
		t.Errorf("cat: %s", describe(res))
	}
	cleanup()
	cleanup()
	assertEmpty(t, root)
}

func TestRunnerDefaults(t *testing.T) {
	var r Runner
	c := Command{}
	if r.timeout(&c) != DefaultTimeout || r.grace() != DefaultGrace ||
		r.captureLimit() != DefaultCaptureLimit || r.waitDelay() != DefaultWaitDelay {
		t.Errorf("zero Runner: timeout %v grace %v limit %d waitdelay %v", r.timeout(&c), r.grace(), r.captureLimit(), r.waitDelay())
	}
	r = Runner{Timeout: -1, Grace: -1, WaitDelay: -1}
	if r.timeout(&c) != 0 || r.grace() != 0 || r.waitDelay() != DefaultWaitDelay {
		t.Errorf("negative: timeout %v grace %v waitdelay %v", r.timeout(&c), r.grace(), r.waitDelay())
	}
	c.Timeout = time.Second
	if r.timeout(&c) != time.Second {
		t.Errorf("Command.Timeout ignored")
	}
}

func TestRunnerTrue(t *testing.T) {
	var r Runner
	res := r.Run(context.Background(), Command{Path: "true"})
	if res.Err != nil || res.ExitCode != 0 || res.Stdout != nil || res.Stderr != nil || res.Truncated {
		t.Fatalf("true: %s", describe(res))
	}
	assertGone(t, res.PID)
	res = r.Run(context.Background(), Command{Path: "false"})
	if res.Err != nil || res.ExitCode != 1 {
		t.Fatalf("false: %s", describe(res))
	}
}

// Streams are written into the run's directory before the child starts; a
// writer's error, a bad name or a name also in Files fails the run before
// it starts, and leaves nothing behind.
func TestRunnerStreams(t *testing.T) {
	r, root := faultRunner(t, testLong)
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error {
			_, err := io.WriteString(w, s)
			return err
		}
	}
	res := r.Run(context.Background(), Command{Path: "sh", Args: []string{"-c", `cat "$REDUCE_RUN_DIR/c.bin" "$REDUCE_RUN_DIR/d"`},
		Files: map[string][]byte{"d": []byte(" and a file")}, Streams: map[string]func(io.Writer) error{"c.bin": write("streamed")}})
	if res.Err != nil || res.ExitCode != 0 || string(res.Stdout) != "streamed and a file" {
		t.Errorf("want the streamed file read: %s", describe(res))
	}
	for name, c := range map[string]Command{
		"error": {Path: "/bin/true", Streams: map[string]func(io.Writer) error{"c": func(io.Writer) error { return errors.New("no candidate") }}},
		"name":  {Path: "/bin/true", Streams: map[string]func(io.Writer) error{"a/b": write("x")}},
		"twice": {Path: "/bin/true", Files: map[string][]byte{"c": nil}, Streams: map[string]func(io.Writer) error{"c": write("x")}},
	} {
		res := r.Run(context.Background(), c)
		if res.Err == nil || res.Started {
			t.Errorf("%s: want an error before the start: %s", name, describe(res))
		}
	}
	assertEmpty(t, root)
	// A launcher that sends files along gets them written out.
	files, err := (&Command{Files: map[string][]byte{"d": []byte("f")}, Streams: map[string]func(io.Writer) error{"c": write("s")}}).allFiles()
	if err != nil || string(files["c"]) != "s" || string(files["d"]) != "f" {
		t.Errorf("allFiles: %q, %v", files, err)
	}
}
