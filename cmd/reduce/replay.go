package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/internal/reduction"
	"reduce/internal/signature"
	"reduce/internal/trust"
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
		&cli.BoolFlag{Name: "trust-step", Hidden: true}, // gone: reduce trust FILE
		&cli.StringFlag{Name: "replay", Usage: "exec backend: the `COMMAND` to run, {batch} standing for the candidate file (alone, it chooses --backend exec)"},
		&cli.StringFlag{Name: "replay-format", Value: "bin", Usage: "exec backend: candidate `FORMAT`: bin, npz or safetensors"},
		&cli.DurationFlag{Name: "timeout", Value: replay.DefaultTimeout, Usage: "stop a replay after `DURATION` (SIGINT, then SIGKILL) and count it as a timeout"},
		&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Value: 1, Usage: "run `N` replays at once"},
		&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed of the replayed step's random generators (REDUCE_SEED; torch.manual_seed in the torch backend)"},
		&cli.StringFlag{Name: "gpus", Usage: "give each replay slot its own device: `LIST` such as 0,1"},
		&cli.BoolFlag{Name: "no-zygote", Usage: "torch and exec backends: one interpreter per candidate instead of forking from a zygote (exec: a Python --replay command runs warm by default)"},
		&cli.BoolFlag{Name: "no-compile", Usage: "torch backend: replay a step compiled with torch.compile eager (torch._dynamo disabled); without it each replay compiles, with Inductor's caches shared, and the reduction ends with one eager replay of the minimal batch: whether the failure needs the compile"},
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
// read from path: every candidate it replays is a view of b. What the flags
// leave unset comes from b (replay.Options.ForBatch: the backend, the step,
// the interpreter, the device), which refuses a batch the backend has
// nothing to run for before anything is replayed; its notes go to stderr.
// v says whether the batch is the user's, so that it runs what it names.
func newBackend(c *cli.Context, path string, b *fixtures.Batch, v trust.Verdict) (replay.Backend, error) {
	if c.Bool("trust-step") {
		return nil, usagef("--trust-step is gone: a file runs what it names once you trust it: reduce trust %s (it prints what it runs)", fixtures.ShellQuote(path))
	}
	gpus, err := replay.ParseGPUs(c.String("gpus"))
	if err != nil {
		return nil, usagef("--gpus %q: %v", c.String("gpus"), err)
	}
	var kind replay.Kind // unset: ForBatch chooses
	if c.IsSet("backend") {
		kind = replay.Kind(c.String("backend"))
	}
	blocking := !c.Bool("async")
	// The replayed step's random generators (torch.manual_seed in the
	// torch backend; a user's step may read REDUCE_SEED too), the same for
	// `reduce replay` as for the reduction that wrote a fixture.
	seed := c.Int64("seed")
	o, err := replay.Options{
		Batch: b, File: path, Kind: kind, Device: c.String("device"), Python: c.String("python"),
		Entry: c.String("entry"), Trusted: v.Mine, Untrusted: v.How, Replay: c.String("replay"),
		ReplayFormat: fixtures.Format(c.String("replay-format")), Jobs: c.Int("jobs"), GPUs: gpus, Timeout: c.Duration("timeout"),
		NoZygote: c.Bool("no-zygote"), NoCompile: c.Bool("no-compile"), WarmImport: c.StringSlice("warm-import"), Blocking: &blocking, Seed: &seed,
		Notice: func(msg string) {
			if !c.Bool("quiet") {
				fmt.Fprintf(c.App.ErrWriter, "reduce: %s\n", fixtures.Printable(msg))
			}
		},
		Launcher: replay.Launcher(c.String("launcher")), SlurmArgs: c.String("slurm-args"), SharedDir: c.String("shared-dir"),
		QueueTimeout: replay.FlagQueueTimeout(c.IsSet("queue-timeout"), c.Duration("queue-timeout")), Retries: replay.FlagRetries(c.Int("retries")),
	}.ForBatch()
	if err != nil {
		return nil, usageErr(err)
	}
	if s := c.String("device-memory"); s != "" && s != "0" {
		if o.DeviceMemory, err = fixtures.ParseSize(s); err != nil {
			return nil, usagef("--device-memory %q: %v", s, err)
		}
	}
	if o.MaxSize, err = maxSize(c); err != nil {
		return nil, err
	}
	be, err := replay.New(o)
	if err != nil {
		return nil, usageErr(err)
	}
	return be, nil
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

// replayOnce is `reduce replay FILE`: one replay of the batch itself,
// judged (reduction.CheckReplay), printed, and exit 3 when it does not
// show what the file says it must.
func replayOnce(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("replay takes one batch file, got %d arguments", c.NArg())
	}
	level, err := signature.ParseMatchLevel(c.String("match"))
	if err != nil {
		return usagef("--match: %v", err)
	}
	ctx, stop := replay.SignalContext(context.Background()) // stopped last, after the cleanup
	defer stop()
	read, b, mine, err := readBatch(c, c.Args().First())
	if err != nil {
		return err
	}
	path := read.Path
	be, err := newBackend(c, path, b, mine)
	if err != nil {
		return err
	}
	defer be.Close()
	v, err := be.Replay(ctx, &fixtures.View{}) // the batch itself
	if err != nil {
		if ctx.Err() != nil {
			return withCode(ExitInterrupted, fmt.Errorf("replay %s: interrupted", path))
		}
		return fmt.Errorf("replay %s: %w", path, err)
	}
	check := reduction.CheckReplay(path, b, v, level)
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, check); err != nil {
			return err
		}
	} else {
		check.WriteText(c.App.Writer)
	}
	return withCode(ExitNoRepro, check.Err())
}

// writeJSON writes v as one line of JSON, a file's strings' control
// characters (bidi overrides too) as \u escapes (fixtures.EscapeJSON).
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	if err == nil {
		_, err = w.Write(fixtures.EscapeJSON(b.Bytes()))
	}
	return err
}
