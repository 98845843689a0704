package replay

import (
	"archive/zip"
	"bytes"
	"embed"
	"io/fs"
	"sort"
	"sync"
	"time"
)

// Version is reduce's version: `reduce --version`, fixture.json's
// environment, the wheel's, and the __version__ of the Python package
// (the collector's first line too), which TestPythonVersions holds equal to
// it.
const Version = "0.21.0"

// The Python package reduce_batch, one job per module (docs/ARCHITECTURE.md,
// "The Python side"): what the torch backend runs, what the wheel installs,
// what the vendored zip beside a conftest.py holds. Its op table (ops.py) is
// generated from the Go registry (kernels.Op): the directive below rewrites
// it, and TestPythonOpTable fails while it is stale.
//
//go:generate go test -run TestPythonOpTable . -update
//go:embed python/reduce_batch/*.py
var packageFS embed.FS

// PackageName is the Python package's import name.
const PackageName = "reduce_batch"

// PackageFiles returns the package's files by their path in it
// ("reduce_batch/steps.py"), as the wheel and the zip hold them.
func PackageFiles() map[string][]byte {
	out := map[string][]byte{}
	entries, _ := fs.ReadDir(packageFS, "python/"+PackageName)
	for _, e := range entries {
		data, _ := packageFS.ReadFile("python/" + PackageName + "/" + e.Name())
		out[PackageName+"/"+e.Name()] = data
	}
	return out
}

func packageFile(name string) []byte {
	data, err := packageFS.ReadFile("python/" + PackageName + "/" + name)
	if err != nil {
		panic("replay: the embedded package has no " + name)
	}
	return data
}

// PythonModule is the recorder users vendor (reduce_batch/__init__.py):
// the format, save, load and record_on_failure, standard library and torch
// alone. `reduce recorder` prints it.
var PythonModule = packageFile("__init__.py")

// PythonModuleName is the file name users save PythonModule under.
const PythonModuleName = "reduce_batch.py"

// HooksModule is the framework hooks (reduce_batch/hooks.py: Lightning's
// callback, the Trainer's wrapper and the steps they record), vendored
// beside PythonModule, of the same version. `reduce recorder --hooks`
// prints it.
var HooksModule = packageFile("hooks.py")

// HooksModuleName is the file name users save HooksModule under.
const HooksModuleName = "reduce_hooks.py"

// OpsModule is the package's op table and run_op (reduce_batch/ops.py),
// whose table TestPythonOpTable checks against the Go registry.
var OpsModule = packageFile("ops.py")

// ZipName is the versioned file that holds the package where it is not
// installed: beside the torch backend's launcher, and under .reduce/ of an
// --out whose conftest.py imports the plugin from it.
const ZipName = PackageName + "-" + Version + ".zip"

var packageZip = sync.OnceValue(func() []byte {
	files := PackageFiles()
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, name := range names {
		// A fixed time: the same package is the same bytes (a committed
		// zip does not change with every run).
		f, err := w.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate,
			Modified: time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err == nil {
			_, err = f.Write(files[name])
		}
		if err != nil {
			panic("replay: zip the package: " + err.Error())
		}
	}
	if err := w.Close(); err != nil {
		panic("replay: zip the package: " + err.Error())
	}
	return buf.Bytes()
})

// PackageZip returns the package as a zip (ZipName), which Python imports
// from sys.path: the same bytes each call.
func PackageZip() []byte { return packageZip() }

// WorkerModuleName is the launcher the torch backend runs: it puts ZipName
// beside it first on sys.path and runs reduce_batch.worker.
const WorkerModuleName = "reduce_replay.py"

// WorkerModule is the launcher's source.
var WorkerModule = []byte(`"""The torch backend's worker: reduce_batch.worker, from ` + ZipName + ` beside this file."""

import os
import sys

_zip = os.path.join(os.path.dirname(os.path.abspath(__file__)), "` + ZipName + `")
if sys.path and sys.path[0] and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    sys.path[0] = _zip  # this folder, as the interpreter put it first, is the package's place
else:
    sys.path.insert(0, _zip)

from reduce_batch.worker import main  # noqa: E402

sys.exit(main())
`)

// pythonFiles are the files the torch backend's interpreter needs in one
// directory, by name.
func pythonFiles() map[string][]byte {
	return map[string][]byte{WorkerModuleName: WorkerModule, ZipName: PackageZip()}
}

// CollectorModule is the conftest.py regress writes at the root of an --out
// where the package is not installed: it imports the pytest plugin from
// ZipName under .reduce/ beside it, unless the package is installed after
// all (its plugin then collects, once). Its first line marks it as reduce's.
var CollectorModule = []byte(`# reduce collector ` + Version + `: written by reduce at the root of its --out; do not edit.
"""The regression fixtures under this folder, collected by reduce's pytest plugin: the installed
package's (pip install of reduce's wheel) or, without it, the one in .reduce/` + ZipName + `."""

import importlib.metadata
import os
import sys

try:
    importlib.metadata.distribution("reduce-batch")
except importlib.metadata.PackageNotFoundError:
    _old = sys.modules.get("reduce_batch")
    if _old is not None and not hasattr(_old, "__path__"):
        del sys.modules["reduce_batch"]  # a vendored recorder: the package is the same, and more
    _zip = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".reduce", "` + ZipName + `")
    if not os.path.isfile(_zip):
        raise ImportError(f"reduce's pytest plugin is neither installed (pip install reduce's wheel) nor at {_zip} "
                          "(reduce --batch ... --out writes it there, beside this file)")
    sys.path.insert(0, _zip)
    from reduce_batch.plugin import *  # noqa: F403
`)

// CollectorModuleName is the file the collector is written as.
const CollectorModuleName = "conftest.py"
