package signature

import (
	"regexp"
	"strings"
)

// volatileMark stands for a value of the batch that a message quoted.
const volatileMark = "'<value>'"

// VolatileValues prepares values of a batch (raw, as it holds them) for
// Judge.Volatile: normalized as a message's expression is
// (normalizeMessage), without repeats or empties. Done once per batch, so
// that judging a replay normalizes nothing.
func VolatileValues(raw []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range raw {
		v := maskIntegers(Normalize(r))
		if v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// maskVolatile replaces, in a host message's expression, each value of
// values (VolatileValues) that the message quotes ('c-7f3a', "c-7f3a") or
// names as a word of its own (c-7f3a, at least 3 characters) with one
// mark: the value comes from the batch, so that the same check on another
// sample, or on a probe's fresh value, is the same failure. A signature
// with a known class, or of a family without a message, is returned as it
// is.
func maskVolatile(s Signature, values []string) Signature {
	if len(values) == 0 || (s.Family != FamilyHostCheck && s.Family != FamilyNaNAnomaly) || s.Class() != "" {
		return s
	}
	s.Expression = maskValues(s.Expression, values)
	return s
}

func maskValues(expr string, values []string) string {
	for _, v := range values {
		if !strings.Contains(expr, v) {
			continue // the one test most values get
		}
		var b strings.Builder
		rest := expr
		for {
			i := strings.Index(rest, v)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			j := i + len(v)
			var before, after byte
			if i > 0 {
				before = rest[i-1]
			}
			if j < len(rest) {
				after = rest[j]
			}
			switch {
			case (before == '\'' || before == '"') && after == before:
				// Quoted: the quotes go with the value.
				b.WriteString(rest[:i-1] + volatileMark)
				rest = rest[j+1:]
			case len(v) >= 3 && !inWord(before) && !inWord(after):
				// A word of its own: neither side continues it.
				b.WriteString(rest[:i] + volatileMark)
				rest = rest[j:]
			default:
				b.WriteString(rest[:j])
				rest = rest[j:]
			}
		}
		expr = b.String()
	}
	return expr
}

// inWord reports whether c continues a value's word: a word byte, a
// hyphen or a quote (0: no byte there).
func inWord(c byte) bool {
	return c != 0 && (isWordByte(c) || c == '-' || c == '\'' || c == '"')
}

// Grouped is s as the lines that list the other failures group it:
// its expression with every number masked, so that failures that differ
// only in a number a probe changed (a cut shape's "1x4" and "2x4") are one
// line.
func Grouped(s Signature) string {
	g := s
	g.Expression = digitsRe.ReplaceAllString(s.Expression, "N")
	return g.String()
}

var digitsRe = regexp.MustCompile(`\d+`)

// Message is the line of stderr that states the failure s, as the process
// printed it (the user's own words, before normalization): a host
// exception's last "<class>: <message>" line, a device assert's assertion
// line; "" when there is none (a signal, a timeout), and the caller says
// s instead. The line is cut at maxMessage bytes.
func Message(stderr []byte, s Signature) string {
	text := string(stderr)
	if len(text) > maxParse {
		text = text[len(text)-maxParse/2:]
	}
	found := ""
	for _, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(stripRankPrefix(cleanLine(raw)))
		switch {
		case s.Family == FamilyDeviceAssert && strings.Contains(l, "Assertion `"):
			if found == "" {
				found = l
			}
		case s.Exception != "" && s.Family != FamilyDeviceAssert && strings.HasPrefix(l, s.Exception+":"):
			found = l
		}
	}
	if len(found) > maxMessage {
		found = strings.ToValidUTF8(found[:maxMessage], "") + "…"
	}
	return found
}

// maxMessage bounds a line Message returns.
const maxMessage = 400
