package replay

import _ "embed"

// PythonModule is reduce_batch.py, the file users vendor: the recorder
// (save, load, record_on_failure), run_op and replay, and the helpers the
// generated regression tests call. `reduce recorder` prints it.
//
//go:embed python/reduce_batch.py
var PythonModule []byte

// PythonModuleName is the file name users save PythonModule under.
const PythonModuleName = "reduce_batch.py"

// WorkerModule is reduce_replay.py, the torch backend's replay worker and
// zygote, which users never call. It imports PythonModule from its own
// directory: the two files are always written side by side.
//
//go:embed python/reduce_replay.py
var WorkerModule []byte

// WorkerModuleName is the file name the torch backend runs WorkerModule
// under.
const WorkerModuleName = "reduce_replay.py"

// pythonFiles are the files the torch backend's interpreter needs in one
// directory, by name.
func pythonFiles() map[string][]byte {
	return map[string][]byte{PythonModuleName: PythonModule, WorkerModuleName: WorkerModule}
}
