package signature

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A huge message the recorder cut at 64 KiB (with its mark) and the same
// message as a replay printed it whole are one failure; another message
// past the first MaxLine bytes is still another one before them.
func TestHugeMessageCutIsTheSame(t *testing.T) {
	msg := "label out of range " + strings.Repeat("X", 5<<20)
	recorded := Recorded("ValueError: " + msg[:1<<16] + " [cut: 5177363 more characters]")
	replay := Parse([]byte("Traceback (most recent call last):\n  File \"train.py\", line 3, in step\nValueError: "+msg+"\n"), ExitInfo{Code: 1})
	j := Judge{Level: MatchStrict, Want: recorded, Recorded: true}
	assert.Equal(t, Reproduces, j.Rule(replay).Outcome, "%v\n%v", recorded.Expression[:80], replay.Expression[:80])
	assert.LessOrEqual(t, len(replay.Expression), MaxLine+len("ValueError: "))
	other := Parse([]byte("Traceback (most recent call last):\n  File \"train.py\", line 3, in step\nValueError: size out of range "+strings.Repeat("X", 5<<20)+"\n"), ExitInfo{Code: 1})
	assert.NotEqual(t, Reproduces, j.Rule(other).Outcome)
}
