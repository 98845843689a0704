package signature

import (
	"regexp"
	"strings"
)

// volatileMark stands for a value of the batch that a message quoted.
const volatileMark = "'<value>'"

// maskVolatile replaces, in a host message's expression, each value of
// values that the message quotes ('c-7f3a', "c-7f3a") or names as a word
// of its own (c-7f3a, at least 3 characters) with one mark: the value
// comes from the batch, so that the same check on another sample, or on a
// probe's fresh value, is the same failure. values are raw (as the batch
// holds them); the expression was normalized (normalizeMessage), so each
// is normalized the same way before it is looked for. A signature with a
// known class, or of a family without a message, is returned as it is.
func maskVolatile(s Signature, values []string) Signature {
	if len(values) == 0 || (s.Family != FamilyHostCheck && s.Family != FamilyNaNAnomaly) || s.Class() != "" {
		return s
	}
	s.Expression = maskValues(s.Expression, values)
	return s
}

func maskValues(expr string, values []string) string {
	for _, raw := range values {
		v := maskIntegers(Normalize(raw))
		if v == "" || !strings.Contains(expr, v) {
			continue
		}
		q := regexp.QuoteMeta(v)
		expr = regexp.MustCompile(`'`+q+`'|"`+q+`"`).ReplaceAllString(expr, volatileMark)
		if len(v) >= 3 {
			// A word of its own: neither side continues it.
			re := regexp.MustCompile(`(^|[^\w'"-])` + q + `($|[^\w'"-])`)
			expr = re.ReplaceAllString(expr, "${1}"+volatileMark+"${2}")
		}
	}
	return expr
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
