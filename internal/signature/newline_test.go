package signature

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A traceback whose file's path (a repository's) holds newlines, as Python
// prints it: the exception and where it was raised are read as for any
// other path, whatever the pieces of the path look like.
func TestNewlineInTracebackPath(t *testing.T) {
	for _, repo := range []string{
		"/home/u/repo",
		"/home/u/my\nrepo",
		"/home/u/b: c\nValueError: x\nrepo",
		"/r\n/x",
		"/r\n    indented",
	} {
		for _, rank := range []string{"", "[rank0]: "} {
			tb := "Traceback (most recent call last):\n" +
				"  File \"" + repo + "/step.py\", line 9, in <module>\n    main()\n" +
				"  File \"" + repo + "/step.py\", line 5, in main\n    raise IndexError(\"Target 4 is out of bounds.\")\n" +
				"IndexError: Target 4 is out of bounds.\n"
			if rank != "" {
				tb = rank + strings.ReplaceAll(tb, "\n", "\n"+rank)
			}
			s := Parse([]byte(tb), ExitInfo{Code: 1})
			assert.Equal(t, "IndexError", s.Exception, "%q %q", repo, rank)
			assert.Equal(t, "IndexError: Target N is out of bounds.", s.Expression, "%q %q", repo, rank)
			assert.Equal(t, &Raise{By: RaisedByCode, File: "step.py", Function: "main"}, RaisedAt([]byte(tb)), "%q %q", repo, rank)
		}
	}
	// A frame line cut short (a capture's limit) joins nothing across a
	// blank line or the next traceback.
	cut := "Traceback (most recent call last):\n  File \"/srv/app/tr\n\nTraceback (most recent call last):\n" +
		"  File \"/srv/app/train.py\", line 9, in step\n    assert ok, \"bad batch\"\nAssertionError: bad batch\n"
	assert.Equal(t, "AssertionError", Parse([]byte(cut), ExitInfo{Code: 1}).Exception)
	assert.Equal(t, &Raise{By: RaisedByCode, File: "train.py", Function: "step"}, RaisedAt([]byte(cut)))
}
