package replay

import _ "embed"

// PythonModule is reduce_batch.py: the recorder (save, load,
// record_on_failure) users copy into their training code, and the torch
// backend's worker. `reduce recorder` prints it.
//
//go:embed python/reduce_batch.py
var PythonModule []byte

// PythonModuleName is the file name users save PythonModule under.
const PythonModuleName = "reduce_batch.py"
