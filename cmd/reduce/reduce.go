package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/kernels"
	"reduce/replay"
	"reduce/shrink"
)

func mainFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "batch", Aliases: []string{"b"}, Usage: "the recorded failing batch `FILE` (crash.bin)"},
		&cli.IntFlag{Name: "confirm", Value: 2, Usage: "replay the original `N` times before reducing"},
		&cli.StringFlag{Name: "match", Value: "strict", Usage: "what counts as the same failure: strict, family or any"},
		&cli.StringFlag{Name: "strategy", Value: "auto", Usage: "the search: auto (group testing) or ddmin"},
		&cli.StringFlag{Name: "out", Value: filepath.Join("fixtures", "regress"), Usage: "write the regression fixture under `DIR`"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON lines on stdout, the last one the summary"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress on stderr"},
		maxSizeFlag(),
	}, backendFlags()...)
}

// reduction is one run of the main job: the batch, the backend, the
// signature to keep, and what was observed along the way.
type reduction struct {
	c       *cli.Context
	path    string
	batch   *fixtures.Batch
	backend replay.Backend
	level   replay.MatchLevel
	want    replay.Signature
	start   time.Time

	mu      sync.Mutex
	replays int
	others  map[string]*otherFailure
	phase   string
	phases  map[string]int
}

type otherFailure struct {
	Signature replay.Signature `json:"signature"`
	Count     int              `json:"count"`
}

// verdict replays b and says whether it reproduces the failure kept.
func (r *reduction) verdict(ctx context.Context, b *fixtures.Batch) (shrink.Outcome, replay.Signature, error) {
	v, err := r.backend.Replay(ctx, b)
	if err != nil {
		return shrink.Unresolved, v.Signature, err
	}
	r.mu.Lock()
	r.replays++
	r.phases[r.phase]++
	r.mu.Unlock()
	s := v.Signature
	switch {
	case reproduces(s, r.want, r.level):
		return shrink.Fail, s, nil
	case s.Family == replay.FamilyPass:
		return shrink.Pass, s, nil
	}
	// A different failure is not a reproduction: counted, reported, and
	// never followed.
	r.mu.Lock()
	key := s.String()
	if r.others[key] == nil {
		r.others[key] = &otherFailure{Signature: s}
	}
	r.others[key].Count++
	r.mu.Unlock()
	return shrink.Unresolved, s, nil
}

func (r *reduction) progress(format string, args ...any) {
	if !r.c.Bool("quiet") {
		fmt.Fprintf(r.c.App.ErrWriter, "reduce: "+format+"\n", args...)
	}
}

// mainJob is `reduce --batch FILE`.
func mainJob(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("unknown command %q (see reduce --help)", c.Args().First())
	}
	path := c.String("batch")
	if path == "" {
		_ = cli.ShowAppHelp(c)
		return usagef("no batch: give --batch FILE (see reduce --help)")
	}
	level, err := replay.ParseMatchLevel(c.String("match"))
	if err != nil {
		return usagef("--match: %v", err)
	}
	strategy := shrink.Auto
	switch c.String("strategy") {
	case "auto":
	case "ddmin":
		strategy = shrink.DDMin
	default:
		return usagef("--strategy %q: want auto or ddmin", c.String("strategy"))
	}
	if c.Int("confirm") < 1 {
		return usagef("--confirm %d: want at least 1", c.Int("confirm"))
	}
	b, err := readBatch(c, path)
	if err != nil {
		return err
	}
	if b.Samples == 0 {
		return usagef("%s: the batch has no samples to reduce", path)
	}
	be, err := newBackend(c, b)
	if err != nil {
		return err
	}
	defer be.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	r := &reduction{c: c, path: path, batch: b, backend: be, level: level, start: time.Now(),
		others: map[string]*otherFailure{}, phases: map[string]int{}}

	// Confirm: the original must fail, the same way, in a fresh process.
	r.phase = "confirm"
	var recorded *replay.Signature
	if b.Error != nil {
		s := recordedSignature(b)
		recorded = &s
		r.want = s
	}
	fails := 0
	var seen []replay.Signature
	for i := 0; i < c.Int("confirm"); i++ {
		v, err := be.Replay(ctx, b)
		if err != nil {
			return interrupted(ctx, fmt.Errorf("replay %s: %w", path, err))
		}
		r.replays++
		r.phases["confirm"]++
		seen = append(seen, v.Signature)
		if recorded == nil && replay.Failing(v.Signature) && fails == 0 {
			r.want = v.Signature
		}
		if replay.Failing(v.Signature) && reproduces(v.Signature, r.want, level) {
			fails++
		}
	}
	r.progress("confirm: %d of %d replays reproduce %s", fails, c.Int("confirm"), r.want)
	if fails == 0 {
		return withCode(ExitNoRepro, fmt.Errorf("%s does not reproduce: wanted %s, got %s (try --match family, --confirm, another --backend or --device)",
			path, r.want, seen[len(seen)-1]))
	}

	// Samples: the smallest sets of samples that still fail.
	r.phase = "samples"
	res, err := shrink.Run(ctx, int(b.Samples), func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		sub, err := b.Select(units64(cand.Units()))
		if err != nil {
			return shrink.Unresolved, err
		}
		o, _, err := r.verdict(ctx, sub)
		return o, err
	}, shrink.Options{Strategy: strategy, Jobs: c.Int("jobs"), Confirm: shrink.ConfirmNever})
	if err != nil && !errors.Is(err, context.Canceled) {
		return interrupted(ctx, fmt.Errorf("shrink samples: %w", err))
	}
	if len(res.Culprits) == 0 {
		return interrupted(ctx, fmt.Errorf("shrink samples: no failing subset found"))
	}

	var culprits []culpritReport
	var minimal *fixtures.Batch
	for k, set := range res.Culprits {
		cr := culpritReport{Indices: set}
		for _, i := range set {
			if b.SampleIDs != nil {
				cr.IDs = append(cr.IDs, b.SampleIDs[i])
			}
		}
		sub, err := b.Select(units64(set))
		if err != nil {
			return err
		}
		r.progress("samples: culprit %d: samples %v %v", k+1, set, cr.IDs)
		elems, reduced, err := r.elements(ctx, sub, set)
		if err != nil {
			return interrupted(ctx, err)
		}
		cr.Elements = elems
		if minimal == nil {
			minimal = reduced
		}
		culprits = append(culprits, cr)
	}

	dir, err := r.writeFixture(minimal, culprits, recorded)
	if err != nil {
		return err
	}
	sum := summary{
		Event: "summary", Fixture: dir, Signature: r.want, Mode: "samples", Culprits: culprits,
		Replays: r.replays, Phases: map[string]phaseCount{}, OtherFailures: []otherFailure{},
		Seconds: time.Since(r.start).Seconds(), Partial: res.Incomplete,
	}
	for p, n := range r.phases {
		sum.Phases[p] = phaseCount{Replays: n}
	}
	for _, o := range r.others {
		sum.OtherFailures = append(sum.OtherFailures, *o)
	}
	sort.Slice(sum.OtherFailures, func(i, j int) bool {
		return sum.OtherFailures[i].Signature.String() < sum.OtherFailures[j].Signature.String()
	})
	w := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(sum)
	}
	fmt.Fprintf(w, "signature: %s\n", r.want)
	for _, cr := range culprits {
		fmt.Fprintf(w, "culprit: samples %v %s\n", cr.Indices, strings.Join(cr.IDs, " "))
		for _, e := range cr.Elements {
			fmt.Fprintf(w, "  %s\n", e.diagnosis())
		}
	}
	fmt.Fprintf(w, "replays: %d in %.1fs\n", r.replays, sum.Seconds)
	fmt.Fprintln(w, dir)
	return nil
}

func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return withCode(ExitInterrupted, fmt.Errorf("interrupted: %w", err))
	}
	return err
}

func units64(u []int) []int64 {
	out := make([]int64, len(u))
	for i, x := range u {
		out[i] = int64(x)
	}
	return out
}

type summary struct {
	Event         string                `json:"event"`
	Fixture       string                `json:"fixture"`
	Signature     replay.Signature      `json:"signature"`
	Mode          string                `json:"mode"`
	Culprits      []culpritReport       `json:"culprits"`
	Size          any                   `json:"size"`
	Replays       int                   `json:"replays"`
	Phases        map[string]phaseCount `json:"phases"`
	OtherFailures []otherFailure        `json:"other_failures"`
	Seconds       float64               `json:"seconds"`
	Partial       bool                  `json:"partial"`
}

type phaseCount struct {
	Replays int `json:"replays"`
}

type culpritReport struct {
	Indices  []int           `json:"indices"`
	IDs      []string        `json:"ids"`
	Elements []elementReport `json:"elements"`
}

type elementReport struct {
	Tensor  string  `json:"tensor"`
	Index   []int64 `json:"index"`
	Value   float64 `json:"value"`
	Passing *int64  `json:"passing"`
}

func (e elementReport) diagnosis() string {
	s := fmt.Sprintf("%s%v = %v triggers the failure", e.Tensor, e.Index, e.Value)
	if e.Passing != nil {
		s += fmt.Sprintf("; %d passes", *e.Passing)
	}
	return s
}

// maxElementUnits bounds the element phase: past it the samples are
// reported without their elements.
const maxElementUnits = 1 << 20

// element is one unit of the element phase: an element of a batched
// integer tensor of the reduced batch.
type element struct {
	tensor  int
	storage int64
	index   []int64
}

// elements finds, inside the kept samples, the elements that trigger the
// failure: the others are set to a benign value (the op's ignore_index for
// a target, else zero). Only integer tensors are searched: they hold the
// indices, targets and ids that go out of range. It returns the elements
// (indices in the original batch along the batch axis), each with the
// nearest value that passes, and the reduced batch.
func (r *reduction) elements(ctx context.Context, sub *fixtures.Batch, set []int) ([]elementReport, *fixtures.Batch, error) {
	var units []element
	benign := map[int]int64{}
	for ti, e := range sub.Tensors {
		if e.BatchDim == nil || e.DType.IsFloat() || e.DType == kernels.Bool || e.Layout().Has(kernels.LayoutExpanded) || e.Layout().Has(kernels.LayoutOverlapping) {
			continue
		}
		benign[ti] = 0
		if v, ok := intAttr(sub.Attrs, "ignore_index"); ok && e.Name == "target" {
			benign[ti] = v
		}
		e.Each(func(idx []int64, s int64) {
			units = append(units, element{tensor: ti, storage: s, index: append([]int64(nil), idx...)})
		})
	}
	if len(units) == 0 || len(units) > maxElementUnits {
		return nil, sub, nil
	}
	build := func(keep []int, set map[int]int64) *fixtures.Batch {
		kept := make(map[int]bool, len(keep))
		for _, u := range keep {
			kept[u] = true
		}
		out := *sub
		out.Tensors = append([]*fixtures.Entry(nil), sub.Tensors...)
		clones := map[int]*kernels.Tensor{}
		for ui, u := range units {
			v, override := set[ui]
			if kept[ui] && !override {
				continue
			}
			t := clones[u.tensor]
			if t == nil {
				t = sub.Tensors[u.tensor].Tensor.Clone()
				clones[u.tensor] = t
				e := *sub.Tensors[u.tensor]
				e.Tensor = t
				out.Tensors[u.tensor] = &e
			}
			if !override {
				v = benign[u.tensor]
			}
			t.StoreInt(u.storage, v)
		}
		return &out
	}
	r.phase = "elements"
	res, err := shrink.Run(ctx, len(units), func(ctx context.Context, cand shrink.Candidate) (shrink.Outcome, error) {
		o, _, err := r.verdict(ctx, build(cand.Units(), nil))
		return o, err
	}, shrink.Options{Jobs: r.c.Int("jobs"), Confirm: shrink.ConfirmNever, StopAfterFirst: true})
	if err != nil || len(res.Culprits) == 0 {
		// The failure needs the samples, not particular elements (a shape
		// check, say): report the samples alone.
		if err != nil && ctx.Err() != nil {
			return nil, nil, err
		}
		return nil, sub, nil
	}
	keep := res.Culprits[0]
	reduced := build(keep, nil)

	r.phase = "boundary"
	var reports []elementReport
	for _, ui := range keep {
		u := units[ui]
		e := sub.Tensors[u.tensor]
		value := e.LoadInt(u.storage)
		idx := append([]int64(nil), u.index...)
		idx[*e.BatchDim] = int64(set[idx[*e.BatchDim]])
		rep := elementReport{Tensor: e.Name, Index: idx, Value: float64(value)}
		// Search toward zero, the first valid index of every op here;
		// toward the benign value when the element is zero itself.
		lo, hi := int64(0), value
		if value == 0 {
			lo = benign[u.tensor]
		}
		if lo > hi {
			lo, hi = hi, lo
		}
		if lo < hi {
			br, err := shrink.Boundary(ctx, lo, hi, func(ctx context.Context, x int64) (shrink.Outcome, error) {
				o, _, err := r.verdict(ctx, build(keep, map[int]int64{ui: x}))
				return o, err
			}, shrink.Options{Jobs: r.c.Int("jobs")})
			if err == nil && !br.Incomplete && br.PassOutcome == shrink.Pass {
				p := br.Pass
				rep.Passing = &p
			}
		}
		reports = append(reports, rep)
	}
	return reports, reduced, nil
}

func intAttr(attrs map[string]any, name string) (int64, bool) {
	switch v := attrs[name].(type) {
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	case int64:
		return v, true
	case int:
		return int64(v), true
	case float64:
		return int64(v), v == float64(int64(v))
	}
	return 0, false
}

// writeFixture writes the regression fixture: a directory named by op and
// content hash holding the minimal batch and fixture.json, made in a
// temporary directory beside it and renamed into place, so a reader never
// sees half a fixture. An existing fixture of the same name holds the same
// batch and is kept as it is.
func (r *reduction) writeFixture(minimal *fixtures.Batch, culprits []culpritReport, recorded *replay.Signature) (string, error) {
	out := r.c.String("out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("--out %s: %w", out, err)
	}
	src, err := os.ReadFile(r.path)
	if err != nil {
		return "", err
	}
	srcHash := sha256.Sum256(src)
	min := *minimal
	min.Meta = map[string]string{}
	for k, v := range minimal.Meta {
		min.Meta[k] = v
	}
	min.Meta["source_file"] = filepath.Base(r.path)
	min.Meta["source_hash"] = "sha256:" + hex.EncodeToString(srcHash[:])
	var kept []string
	for _, cr := range culprits[:1] {
		for _, i := range cr.Indices {
			kept = append(kept, fmt.Sprint(i))
		}
	}
	min.Meta["kept_samples"] = strings.Join(kept, ",")
	if culprits[0].IDs != nil {
		min.Meta["kept_ids"] = strings.Join(culprits[0].IDs, ",")
	}

	tmp, err := os.MkdirTemp(out, ".tmp-fixture-")
	if err != nil {
		return "", fmt.Errorf("--out %s: %w", out, err)
	}
	defer os.RemoveAll(tmp)
	if err := fixtures.Write(filepath.Join(tmp, "batch.bin"), &min, fixtures.WithCompression(fixtures.CompressionNone)); err != nil {
		return "", fmt.Errorf("write fixture batch: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(tmp, "batch.bin"))
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(data)
	op := r.batch.Op
	if op == "" {
		op = "exec"
	}
	name := op + "-" + hex.EncodeToString(h[:6])
	record := map[string]any{
		"signature": r.want, "recorded": recorded, "match": string(r.level), "mode": "samples",
		"culprits": culprits, "replays": r.replays, "seconds": time.Since(r.start).Seconds(),
		"backend": r.backend.Name(), "source": min.Meta["source_file"], "source_hash": min.Meta["source_hash"],
	}
	js, err := json.MarshalIndent(record, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "fixture.json"), append(js, '\n'), 0o644); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	final := filepath.Join(out, name)
	if _, err := os.Stat(filepath.Join(final, "batch.bin")); err == nil {
		return final, nil
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("write fixture %s: %w", final, err)
	}
	return final, nil
}
