// Package python holds reduce's Python package, reduce_batch, as the
// binary embeds it, and reads its table of framework hooks
// (reduce_batch/hooks.json), which the Python side reads too: what a hook
// is called, the step its recordings name and where in a recording's state
// the class that step rebuilds is named. It imports nothing of reduce.
package python

import (
	"embed"
	"encoding/json"
	"sync"
)

// FS is the package's directory, reduce_batch/: its modules and hooks.json.
//
//go:embed reduce_batch/*.py reduce_batch/hooks.json
var FS embed.FS

// Hook is a row of hooks.json (docs/ARCHITECTURE.md, "Adding a framework
// hook"): the fields Go reads of it.
type Hook struct {
	// Name is the framework's ("lightning").
	Name string `json:"name"`
	// Module is the hook's module in the package ("hook_lightning").
	Module string `json:"module"`
	// Vendored is the file the module joins where users vendor it: "hooks"
	// (reduce recorder --hooks) or "recorder" (reduce recorder).
	Vendored string `json:"vendored"`
	// Step is the step the hook's recordings name (lightning_step), under
	// reduce_batch.hooks or a vendored reduce_hooks; "" when none.
	Step string `json:"step"`
	// StateClass is the path, in a recording's state, of the class the step
	// rebuilds, as a step entry (["lightning", "module_class"]); nil when
	// none.
	StateClass []string `json:"state_class"`
}

var hooks = sync.OnceValue(func() []Hook {
	data, err := FS.ReadFile("reduce_batch/hooks.json")
	if err != nil {
		panic("python: the embedded package has no hooks.json")
	}
	var table struct {
		Hooks []Hook `json:"hooks"`
	}
	if err := json.Unmarshal(data, &table); err != nil {
		panic("python: reduce_batch/hooks.json: " + err.Error())
	}
	return table.Hooks
})

// Hooks returns the rows of hooks.json, in its order.
func Hooks() []Hook { return hooks() }

// HookSteps are the steps the hooks' recordings name (lightning_step,
// trainer_step): reduce's own functions, yet steps.
func HookSteps() []string {
	var out []string
	for _, h := range Hooks() {
		if h.Step != "" {
			out = append(out, h.Step)
		}
	}
	return out
}
