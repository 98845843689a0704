package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
)

// backendFlags are the flags that choose and tune the replay backend; the
// main job shares them.
func backendFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "backend", Value: "go", Usage: "replay with `KIND`: go (built-in kernels, no Python), torch (real PyTorch) or exec (--replay)"},
		&cli.StringFlag{Name: "device", Usage: "go: cpu or cuda (CUDA emulation); torch: the torch `DEVICE` (cpu, cuda, cuda:N); default from the recorded failure"},
		&cli.StringFlag{Name: "python", Usage: "the Python `INTERPRETER` that has torch (default: the one that recorded the batch, else /usr/bin/python3 or python3 on PATH)"},
		&cli.StringFlag{Name: "entry", Usage: "torch backend: call `MODULE:FUNCTION` with the loaded batch instead of the built-in op (alone, it chooses --backend torch); a path's folder goes first on sys.path"},
		&cli.BoolFlag{Name: "trust-step", Usage: "torch backend: replay the step the batch records (and the class it rebuilds) from any file; without it, only from a file under the working directory that is not a standard-library or installed module"},
		&cli.StringFlag{Name: "replay", Usage: "exec backend: the `COMMAND` to run, {batch} standing for the candidate file (alone, it chooses --backend exec)"},
		&cli.StringFlag{Name: "replay-format", Value: "bin", Usage: "exec backend: candidate `FORMAT`: bin, npz or safetensors"},
		&cli.DurationFlag{Name: "timeout", Value: replay.DefaultTimeout, Usage: "stop a replay after `DURATION` (SIGINT, then SIGKILL) and count it as a timeout"},
		&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Value: 1, Usage: "run `N` replays at once"},
		&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed of the replayed step's random generators (REDUCE_SEED; torch.manual_seed in the torch backend)"},
		&cli.StringFlag{Name: "gpus", Usage: "give each replay slot its own device: `LIST` such as 0,1"},
		&cli.BoolFlag{Name: "no-zygote", Usage: "torch and exec backends: one interpreter per candidate instead of forking from a zygote (exec: a Python --replay command runs warm by default)"},
		&cli.StringSliceFlag{Name: "warm-import", Usage: "exec backend: `MODULES` (comma-separated) the fork server of a Python --replay command imports once, besides torch"},
		&cli.BoolFlag{Name: "async", Usage: "do not set CUDA_LAUNCH_BLOCKING=1 / AMD_SERIALIZE_KERNEL=3 for replays"},
		&cli.StringFlag{Name: "launcher", Value: string(replay.LauncherLocal), Usage: "run replays with `LAUNCHER`: local, or slurm (each replay a Slurm job through srun; -j is the jobs in flight)"},
		&cli.StringFlag{Name: "slurm-args", Usage: "slurm launcher: srun `OPTIONS` for every job, such as '--partition=gpu --gres=gpu:1 --time=5'"},
		&cli.StringFlag{Name: "shared-dir", Usage: "slurm launcher: a `DIR` the nodes see at the same path; candidates go through it instead of the job's standard input"},
		&cli.DurationFlag{Name: "queue-timeout", Value: replay.DefaultQueueTimeout, Usage: "slurm launcher: a job not started within `DURATION` is lost (retried, then counted as infra)"},
		&cli.IntFlag{Name: "retries", Value: replay.DefaultRetries, Usage: "slurm launcher: submit a lost job (cancelled, preempted, node failure, queue timeout) again up to `N` times"},
		&cli.StringFlag{Name: "device-memory", Usage: "go and torch backends: the memory the op may allocate, emulating a device of that `SIZE` (such as 47.5MiB): a replay whose op needs more fails with an out-of-memory error; 0 or unset: no limit"},
	}
}

// newBackend builds the backend the flags describe, bound to the batch b
// read from path: every candidate it replays is a view of b. Before anything is replayed it refuses a batch the backend has
// nothing to run for (replay.Step), and notes on stderr a backend that
// --entry, --replay or the step the batch records chose. A batch that
// records its step and no op replays it on the torch backend, with the
// interpreter that recorded it unless --python names one. b chooses the go backend's default device:
// CUDA emulation for a batch whose recorded failure came from a GPU.
func newBackend(c *cli.Context, path string, b *fixtures.Batch) (replay.Backend, error) {
	gpus, err := replay.ParseGPUs(c.String("gpus"))
	if err != nil {
		return nil, usagef("--gpus %q: %v", c.String("gpus"), err)
	}
	var kind replay.Kind
	if c.IsSet("backend") {
		kind = replay.Kind(c.String("backend"))
	}
	o := replay.Options{Kind: kind, Entry: c.String("entry"), Replay: c.String("replay")}
	if b.Op == "" {
		o.Step, o.StepClass = b.Step, b.StepClass()
	}
	kind, chosenBy, err := replay.KindFor(o)
	if err != nil {
		return nil, usageErr(err)
	}
	if chosenBy != "" && !c.Bool("quiet") {
		fmt.Fprintf(c.App.ErrWriter, "reduce: %s runs on the %s backend: using it\n", chosenBy, kind)
	}
	what, err := replay.Step(o, b)
	if err != nil {
		return nil, usagef("%s: %v", path, err)
	}
	if kind != replay.KindTorch || o.Entry != "" {
		o.Step, o.StepClass = nil, nil
	} else if o.Step != nil && !c.Bool("quiet") {
		fmt.Fprintf(c.App.ErrWriter, "reduce: replaying %s\n", what)
	}
	python := c.String("python")
	if python == "" && kind == replay.KindTorch && b.Meta["executable"] != "" {
		// The interpreter that recorded the batch: the user's own torch.
		if _, err := os.Stat(b.Meta["executable"]); err == nil {
			python = b.Meta["executable"]
		}
	}
	device := c.String("device")
	if device == "" && kind == replay.KindGo && b.Error != nil {
		switch signature.Recorded(b.Error.Text).Backend {
		case signature.BackendCUDA, signature.BackendHIP, signature.BackendTriton:
			device = "cuda"
		}
	}
	blocking := !c.Bool("async")
	var deviceMemory int64
	if s := c.String("device-memory"); s != "" && s != "0" {
		if deviceMemory, err = parseSize(s); err != nil {
			return nil, usagef("--device-memory %q: %v", s, err)
		}
	}
	// The replayed step's random generators (torch.manual_seed in the
	// torch backend; a user's step may read REDUCE_SEED too), the same for
	// `reduce replay` as for the reduction that wrote a fixture.
	seed := c.Int64("seed")
	be, err := replay.New(replay.Options{
		Batch: b, File: path, Kind: kind, Device: device, Python: python, Entry: o.Entry, Step: o.Step, StepClass: o.StepClass, TrustStep: c.Bool("trust-step"),
		Replay: o.Replay, ReplayFormat: fixtures.Format(c.String("replay-format")), Jobs: c.Int("jobs"),
		GPUs: gpus, Timeout: c.Duration("timeout"), NoZygote: c.Bool("no-zygote"), WarmImport: c.StringSlice("warm-import"),
		Notice: func(msg string) {
			if !c.Bool("quiet") {
				fmt.Fprintf(c.App.ErrWriter, "reduce: %s\n", msg)
			}
		},
		Blocking: &blocking,
		Seed:     &seed, DeviceMemory: deviceMemory,
		Launcher: replay.Launcher(c.String("launcher")), SlurmArgs: c.String("slurm-args"), SharedDir: c.String("shared-dir"),
		QueueTimeout: slurmFlag(c, "queue-timeout", c.Duration("queue-timeout")), Retries: retriesFlag(c),
	})
	if err != nil {
		return nil, usageErr(err)
	}
	return be, nil
}

// slurmFlag is a slurm launcher flag's value for replay.Options: zero (the
// option unset) unless the user gave it, so that the local launcher does
// not reject a default it was never given.
func slurmFlag(c *cli.Context, name string, v time.Duration) time.Duration {
	if !c.IsSet(name) {
		return 0
	}
	if v == 0 {
		return -1 // --queue-timeout 0: no bound
	}
	return v
}

// retriesFlag is --retries for replay.Options, where 0 means the default
// and negative none.
func retriesFlag(c *cli.Context) int {
	n := c.Int("retries")
	if n <= 0 {
		return -1
	}
	return n
}

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "replay a batch once, in a fresh process, and say whether it reproduces its recorded failure",
		UsageText: "reduce replay [--backend go|torch|exec] [--device DEV] [--json] FILE",
		Description: "Prints the verdict, the failure signature and whether it matches the recorded one.\n" +
			"Exit status 0 when it reproduces, 3 when it does not.\n\n" +
			"Examples:\n" +
			"   reduce replay crash.bin\n" +
			"   reduce replay --backend torch --device cuda crash.bin\n" +
			"   reduce replay --backend exec --replay 'python step.py {batch}' crash.bin",
		Flags: append(backendFlags(),
			&cli.StringFlag{Name: "match", Value: "strict", Usage: "what counts as the same failure: strict, family or any"},
			&cli.BoolFlag{Name: "json", Usage: "print the verdict as JSON"},
			maxSizeFlag(),
		),
		Action: action(replayOnce),
	}
}

// replayVerdict is `reduce replay --json`.
type replayVerdict struct {
	File      string               `json:"file"`
	Backend   string               `json:"backend"`
	Device    string               `json:"device"`
	Signature signature.Signature  `json:"signature"`
	Recorded  *signature.Signature `json:"recorded"`
	Match     string               `json:"match"`
	// Reproduces: it failed as recorded; for a batch that must pass
	// (Expect "pass": a fixture's boundary or neighbour), it passed.
	Reproduces bool `json:"reproduces"`
	// Note says why a replay reproduces a recording that names no assert.
	Note     string             `json:"note,omitempty"`
	Expect   string             `json:"expect,omitempty"`
	Exit     signature.ExitInfo `json:"exit"`
	Seconds  float64            `json:"seconds"`
	Stderr   string             `json:"stderr"`
	Launcher string             `json:"launcher,omitempty"`
	JobID    string             `json:"job_id,omitempty"`
	Node     string             `json:"node,omitempty"`
}

func replayOnce(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("replay takes one batch file, got %d arguments", c.NArg())
	}
	level, err := signature.ParseMatchLevel(c.String("match"))
	if err != nil {
		return usagef("--match: %v", err)
	}
	path := c.Args().First()
	b, err := readBatch(c, path)
	if err != nil {
		return err
	}
	be, err := newBackend(c, path, b)
	if err != nil {
		return err
	}
	defer be.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	v, err := be.Replay(ctx, &fixtures.View{}) // the batch itself

	if err != nil {
		if ctx.Err() != nil {
			return withCode(ExitInterrupted, fmt.Errorf("replay %s: interrupted", path))
		}
		return fmt.Errorf("replay %s: %w", path, err)
	}
	out := replayVerdict{
		File: path, Backend: string(v.Backend), Device: v.Device, Signature: v.Signature, Match: string(level),
		Exit: v.Exit, Seconds: v.Duration.Seconds(), Stderr: string(v.Result.Stderr),
	}
	if v.Launcher != replay.LauncherLocal {
		out.Launcher, out.JobID, out.Node = string(v.Launcher), v.JobID, v.Node
	}
	// What the replay must show: the recorded failure (one that names no
	// assert is reproduced by an assert it allows, as the reduction's
	// confirmation would keep it), a pass for a fixture's boundary or
	// neighbour batch, any failure for a batch that records none.
	judge := signature.Judge{Level: level}
	expectPass := b.Meta[regress.MetaExpect] == regress.ExpectPass
	switch {
	case expectPass:
		out.Expect = regress.ExpectPass
		judge.Want = signature.Signature{Family: signature.FamilyPass}
	case b.Error != nil:
		rec := signature.Recorded(b.Error.Text)
		out.Recorded = &rec
		judge.Want, judge.Recorded = rec, true
	}
	ruling := judge.Rule(v.Signature)
	out.Reproduces, out.Note = ruling.Outcome == signature.Reproduces, ruling.Note
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		w := c.App.Writer
		fmt.Fprintf(w, "%s: replayed with %s on %s in %.3fs", path, out.Backend, out.Device, out.Seconds)
		if out.JobID != "" {
			fmt.Fprintf(w, " (slurm job %s on %s)", out.JobID, out.Node)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "signature: %s\n", out.Signature)
		if out.Recorded != nil {
			fmt.Fprintf(w, "recorded:  %s\n", *out.Recorded)
		}
		verdict := "reproduces"
		if out.Note != "" {
			verdict += " (" + out.Note + ")"
		}
		switch {
		case expectPass && out.Reproduces:
			verdict = "passes, as expected (a fixture's passing batch)"
		case expectPass:
			verdict = "fails, and it should pass (a fixture's passing batch)"
		case !out.Reproduces:
			verdict = "does not reproduce"
		}
		fmt.Fprintf(w, "verdict:   %s (match %s)\n", verdict, level)
	}
	if expectPass && !out.Reproduces {
		return withCode(ExitNoRepro, fmt.Errorf("%s should pass (a fixture's boundary or neighbour batch) but got %s", path, out.Signature))
	}
	if !out.Reproduces && b.Error == nil {
		return withCode(ExitNoRepro, fmt.Errorf("%s records no failure, and its replay did not fail: got %s (try another --backend or --device)", path, out.Signature))
	}
	if !out.Reproduces {
		return withCode(ExitNoRepro, fmt.Errorf("%s does not reproduce its recorded failure: got %s (try --match family, another --backend or --device; or the bug was fixed since it was recorded)", path, out.Signature))
	}
	return nil
}
