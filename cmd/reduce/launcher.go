package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"reduce/internal/regress"
	"reduce/replay"
)

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

// launchEvent adds where a replay ran to its --json event: the launcher,
// and for Slurm the job id, the node and the lost jobs it was submitted
// again for.
func launchEvent(ev map[string]any, v replay.Verdict) {
	if v.Launcher == "" || v.Launcher == replay.LauncherLocal {
		return
	}
	ev["launcher"] = v.Launcher
	if v.JobID != "" {
		ev["job_id"] = v.JobID
	}
	if v.Node != "" {
		ev["node"] = v.Node
	}
	if v.Requeued > 0 {
		ev["requeued"] = v.Requeued
	}
}

// launcherEnv records in the fixture's environment where the replays ran:
// for Slurm its version, the user's srun options, the nodes seen, and the
// jobs submitted, retried and lost.
func launcherEnv(env *regress.RecordEnv, be replay.Backend) {
	info := replay.Provenance(be)
	env.Launcher = info.Launcher
	if info.Launcher != replay.LauncherSlurm {
		return
	}
	if env.Meta == nil {
		env.Meta = map[string]string{}
	}
	set := func(k, v string) {
		if v != "" {
			env.Meta["slurm."+k] = v
		}
	}
	set("version", info.Version)
	set("options", strings.Join(info.Options, " "))
	set("nodes", strings.Join(info.Nodes, ","))
	set("shared_dir", info.SharedDir)
	set("jobs", strconv.Itoa(info.Jobs))
	if info.Retried > 0 {
		set("retried", strconv.Itoa(info.Retried))
	}
	var lost []string
	for _, k := range slices.Sorted(maps.Keys(info.Unresolved)) {
		lost = append(lost, fmt.Sprintf("%s=%d", k, info.Unresolved[k]))
	}
	set("lost", strings.Join(lost, ","))
}
