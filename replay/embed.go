package replay

import _ "embed"

// Version is reduce's version: `reduce --version`, fixture.json's
// environment, and the __version__ of every Python file below (the
// collector's first line too), which TestPythonVersions holds equal to it.
const Version = "0.21.0"

// PythonModule is reduce_batch.py, the file users vendor: the format,
// save, load and record_on_failure. `reduce recorder` prints it.
//
//go:embed python/reduce_batch.py
var PythonModule []byte

// PythonModuleName is the file name users save PythonModule under.
const PythonModuleName = "reduce_batch.py"

// HooksModule is reduce_hooks.py, the framework hooks (Lightning's
// callback and the step it records), a second vendored file beside
// PythonModule, of the same version. `reduce recorder --hooks` prints it.
//
//go:embed python/reduce_hooks.py
var HooksModule []byte

// HooksModuleName is the file name users save HooksModule under.
const HooksModuleName = "reduce_hooks.py"

// CollectorModule is reduce_collect.py: the pytest collector of the
// regression fixtures, which regress writes as the conftest.py at the root
// of --out, and the runtime of a recorded batch (ops, steps and entries,
// device memory, child replays, checks) that the worker imports. Its op
// table is generated from the Go registry (kernels.Op): the directive below
// rewrites it, and TestPythonOpTable fails while it is stale.
//
//go:generate go test -run TestPythonOpTable . -update
//go:embed python/reduce_collect.py
var CollectorModule []byte

// CollectorModuleName is the name the worker imports CollectorModule by.
const CollectorModuleName = "reduce_collect.py"

// WorkerModule is reduce_replay.py, the torch backend's replay worker and
// zygote, which users never call. It imports the other three from its own
// directory: the four files are always written side by side.
//
//go:embed python/reduce_replay.py
var WorkerModule []byte

// WorkerModuleName is the file name the torch backend runs WorkerModule
// under.
const WorkerModuleName = "reduce_replay.py"

// pythonFiles are the files the torch backend's interpreter needs in one
// directory, by name.
func pythonFiles() map[string][]byte {
	return map[string][]byte{PythonModuleName: PythonModule, HooksModuleName: HooksModule,
		CollectorModuleName: CollectorModule, WorkerModuleName: WorkerModule}
}
