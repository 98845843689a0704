package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/kernels"
	"reduce/replay"
)

// writeFixtures writes one regression fixture per finding and returns
// their directories, in the order of the findings.
func (r *reduction) writeFixtures(found []finding) ([]string, error) {
	out := r.c.String("out")
	culprits := make([]regress.Culprit, len(found))
	for i, f := range found {
		culprits[i] = f.culprit("")
	}
	dirs := make([]string, len(found))
	for i, f := range found {
		reg := r.regression(f, i, culprits)
		dir, err := regress.Write(out, reg)
		if err != nil {
			return nil, fmt.Errorf("write fixture under --out %s: %w", out, err)
		}
		dirs[i] = dir
		culprits[i].Fixture = dir
	}
	return dirs, nil
}

// removePartials removes, once a reduction has completed, the partial
// fixtures that interrupted reductions of the same file left under --out
// (kept: the fixtures just written): they are superseded, and committed
// they would be replayed as regressions. It returns the removed ones.
func (r *reduction) removePartials(keep []string) []string {
	out := r.c.String("out")
	entries, err := os.ReadDir(out)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		dir := filepath.Join(out, e.Name())
		if !e.IsDir() || slices.Contains(keep, dir) {
			continue
		}
		m, err := fixtures.ReadManifest(filepath.Join(dir, regress.BatchFile))
		if err != nil || m.Batch.Meta["partial"] != "true" || m.Batch.Meta["source_hash"] != "sha256:"+r.srcHash {
			continue
		}
		if os.RemoveAll(dir) == nil {
			removed = append(removed, dir)
		}
	}
	return removed
}

// regression is the fixture of finding k.
func (r *reduction) regression(f finding, k int, culprits []regress.Culprit) *regress.Regression {
	min := *f.batch
	min.Meta = maps.Clone(f.batch.Meta)
	if min.Meta == nil {
		min.Meta = map[string]string{}
	}
	min.Meta["source_file"] = filepath.Base(r.path)
	min.Meta["source_hash"] = "sha256:" + r.srcHash
	min.Meta["kept_samples"] = joinInts(f.indices, ",")
	if len(f.ids) > 0 {
		min.Meta["kept_ids"] = strings.Join(f.ids, ",")
	}
	min.Meta["reduce_mode"] = r.mode
	if f.partial {
		min.Meta["partial"] = "true"
	}
	// The record counts the whole reduction, earlier runs' replays that
	// --resume took from the journal included.
	r.mu.Lock()
	phases := maps.Clone(r.phases)
	replays := r.replays
	for p, n := range r.resumedPhases {
		phases[p] += n
		replays += n
	}
	others := r.otherFailures()
	r.mu.Unlock()
	rec := regress.Record{
		Version: regress.RecordVersion, Op: r.batch.Op, Signature: r.want, Match: string(r.level),
		Mode: r.mode, ModeReason: r.modeReason, Culprits: culprits, Finding: k, Size: r.size,
		Diagnosis: r.diagnosis(f), Replays: replays, Phases: phases, OtherFailures: others,
		Seconds: time.Since(r.start).Seconds(), Partial: f.partial,
		Source:      regress.RecordSource{File: filepath.Base(r.path), Hash: "sha256:" + r.srcHash, Samples: r.batch.Samples},
		Environment: r.environment(), Attrs: r.batch.Attrs, Entry: r.c.String("entry"),
	}
	if r.backend.Kind() == replay.KindExec {
		if args, err := replay.SplitCommand(r.c.String("replay")); err == nil {
			rec.ReplayArgs = args
			rec.ReplayFormat = r.c.String("replay-format")
		}
	}
	if r.recorded != nil {
		s := *r.recorded
		rec.Recorded = &s
	}
	reg := &regress.Regression{Batch: &min, Record: rec}
	if _, err := kernels.Lookup(r.batch.Op); err == nil && rec.Entry == "" {
		if cpu, _, err := regress.Expect(&min); err == nil {
			reg.Record.CPU = cpu
		}
		if f.boundary != nil {
			if cpu, outs, err := regress.Expect(f.boundary); err == nil && cpu == nil {
				reg.Boundary = f.boundary
				reg.Record.Boundary = &regress.BoundaryBatch{File: "boundary.bin", Outputs: outs}
			}
		}
	} else if f.boundary != nil {
		reg.Boundary = f.boundary
		reg.Record.Boundary = &regress.BoundaryBatch{File: "boundary.bin"}
	}
	return reg
}

// environment is where the replays ran.
func (r *reduction) environment() regress.RecordEnv {
	env := regress.RecordEnv{Backend: string(r.backend.Kind()), Device: r.c.String("device"), Launcher: "local",
		Jobs: r.jobs, Reduce: reduceVersion(), GoOS: runtime.GOOS, GoArch: runtime.GOARCH}
	if env.Device == "" {
		env.Device = "cpu"
	}
	launcherEnv(&env, r.backend)
	return env
}

func reduceVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
		return bi.Main.Version
	}
	return "unknown"
}
