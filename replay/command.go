package replay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"reduce/fixtures"
)

// A recorded command (`reduce record -- COMMAND`) is replayed by the exec
// backend: its process runs again as recorded, with reduce's startup hook
// (HookDir: a sitecustomize.py of reduce's, chained to the one it shadows,
// and the package's zip), which hands the candidate over in place of the
// recorded loader's first batch (reduce_batch.command). On the CPU the
// process becomes the fork server at that point (handoverStart), so that a
// replay costs a fork and one step; on a GPU, or where the program
// initialized CUDA before its first batch, every replay is a fresh run.

// HookEnvRecord and HookEnvHandover are the variables the startup hook reads.
const (
	HookEnvRecord   = "REDUCE_RECORD"
	HookEnvHandover = "REDUCE_HANDOVER"
)

// handoverStart bounds how long a recorded command may take to reach its
// first batch, where it starts serving candidates.
var handoverStart = 10 * time.Minute

// HookDir writes the startup hook into a new directory under root (the
// system's temporary directory for ""): sitecustomize.py and the package's
// zip. pythonPath is the PYTHONPATH that puts both first, before what the
// environment's PYTHONPATH had (prior, which may be ""). The caller
// removes dir.
func HookDir(root, prior string) (dir, pythonPath string, err error) {
	if dir, err = fixtures.MkdirOwned(root, "reduce-hook-"); err != nil {
		return "", "", fmt.Errorf("replay: the startup hook: %w", err)
	}
	// The package's sitecustomize.py, which the collector writes too
	// (reduce_batch.command.fixture_run): the package's command module,
	// then the sitecustomize it shadows.
	for name, data := range map[string][]byte{"sitecustomize.py": packageFile("sitecustomize.py"), ZipName: PackageZip()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			os.RemoveAll(dir)
			return "", "", fmt.Errorf("replay: the startup hook: %w", err)
		}
	}
	pythonPath = dir + string(os.PathListSeparator) + filepath.Join(dir, ZipName)
	if prior != "" {
		pythonPath += string(os.PathListSeparator) + prior
	}
	return dir, pythonPath, nil
}

// newCommandBackend is the exec backend of a recorded command (o.Command).
func newCommandBackend(o Options) (Backend, error) {
	c := o.Command
	kind := normKind(o.Device)
	if kind == "" || strings.Contains(o.Device, ":") {
		return nil, fmt.Errorf("replay: --device %q: a recorded command takes cpu, cuda or rocm (it only sets the environment; the command picks its device)", o.Device)
	}
	python := cmp.Or(o.Python, c.Executable)
	if _, err := os.Stat(python); err != nil {
		return nil, fmt.Errorf("replay: the interpreter that recorded the command (%s) is not here: name one with --python: %w", fixtures.Printable(python), err)
	}
	if st, err := os.Stat(c.Cwd); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("replay: the directory the command was recorded in (%s) is not here: the command runs there", fixtures.Printable(c.Cwd))
	}
	e := &execBackend{bound: bound{src: o.src}, path: python, args: c.Argv, file: "batch.bin", format: fixtures.FormatBin,
		device: kind, dir: c.Cwd}
	var err error
	if e.hook, e.pythonPath, err = HookDir(o.runner().tempRoot(), c.Env["PYTHONPATH"]); err != nil {
		return nil, err
	}
	env := []string{}
	for k, v := range c.Env {
		env = append(env, k+"="+v)
	}
	handover := func(serve bool, slots int) string {
		h, _ := json.Marshal(map[string]any{"command": c, "batch": e.file, "serve": serve, "slots": slots,
			"scratch": map[bool]string{true: e.hook}[serve]})
		return HookEnvHandover + "=" + string(h)
	}
	base := append(append(env, PythonEnv()...), DeviceEnv(kind, o.blocking())...)
	base = append(append(base, o.env()...), "PYTHONPATH="+e.pythonPath)
	e.env = append(slices.Clip(base), handover(false, 0))
	e.set = o.settings(KindExec, kind)
	e.set.Replay = c.String()
	e.pool = o.pool(kind)
	if kind != DeviceCPU || o.NoZygote || o.slurm != nil {
		o.notice(fmt.Sprintf("replaying the recorded command, a fresh run for each candidate: %s", c.String()))
		return e, nil
	}
	prog := &pythonProgram{file: e.file, handover: &handoverProgram{argv: c.Argv, dir: c.Cwd}}
	t := &torchBackend{python: python, device: DeviceCPU, kind: kind, runner: o.runner(), program: prog,
		seenPIDs: map[int]bool{}, env: append(slices.Clip(base), handover(true, e.pool.Size()))}
	if err := t.setUp(e.pool); err != nil {
		e.release()
		os.RemoveAll(e.hook)
		return nil, err
	}
	start := time.Now()
	t.zmu.Lock()
	_, err = t.zygoteLocked()
	t.zmu.Unlock()
	if err != nil {
		os.RemoveAll(t.dir)
		msg := strings.TrimPrefix(err.Error(), "replay: ")
		o.notice("replaying the recorded command, a fresh run for each candidate (it cannot fork at its first batch: " + firstLine([]byte(msg)) + "): " + c.String())
		return e, nil
	}
	e.warm = t
	o.notice(fmt.Sprintf("replaying the recorded command, forked at its first batch for each candidate (it took %.1fs to get there, once): %s",
		time.Since(start).Seconds(), c.String()))
	return e, nil
}

// handoverProgram is a recorded command that serves candidates from its
// first batch on: the zygote is the command itself.
type handoverProgram struct {
	argv []string
	dir  string
}

func (p *pythonProgram) handoverOf() *handoverProgram {
	if p == nil {
		return nil
	}
	return p.handover
}
