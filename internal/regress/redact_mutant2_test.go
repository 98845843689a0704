package regress

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"reduce/fixtures"
)

// TestRedactForms: the edges of the rules' forms: an e-mail address whose
// domain ends in a country's two letters is one address, /homes/<user> is
// a home, and four dotted numbers past 255 are no IPv4 address.
func TestRedactForms(t *testing.T) {
	red := newRedactor(&Record{}, &Regression{Batch: &fixtures.Batch{}})
	for in, want := range map[string]string{
		"mail bob.jones@uni-x.de now":        "mail <email> now",
		"ask li@lab.ch":                      "ask <email>",
		"/homes/carol/proj/x.bin":            "~/proj/x.bin",
		"node 300.12.34.56 is no address":    "node 300.12.34.56 is no address",
		"tag 12.256.1.1 either":              "tag 12.256.1.1 either",
		"peer 250.12.34.56 and 199.9.9.255 ": "peer <ip> and <ip> ",
	} {
		assert.Equal(t, want, red.text(in), in)
	}
}
