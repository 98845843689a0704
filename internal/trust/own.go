package trust

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"reduce/replay/python"
)

// OwnModules are reduce's Python modules: the recorder users vendor, the
// framework hooks, the runtime (also the fixtures' conftest.py) and the
// worker. A file that names one of their functions as its step would have
// reduce call it with the file's data (reduce_batch:save writes a file
// where the data says), so none is ever a step, the file the user's or not.
var OwnModules = []string{"reduce_batch", "reduce_hooks", "reduce_collect", "reduce_replay"}

// HooksModules name the framework hooks' module: the package's, and a
// vendored copy's.
var HooksModules = []string{"reduce_batch.hooks", "reduce_hooks"}

// HookSteps are the steps a framework hook's recordings name
// (reduce_hooks:lightning_step), by the table of hooks the Python side
// reads too (python.HookSteps): reduce's own, replayed from the worker's
// copy of reduce_hooks.
var HookSteps = python.HookSteps()

// ownMarks begin reduce's Python files (their first bytes), wherever a copy
// lies and whatever it is called: a vendored reduce_batch.py renamed, the
// collector written as a fixtures directory's conftest.py.
var ownMarks = [][]byte{
	[]byte(`"""Record a failing PyTorch batch for ` + "`reduce`"),
	[]byte(`"""Framework hooks for ` + "`reduce`"),
	[]byte("# reduce collector "),
	[]byte(`"""The replay worker and fork server of reduce's torch backend`),
	[]byte(`"""reduce_batch`),
}

// OwnStep says why the step module:qualname (defined in file, "" when none
// is recorded) is one of reduce's own functions, or "" when it is not:
// its module is one of OwnModules (the last component of its dotted name:
// a vendored copy inside a package too), or its file is named after one
// or begins as one of reduce's files do. reduce_hooks' HookSteps, named by
// that module, are the exception: they are steps.
func OwnStep(module, qualname, file string) string {
	last := module[strings.LastIndexByte(module, '.')+1:]
	first, _, _ := strings.Cut(module, ".")
	if slices.Contains(HooksModules, module) && slices.Contains(HookSteps, qualname) {
		return "" // the worker's own copy replays it, not the file named
	}
	switch base := strings.TrimSuffix(filepath.Base(file), ".py"); {
	case slices.Contains(OwnModules, last) || first == "reduce_batch":
		return "its module " + module + " is reduce's own"
	case file != "" && filepath.Base(filepath.Dir(file)) == "reduce_batch":
		return "its file " + filepath.Base(file) + " is reduce's own (the package's)"
	case file != "" && slices.Contains(OwnModules, base):
		return "its file " + filepath.Base(file) + " is reduce's own"
	case file != "" && ownFile(file):
		return "its file " + file + " is a copy of one of reduce's"
	}
	return ""
}

// ownFile reports whether the file at path begins as one of reduce's
// Python files do; a file that cannot be read is not known to be one. Only
// a regular file is read, opened without blocking and never through a
// link: a file names the path, which may be a FIFO or a terminal.
func ownFile(path string) bool {
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		return false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return false
	}
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	head = bytes.TrimLeft(head[:n], "\ufeff \t\r\n")
	for _, m := range ownMarks {
		if bytes.HasPrefix(head, m) {
			return true
		}
	}
	return false
}
