package replay

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"reduce/replay/python"
)

// Version is reduce's version: `reduce --version`, fixture.json's
// environment, the wheel's, and the __version__ of the Python package
// (the collector's first line too), which TestPythonVersions holds equal to
// it.
const Version = "0.21.0"

// The Python package reduce_batch, one job per module (docs/ARCHITECTURE.md,
// "The Python side"), embedded by the package python with its table of
// framework hooks: what the torch backend runs, what the wheel installs,
// what the vendored zip beside a conftest.py holds. Its op table (ops.py) is
// generated from the Go registry (kernels.Op): the directive below rewrites
// it, and TestPythonOpTable fails while it is stale.
//
//go:generate go test -run TestPythonOpTable . -update

// PackageName is the Python package's import name.
const PackageName = "reduce_batch"

// PackageFiles returns the package's files by their path in it
// ("reduce_batch/steps.py"), as the wheel and the zip hold them.
func PackageFiles() map[string][]byte {
	out := map[string][]byte{}
	entries, _ := fs.ReadDir(python.FS, PackageName)
	for _, e := range entries {
		data, _ := python.FS.ReadFile(PackageName + "/" + e.Name())
		out[PackageName+"/"+e.Name()] = data
	}
	return out
}

func packageFile(name string) []byte {
	data, err := python.FS.ReadFile(PackageName + "/" + name)
	if err != nil {
		panic("replay: the embedded package has no " + name)
	}
	return data
}

// vendoredModules are the package's modules that join the vendored file
// (python.Hook.Vendored: "recorder" or "hooks"), in the table's order.
func vendoredModules(file string) [][]byte {
	var out [][]byte
	for _, h := range python.Hooks() {
		if h.Vendored == file {
			out = append(out, packageFile(h.Module+".py"))
		}
	}
	return out
}

// PythonModule is the recorder users vendor, one file made from the
// package's fileformat.py (the format, save, load), the hooks that join
// the recorder (hook_torchrun.py: each rank's own file) and record.py
// (record_on_failure): standard library and torch alone (joinModules).
// `reduce recorder` prints it.
var PythonModule = joinModules(packageFile("fileformat.py"),
	append(vendoredModules("recorder"), packageFile("record.py"))...)

// joinMark is the line of a module after which its code joins a vendored
// file (joinModules); cutMark the line of hooks.py above which it does.
const (
	joinMark = "# reduce recorder joins what follows this line"
	cutMark  = "# reduce recorder --hooks prints what is above this line"
)

// joinModules is first with the code of each of rest after its joinMark
// line (and the comment it begins), and their standard library imports
// (`import x` lines) added to first's first block of imports, sorted: one
// Python file made of several of the package's modules. The relative
// imports before a module's mark are left out: what they name is in the
// file.
func joinModules(first []byte, rest ...[]byte) []byte {
	lines := strings.Split(strings.TrimRight(string(first), "\n"), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "import ") })
	if start < 0 {
		panic("replay: a joined file's first module imports nothing")
	}
	end := start
	for end < len(lines) && strings.HasPrefix(lines[end], "import ") {
		end++
	}
	block := slices.Clone(lines[start:end])
	var bodies []string
	for _, module := range rest {
		head, body, ok := strings.Cut(string(module), joinMark)
		if !ok {
			panic("replay: a module joined into a vendored file has no line " + joinMark)
		}
		_, body, _ = strings.Cut(body, "\n")
		for strings.HasPrefix(body, "#") { // the rest of the mark's comment
			_, body, _ = strings.Cut(body, "\n")
		}
		for _, l := range strings.Split(head, "\n") {
			if strings.HasPrefix(l, "from ") && strings.Contains(l, " import ") && !strings.HasPrefix(l, "from .") {
				panic("replay: a module joined into a vendored file imports with " + l + ": only `import x` and the package's own names join")
			}
			if strings.HasPrefix(l, "import ") && l != "import "+PackageName && !slices.Contains(block, l) &&
				!slices.Contains(lines, l) {
				block = append(block, l)
			}
		}
		bodies = append(bodies, strings.Trim(body, "\n"))
	}
	slices.Sort(block)
	out := append(append(slices.Clone(lines[:start]), block...), lines[end:]...)
	text := strings.TrimRight(strings.Join(out, "\n"), "\n")
	for _, b := range bodies {
		text += "\n\n\n" + b
	}
	return []byte(text + "\n")
}

// PythonModuleName is the file name users save PythonModule under.
const PythonModuleName = "reduce_batch.py"

// HooksModule is the framework hooks users vendor beside PythonModule, of
// the same version: hooks.py above its cutMark (the version check, what the
// hooks share), then the code of each hook module that hooks.json joins to
// the hooks (Lightning's callback, the Trainer's wrapper and the steps they
// record). `reduce recorder --hooks` prints it.
var HooksModule = func() []byte {
	head, _, ok := strings.Cut(string(packageFile("hooks.py")), cutMark)
	if !ok {
		panic("replay: hooks.py has no line " + cutMark)
	}
	return joinModules([]byte(head), vendoredModules("hooks")...)
}()

// HooksModuleName is the file name users save HooksModule under.
const HooksModuleName = "reduce_hooks.py"

// OpsModule is the package's op table and run_op (reduce_batch/ops.py),
// whose table TestPythonOpTable checks against the Go registry.
var OpsModule = packageFile("ops.py")

// ZipName is the versioned file that holds the package where it is not
// installed: beside the torch backend's launcher, and under .reduce/ of an
// --out whose conftest.py imports the plugin from it.
const ZipName = PackageName + "-" + Version + ".zip"

var packageZip = sync.OnceValue(buildZip)

// buildZip zips the package's files, sorted, at a fixed time.
func buildZip() []byte {
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
}

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

if __name__ == "__main__":  # not when a spawned child imports this file as __mp_main__
    from reduce_batch.worker import main

    sys.exit(main())
`)

// pythonFiles are the files the torch backend's interpreter needs in one
// directory, by name.
func pythonFiles() map[string][]byte {
	return map[string][]byte{WorkerModuleName: WorkerModule, ZipName: PackageZip()}
}

// CollectorModule is the conftest.py regress writes at the root of an --out
// where the package is not installed: it imports the pytest plugin from
// ZipName under .reduce/ beside it, after checking the zip's SHA-256 (a
// zip swapped in a commit shows as a changed conftest.py too), unless the
// installed package's plugin is loaded (it then collects, once). Its first
// line marks it as reduce's.
var CollectorModule = []byte(`# reduce collector ` + Version + `: written by reduce at the root of its --out; do not edit.
"""The regression fixtures under this folder, collected by reduce's pytest plugin: the installed
package's (pip install of reduce's wheel) or, without it, the one in .reduce/` + ZipName + `."""

import hashlib
import os
import sys

__all__ = ["pytest_collect_file", "pytest_configure", "pytest_ignore_collect"]
ZIP_SHA256 = "` + zipDigest() + `"

if "reduce_batch.plugin" not in sys.modules:  # not loaded as an installed plugin
    _zip = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".reduce", "` + ZipName + `")
    if not os.path.isfile(_zip):
        raise ImportError(f"reduce's pytest plugin is neither installed (pip install reduce's wheel) nor at {_zip} "
                          "(reduce --batch ... --out writes it there, beside this file)")
    with open(_zip, "rb") as _f:
        if hashlib.sha256(_f.read()).hexdigest() != ZIP_SHA256:
            raise ImportError(f"{_zip} is not the package this conftest.py was written with: run reduce --batch "
                              "... --out again to write both, or install reduce's wheel")
    _old = sys.modules.get("reduce_batch")
    if _old is not None and not hasattr(_old, "__path__"):
        del sys.modules["reduce_batch"]  # a vendored recorder: the package is the same, and more
    sys.path.insert(0, _zip)
    from reduce_batch.plugin import (
        pytest_collect_file,
        pytest_configure,
        pytest_ignore_collect,
    )
`)

func zipDigest() string {
	sum := sha256.Sum256(PackageZip())
	return hex.EncodeToString(sum[:])
}

// CollectorModuleName is the file the collector is written as.
const CollectorModuleName = "conftest.py"
