package regress

import (
	"fmt"
	"math"
	"strings"

	"reduce/fixtures"
)

// Python literals, for the upstream issue's snippet (upstream.go).

// pyQuote returns a Python str literal whose value is s (each byte of s that
// is not valid UTF-8 read as U+FFFD, since a Python str holds characters,
// not bytes). The literal is plain ASCII: every character outside printable
// ASCII is escaped (\n, \xNN, \uNNNN, \UNNNNNNNN), so no source encoding,
// line separator (U+2028, U+0085) or NUL can change what it means.
func pyQuote(s string) string {
	const hexDigits = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s { // invalid bytes come as utf8.RuneError, one each
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteByte(hexDigits[r>>4])
			b.WriteByte(hexDigits[r&0xf])
		case r < 0x7f:
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// pyNumber is a Python float expression for f.
func pyNumber(f float64) string {
	switch {
	case math.IsNaN(f):
		return `float("nan")`
	case math.IsInf(f, 1):
		return `float("inf")`
	case math.IsInf(f, -1):
		return `float("-inf")`
	}
	return fixtures.PythonFloat(f)
}
