package signature

import (
	"bytes"
	"strings"
)

// GoRuntimeDeath is the line with which the Go runtime ended a Go program
// of its own accord ("fatal error: runtime: out of memory", "panic: ..."
// followed by its goroutine dump, "runtime: out of memory: cannot allocate
// ..."), or "" when stderr shows no such death. Only a process that is a Go
// program (the go worker) is read this way: a Python step's text that
// quotes it is the step's.
func GoRuntimeDeath(stderr []byte) string {
	var death string
	dump := false
	for _, raw := range bytes.Split(stderr, []byte("\n")) {
		l := strings.TrimSpace(string(raw))
		switch {
		case death == "" && (strings.HasPrefix(l, "fatal error: ") || strings.HasPrefix(l, "panic: ") ||
			strings.HasPrefix(l, "runtime: out of memory")):
			death = l
		case strings.HasPrefix(l, "goroutine ") && strings.HasSuffix(l, "]:"):
			dump = true
		}
	}
	// A fatal error of the runtime prints no dump when it cannot (out of
	// memory); a panic always does.
	if death == "" || (strings.HasPrefix(death, "panic: ") && !dump) {
		return ""
	}
	if len(death) > 200 {
		death = death[:200]
	}
	return death
}
