package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"reduce/fixtures"
)

// goBackend re-executes the reduce binary as `reduce __worker --device D
// FILE`, one process per candidate, FILE the candidate written into the
// run's directory (which the worker maps, as fixtures.Read does a large
// file).
type goBackend struct {
	exe    string
	device string
	args   []string
	env    []string
	pool   *Pool
	set    Settings
	closed atomic.Bool
}

func newGoBackend(o Options) (Backend, error) {
	dev := strings.ToLower(strings.TrimSpace(o.Device))
	switch dev {
	case "":
		dev = DeviceCPU
	case DeviceCPU, DeviceCUDA:
	case "gpu", "nvidia":
		dev = DeviceCUDA
	default:
		return nil, fmt.Errorf("replay: --device %q: the go backend emulates cpu or cuda", o.Device)
	}
	exe := o.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("replay: go backend: cannot find the reduce binary to run as its worker: %w", err)
		}
	}
	if _, err := os.Stat(exe); err != nil {
		return nil, fmt.Errorf("replay: go backend: worker binary: %w", err)
	}
	g := &goBackend{exe: exe, device: dev, args: []string{WorkerCommand, "--device", dev}}
	if o.Abort {
		g.args = append(g.args, "--abort")
	}
	if o.DeviceMemory > 0 {
		g.args = append(g.args, "--device-memory", strconv.FormatInt(o.DeviceMemory, 10))
	}
	if dev == DeviceCUDA {
		g.env = append(g.env, DeviceEnv(DeviceCUDA, o.blocking())...)
	}
	g.env = append(g.env, o.env()...)
	g.set = o.settings(KindGo, dev)
	g.pool = o.pool(DeviceCUDA)
	return g, nil
}

func (g *goBackend) Kind() Kind { return KindGo }

func (g *goBackend) Settings() Settings { return g.set }

func (g *goBackend) Replay(ctx context.Context, b *fixtures.Batch) (Verdict, error) {
	if g.closed.Load() {
		return Verdict{Backend: KindGo, Device: g.device}, ErrClosed
	}
	start := time.Now()
	data, err := encodeBatch(b, fixtures.FormatBin)
	if err != nil {
		return Verdict{Backend: KindGo, Device: g.device}, err
	}
	args := append(g.args[:len(g.args):len(g.args)], RunDirArg+"/candidate.bin")
	res := g.pool.Run(ctx, Command{Path: g.exe, Args: args, Env: g.env,
		Streams: map[string]func(io.Writer) error{"candidate.bin": data}})
	return verdictOf(ctx, KindGo, g.device, res, start)
}

// Views: the worker applies a view to the mapped file wherever it can
// read it: not on Slurm without --shared-dir, whose node may not see it.
func (g *goBackend) Views() bool { return !g.pool.remote() }

// SourceDir: see Viewer.
func (g *goBackend) SourceDir() string { return g.pool.sourceDir() }

// ReplayView runs `reduce __worker --device D --view`, with the source's
// path and the view on its standard input: the worker maps the file and
// applies the view (fixtures.Batch.Apply), so that the candidate costs a
// copy of the rows it keeps, in the worker, and no file.
func (g *goBackend) ReplayView(ctx context.Context, src *fixtures.Source, v *fixtures.View) (Verdict, error) {
	if g.closed.Load() {
		return Verdict{Backend: KindGo, Device: g.device}, ErrClosed
	}
	start := time.Now()
	in, err := json.Marshal(viewRequest{Source: src.Path, View: v})
	if err != nil {
		return Verdict{Backend: KindGo, Device: g.device}, fmt.Errorf("replay: go backend: view: %w", err)
	}
	args := append(g.args[:len(g.args):len(g.args)], "--view")
	res := g.pool.Run(ctx, Command{Path: g.exe, Args: args, Env: g.env, Stdin: in, TempDir: true})
	return verdictOf(ctx, KindGo, g.device, res, start)
}

// viewRequest is what the go worker reads on its standard input with
// --view.
type viewRequest struct {
	Source string         `json:"source"`
	View   *fixtures.View `json:"view"`
}

func (g *goBackend) Close() error {
	g.closed.Store(true)
	return nil
}
