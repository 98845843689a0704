package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RecordOptions are those of `reduce record -- COMMAND`.
type RecordOptions struct {
	Out     string   // the crash file (a distributed run's ranks: OUT.rank{R}.EXT)
	BatchFn string   // MODULE:FUNCTION that makes the batches, for a loop with no DataLoader
	State   bool     // also the weights and optimizer state the failing frames hold
	Argv    []string // the command
	Env     []string // its environment; nil: reduce's
	TempDir string   // where the startup hook's directory goes; "": the system's
}

// Recorded is what Record did: the command's exit status (128+N for a
// death by signal N) and the crash files it wrote.
type Recorded struct {
	Status int
	Files  []string
}

// Record runs the command as it is, its standard streams reduce's, with
// reduce's startup hook in every Python process it starts (HookDir,
// reduce_batch.command). SIGTERM, SIGHUP and SIGQUIT are passed on to it,
// and SIGINT unless the terminal sent it (terminalSent); reduce waits for
// the command whatever it gets.
func Record(ctx context.Context, o RecordOptions) (Recorded, error) {
	if len(o.Argv) == 0 {
		return Recorded{}, errors.New("record: no command: reduce record -- python train.py ...")
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return Recorded{}, err
	}
	if st, err := os.Stat(filepath.Dir(out)); err != nil || !st.IsDir() {
		return Recorded{}, fmt.Errorf("record: -o %s: its directory does not exist", o.Out)
	}
	path, err := exec.LookPath(o.Argv[0])
	if err != nil {
		return Recorded{}, fmt.Errorf("record: the command %q: %w", o.Argv[0], err)
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	prior := ""
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == "PYTHONPATH" {
			prior = v
		}
	}
	dir, pythonPath, err := HookDir(o.TempDir, prior)
	if err != nil {
		return Recorded{}, err
	}
	defer os.RemoveAll(dir)
	conf, _ := json.Marshal(map[string]any{"out": out, "batch_fn": o.BatchFn, "state": o.State, "hook_dir": dir})
	before := crashFiles(out)
	cmd := exec.CommandContext(ctx, path, o.Argv[1:]...)
	cmd.Args[0] = o.Argv[0]
	cmd.Env = MergeEnv(env, []string{"PYTHONPATH=" + pythonPath, HookEnvRecord + "=" + string(conf)})
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return Recorded{}, fmt.Errorf("record: %s: %w", o.Argv[0], err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if s != syscall.SIGINT || !terminalSent() {
					cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	r := Recorded{Status: 0}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.Status = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Status = 128 + int(ws.Signal())
		}
	case err != nil:
		return r, fmt.Errorf("record: %s: %w", o.Argv[0], err)
	}
	for f, mt := range crashFiles(out) {
		if t, ok := before[f]; !ok || !t.Equal(mt) {
			r.Files = append(r.Files, f)
		}
	}
	slices.Sort(r.Files)
	return r, nil
}

// terminalSent says whether a SIGINT reduce got came from its terminal
// (Ctrl-C), which sends it to the whole foreground process group, the
// command included: reduce is in that group. Else (kill -INT, a CI's
// timeout) reduce passes it on.
func terminalSent() bool {
	pgrp, err := unix.IoctlGetInt(int(os.Stdin.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// crashFiles are out and its ranks' files (reduce_batch.hook_torchrun.ranked)
// with their modification times.
func crashFiles(out string) map[string]time.Time {
	ext := filepath.Ext(out)
	names, _ := filepath.Glob(globQuote(out[:len(out)-len(ext)]) + ".rank[0-9]*" + globQuote(ext))
	m := map[string]time.Time{}
	for _, f := range append(names, out) {
		if st, err := os.Stat(f); err == nil {
			m[f] = st.ModTime()
		}
	}
	return m
}

func globQuote(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '*' || c == '?' || c == '[' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}
