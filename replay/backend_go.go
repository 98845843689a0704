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

// goBackend re-executes the reduce binary as its worker, one process per
// candidate: `reduce __worker --device D --view` reads the source's path
// and the view on its standard input, maps the file and applies the view
// (fixtures.SourceFile.Apply), so that a candidate costs a copy of the rows
// it keeps, in the worker, and no file. On Slurm without --shared-dir,
// whose node may not see the file, the candidate is built here and
// travels as its file: `reduce __worker --device D FILE`.
type goBackend struct {
	bound
	exe    string
	device string
	args   []string
	env    []string
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
	g := &goBackend{bound: bound{src: o.src, pool: o.pool(DeviceCUDA)}, exe: exe, device: dev, args: []string{WorkerCommand, "--device", dev}}
	if o.Abort {
		g.args = append(g.args, "--abort")
	}
	if o.DeviceMemory > 0 {
		g.args = append(g.args, "--device-memory", strconv.FormatInt(o.DeviceMemory, 10))
	}
	if o.MaxSize > 0 {
		g.args = append(g.args, "--max-size", strconv.FormatInt(o.MaxSize, 10))
	}
	if dev == DeviceCUDA {
		g.env = append(g.env, DeviceEnv(DeviceCUDA, o.blocking())...)
	}
	g.env = append(g.env, o.env()...)
	g.set = o.settings(KindGo, dev)
	return g, nil
}

func (g *goBackend) Kind() Kind { return KindGo }

func (g *goBackend) Settings() Settings { return g.set }

func (g *goBackend) Replay(ctx context.Context, v *fixtures.View) (Verdict, error) {
	if g.closed.Load() {
		return Verdict{Backend: KindGo, Device: g.device}, ErrClosed
	}
	start := time.Now()
	args := g.args[:len(g.args):len(g.args)]
	c := Command{Path: g.exe, Env: g.env}
	if g.pool.remote() {
		data, err := candidateFile(g.src, v, fixtures.FormatBin)
		if err != nil {
			return Verdict{Backend: KindGo, Device: g.device}, err
		}
		c.Args = append(args, RunDirArg+"/candidate.bin")
		c.Streams = map[string]func(io.Writer) error{"candidate.bin": data}
	} else {
		in, err := json.Marshal(viewRequest{Source: g.src.Path, View: v})
		if err != nil {
			return Verdict{Backend: KindGo, Device: g.device}, fmt.Errorf("replay: go backend: view: %w", err)
		}
		c.Args, c.Stdin, c.TempDir = append(args, "--view"), in, true
	}
	return verdictOf(ctx, KindGo, g.device, g.pool.Run(ctx, c), start)
}

// viewRequest is what the go worker reads on its standard input with
// --view.
type viewRequest struct {
	Source string         `json:"source"`
	View   *fixtures.View `json:"view"`
}

func (g *goBackend) Close() error {
	if !g.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := g.release()
	sweep("") // a stray re-parented after its replay's sweep
	return err
}
