package regress

import (
	"bufio"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
)

// providerCase is one line of testdata/secrets.txt: a text with its
// generated parts filled in.
type providerCase struct {
	line     int
	secret   bool // "+": holds a secret; "-": holds none
	provider string
	text     string
	parts    []string // the generated parts, which must not leak
}

// bodyAlphabets are the alphabets of testdata/secrets.txt's {ALPHABET:LENGTH}.
var bodyAlphabets = map[string]string{
	"an":  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
	"al":  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
	"up":  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
	"hex": "0123456789abcdef",
	"dec": "0123456789",
	"b64": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
	"url": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-",
}

var bodyRe = regexp.MustCompile(`\{([a-z0-9]+):([0-9]+)\}`)

// readProviderCases reads testdata/secrets.txt, each body generated from
// its line's text, so that a case is the same bytes every run.
func readProviderCases(t *testing.T) []providerCase {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "secrets.txt"))
	require.NoError(t, err)
	defer f.Close()
	var cases []providerCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		require.True(t, len(fields) >= 3 && (fields[0] == "+" || fields[0] == "-"), "secrets.txt:%d: want a sign, a provider and a text: %q", n, line)
		rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line[1:]), fields[1]))
		h := fnv.New64a()
		h.Write([]byte(line))
		rng := rand.New(rand.NewPCG(h.Sum64(), uint64(n)))
		c := providerCase{line: n, secret: fields[0] == "+", provider: fields[1]}
		rest = bodyRe.ReplaceAllStringFunc(rest, func(m string) string {
			sub := bodyRe.FindStringSubmatch(m)
			alpha, ok := bodyAlphabets[sub[1]]
			require.True(t, ok, "secrets.txt:%d: no alphabet %q", n, sub[1])
			size, err := strconv.Atoi(sub[2])
			require.NoError(t, err)
			b := make([]byte, size)
			for i := range b {
				b[i] = alpha[rng.IntN(len(alpha))]
			}
			c.parts = append(c.parts, string(b))
			return string(b)
		})
		c.text = strings.NewReplacer(`\\`, `\`, `\n`, "\n").Replace(rest)
		if c.secret {
			require.NotEmpty(t, c.parts, "secrets.txt:%d: a secret has a generated part", n)
		}
		cases = append(cases, c)
	}
	require.NoError(t, sc.Err())
	return cases
}

// leaks are the generated parts of c (each whole, or each run of ten of
// its characters) found in text, read as written and without the
// backslashes and backticks of Markdown and JSON.
func (c providerCase) leaks(text string) []string {
	bare := strings.NewReplacer(`\`, "", "`", "").Replace(text)
	var out []string
	for _, p := range c.parts {
		const run = 10
		frags := []string{p}
		for i := 0; i+run <= len(p); i += run / 2 {
			frags = append(frags, p[i:i+run])
		}
		for _, f := range frags {
			if strings.Contains(text, f) || strings.Contains(bare, f) {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// TestRedactProviderSecrets: each secret of testdata/secrets.txt (the
// common providers' tokens and keys in an exception's message, an
// environment dump, a URL, JSON), put in a recording's error text, meta,
// diagnosis and expression, reaches none of the files Write writes
// (fixture.json, report.md with its upstream issue, the batch files), and
// the rules of form alone (secrets, as the command, the entry and the ids
// keep) take it out; redacting twice changes nothing. Each near-miss is
// kept as it is, by text, version and secrets.
func TestRedactProviderSecrets(t *testing.T) {
	cases := readProviderCases(t)
	plain := newRedactor(&Record{}, &Regression{Batch: &fixtures.Batch{}})
	var secret, kept int
	for _, c := range cases {
		name := c.provider + ":" + strconv.Itoa(c.line)
		if !c.secret {
			kept++
			assert.Equal(t, c.text, plain.text(c.text), "%s: no secret: kept as it is", name)
			assert.Equal(t, c.text, plain.version(c.text), name)
			assert.Equal(t, c.text, secrets(c.text), name)
			continue
		}
		secret++
		assert.Empty(t, c.leaks(secrets(c.text)), "%s: the rules of form take it out: %q", name, secrets(c.text))

		reg := secretRegression(t, c.text)
		reg.Batch.Meta["note"] = "uploaded with " + c.text
		red := newRedactor(&reg.Record, reg)
		once := red.text(c.text)
		assert.Empty(t, c.leaks(once), "%s: %q", name, once)
		assert.Equal(t, once, red.text(once), "%s: redacting twice changes nothing", name)

		dir, err := Write(t.TempDir(), reg)
		require.NoError(t, err, name)
		files := readDir(t, dir)
		require.Contains(t, files, RecordFile)
		require.Contains(t, files, ReportFile)
		files["upstream issue"] = []byte(issueOf(t, sectionOf(t, string(files[ReportFile]))))
		for file, data := range files {
			assert.Empty(t, c.leaks(string(data)), "%s: leaks into %s", name, file)
		}
	}
	t.Logf("%d secrets, %d near-misses", secret, kept)
}
