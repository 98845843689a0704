package signature

import (
	"regexp"
	"strings"
)

// Raise says where a Python exception was raised: the innermost frame of
// the traceback of the failure's exception, and whose code that frame is.
// It holds no directory: File is the file's base name, or its path inside
// the torch package ("torch/nn/functional.py"), so that it says nothing of
// where the user's files are.
type Raise struct {
	// By is whose code raised it.
	By Raiser `json:"by"`
	// File and Function name the frame.
	File     string `json:"file,omitempty"`
	Function string `json:"function,omitempty"`
}

// Raiser is whose code raised an exception: a closed set.
type Raiser string

const (
	// RaisedByTorch: the innermost frame is in the torch package (its
	// Python, or its C++ reported at the torch function that called it).
	RaisedByTorch Raiser = "torch"
	// RaisedByLibrary: the innermost frame is in another installed package,
	// the standard library, or reduce's own harness (reduce_batch.py,
	// reduce_replay.py).
	RaisedByLibrary Raiser = "library"
	// RaisedByCode: a raise or assert statement of the user's own code (a
	// file outside installed packages and the standard library) raised it:
	// the step's own check.
	RaisedByCode Raiser = "code"
	// RaisedByCall: the innermost frame is the user's own code, on a line
	// that is no raise or assert statement: the exception came out of a
	// call into native code there (torch's C++, most often: torch.gather,
	// Tensor.view).
	RaisedByCall Raiser = "call"
)

var (
	// frameLineRe is a traceback's frame line, with the frame's file and
	// function.
	frameLineRe = regexp.MustCompile(`^\s+File "(.*)", line \d+, in (\S+)\s*$`)
	// torchFileRe finds the torch package in a path: an installed one, or
	// torch's Python modules wherever they are (a source checkout).
	torchFileRe = regexp.MustCompile(`(?:^|[/\\])(?:(?:site|dist)-packages[/\\](torch[/\\].*)|(torch[/\\](?:nn|autograd|utils|cuda|optim|_\w+)[/\\].*|torch[/\\](?:functional|_tensor|serialization|overrides)\.py))$`)
	// libraryFileRe is a file of an installed package or of the standard
	// library: site-packages, dist-packages, lib/pythonX.Y, a frozen module.
	libraryFileRe = regexp.MustCompile(`(?:^|[/\\])(?:site-packages|dist-packages|lib[/\\]python\d(?:\.\d+)?)[/\\]|^<frozen `)
	// statementRe is a raise or assert statement, as a traceback quotes
	// the frame's source line.
	statementRe = regexp.MustCompile(`^(?:raise|assert)\b`)
)

// harnessFiles are reduce's Python files, through which a replay calls the
// step: a failure raised there is the harness's, not the user's.
var harnessFiles = map[string]bool{"reduce_batch.py": true, "reduce_replay.py": true}

// packageFile reports whether path is a file of reduce's package, and
// returns the name a record keeps of it (reduce_batch/steps.py).
func packageFile(path string) (string, bool) {
	dir := path[:max(strings.LastIndexAny(path, `/\`), 0)]
	if dir[strings.LastIndexAny(dir, `/\`)+1:] != "reduce_batch" {
		return "", false
	}
	return "reduce_batch/" + path[strings.LastIndexAny(path, `/\`)+1:], true
}

// RaisedAt reads, from a replay's stderr, where its exception was raised:
// the innermost frame of the last traceback that is not a launcher's
// wrapper (as Parse takes the exception), or nil when the text holds no
// traceback with a frame. A frame of the user's own code whose source line
// the traceback does not quote (a script run with -c, a file gone) says
// neither RaisedByCode nor RaisedByCall: nil.
func RaisedAt(stderr []byte) *Raise {
	text := string(stderr)
	if len(text) > maxParse {
		text = text[len(text)-maxParse/2:]
	}
	var (
		last, cur     *Raise
		source        string // the innermost frame's source line, trimmed
		inFrames, src bool
	)
	for _, raw := range joinFrames(strings.Split(text, "\n")) {
		l := cleanLine(raw)
		if strings.HasPrefix(l, "Traceback (most recent call last):") {
			cur, source, inFrames, src = nil, "", true, false
			continue
		}
		if !inFrames {
			continue
		}
		if m := frameLineRe.FindStringSubmatch(l); m != nil {
			cur = &Raise{File: m[1], Function: m[2]}
			source, src = "", true
			continue
		}
		if l != "" && (l[0] == ' ' || l[0] == '\t') {
			if src && cur != nil && source == "" {
				source = strings.TrimSpace(l)
			}
			src = false // carets and the lines of a multi-line statement
			continue
		}
		inFrames = false
		m := excLineRe.FindStringSubmatch(l)
		if m == nil || cur == nil || wrapperExceptions[lastComponent(m[1])] {
			continue
		}
		last = whose(cur, source)
	}
	return last
}

// whose is r, the innermost frame (its File as printed), with By set from
// its path and source line and File cut to what says no directory; nil
// for the user's frame without a source line.
func whose(r *Raise, source string) *Raise {
	path := r.File
	base := path[strings.LastIndexAny(path, `/\`)+1:]
	switch m := torchFileRe.FindStringSubmatch(path); {
	case m != nil:
		r.By, r.File = RaisedByTorch, strings.ReplaceAll(m[1]+m[2], `\`, "/")
	case libraryFileRe.MatchString(path) || harnessFiles[base]:
		r.By, r.File = RaisedByLibrary, base
	case isPackageFile(path):
		name, _ := packageFile(path)
		r.By, r.File = RaisedByLibrary, name
	case source == "":
		return nil
	case statementRe.MatchString(source):
		r.By, r.File = RaisedByCode, base
	default:
		r.By, r.File = RaisedByCall, base
	}
	return r
}

// isPackageFile reports whether path is a file of reduce's package
// (installed, in a folder or in its zip): the harness through which a
// replay calls the step, as the vendored recorder is.
func isPackageFile(path string) bool {
	_, ok := packageFile(path)
	return ok
}
