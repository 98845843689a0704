package regress

import (
	"bytes"
	"encoding/json"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"reduce/fixtures"
	"reduce/internal/signature"
)

// Redaction: what users post (the upstream issue) or commit (fixture.json,
// report.md) holds nothing that says who or where they are, or lets anyone
// in. One redactor, redactor.text, serves the three writers: known words
// of the record (sample ids, user and host names), secrets by their form
// (e-mail addresses, tokens and keys, KEY=value assignments, URL
// signatures and passwords, private key blocks; a meta value whose key
// names a secret, whole), IP addresses, host names and every home or
// scratch path. Each kind has one fixed placeholder, so
// that a record redacts to the same bytes every time, and no placeholder
// is redacted again (text is idempotent). `reduce inspect` shows the
// recording as it is: it never redacts.

// redactor takes out of external text what would say who and where the
// user is, or which samples they train on: sample ids ("<id>"), user
// names ("<user>"), host names ("<host>") and home directories ("~"). It
// knows them from the record and the batch: the ids of the batch and of
// every culprit; the hosts of the batch's meta ("host", "hostname",
// "node"), each FQDN's short name too, and of the Slurm nodes; the users
// of the meta ("user", "username") and of every home or scratch directory
// in a path the record or the batch holds (/home/<user>, /Users/<user>,
// /scratch/<user>, C:\Users\<user>). Paths inside the step's working
// directory (the user's repository) become relative to it. It never looks
// at the machine it runs on: report.md is a function of the record.
type redactor struct {
	words []redaction // longest first
	cwd   string      // the step's working directory, "" for none
}

type redaction struct{ from, to string }

// minRedacted is the shortest id, user or host name replaced: shorter
// ones would hit the words and numbers of every message (an id "7", a user
// "ml") and say too little to identify anyone. Home directories are
// replaced whatever their owner's name.
const minRedacted = 3

// The placeholders. A home directory becomes "~", a path inside the
// step's working directory relative to it.
const (
	phID      = "<id>"
	phUser    = "<user>"
	phHost    = "<host>"
	phEmail   = "<email>"
	phToken   = "<token>"
	phSecret  = "<secret>"
	phIP      = "<ip>"
	phKey     = "<private key>"
	phURLAuth = "<user>:<password>"
)

// placeholderRe is any placeholder: never redacted again, and any text in a
// run JudgeRun judges (signature.Judge.Placeholders).
var placeholderRe = regexp.MustCompile(`<(?:id|user|host|email|token|secret|ip|private key|password)>`)

// isPlaceholder reports whether s is one placeholder, which is never
// redacted again.
func isPlaceholder(s string) bool {
	return s == phURLAuth || placeholderRe.FindString(s) == s && s != ""
}

const pathEnd = `/\s'"` + "`" + `:;,)\]<>`

var (
	homeRe     = regexp.MustCompile(`(?:/[\w.-]+)*/(?:home|homes|Users)/([^` + pathEnd + `]+)`)
	rootHomeRe = regexp.MustCompile(`(?m)(?:^|[^\w.~/-])(/root)\b`)
	winHomeRe  = regexp.MustCompile(`[A-Za-z]:\\+Users\\+([^\\` + pathEnd + `]+)`)
	// scratchRe is a per-user directory that is no home: its user part
	// alone is replaced (/scratch/<user>/run).
	scratchRe = regexp.MustCompile(`(?:/[\w.-]+)*/(?:scratch\d*|users|nobackup)/([^` + pathEnd + `]+)`)
)

// secretRule finds one kind of secret: re's matches, the span of group
// (0 for the whole match) replaced by to. check, when set, may refuse a
// match (it gets s and the match's indices).
type secretRule struct {
	re    *regexp.Regexp
	group int
	to    string
	check func(s string, m []int) bool
}

// tokenChars is what a key or token is made of.
const tokenChars = `[A-Za-z0-9_-]`

var secretRules = []secretRule{
	{re: regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`), to: phKey},
	// A JWT (a Bearer's, or bare): three base64url parts, the first "{".
	{re: regexp.MustCompile(`\beyJ` + tokenChars + `{8,}\.` + tokenChars + `{8,}\.` + tokenChars + `*`), to: phToken},
	{re: regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{16,})`), group: 1, to: phToken},
	{re: regexp.MustCompile(`(?i)\bauthorization["']?\s*[:=]\s*(?:[A-Za-z]+\s+)?([^\s"'<]+)`), group: 1, to: phToken,
		check: func(s string, m []int) bool { return !authSchemeRe.MatchString(s[m[2]:m[3]]) }},
	// Known prefixes, each provider's documented shape: prefix, alphabet,
	// least length. Where ordinary text has the prefix too (a hyphenated
	// "sk-learn-...", a name "hf_..."), the body must look generated
	// (random: group 1 mixes cases, and digits for sk-).
	// Hugging Face: hf_ and 34 letters.
	{re: regexp.MustCompile(`\bhf_([A-Za-z0-9]{16,})`), to: phToken, check: random(2)},
	// AWS access key ids: AKIA (long-term), ASIA (temporary) and the other
	// unique-id prefixes, and 16 upper-case letters and digits. The secret
	// key has no form of its own: KEY=value finds it by its name.
	{re: regexp.MustCompile(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[0-9A-Z]{16}`), to: phToken},
	// GitHub: ghp_, gho_, ghu_, ghs_, ghr_ and 36 alphanumerics;
	// github_pat_, 22, "_" and 59.
	{re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})`), to: phToken},
	// OpenAI (sk- and 48, sk-proj-, sk-svcacct-, sk-admin-) and Anthropic
	// (sk-ant-api03-, sk-ant-admin01-).
	{re: regexp.MustCompile(`\bsk-(` + tokenChars + `{20,})`), to: phToken, check: random(3)},
	// Stripe: secret, restricted and publishable keys (sk_, rk_, pk_; live_
	// or test_) and 24 to 99 alphanumerics; webhook secrets whsec_ and 32.
	{re: regexp.MustCompile(`\b(?:[srp]k_(?:live|test)_[A-Za-z0-9]{24,}|whsec_[A-Za-z0-9+/]{32,})`), to: phToken},
	// Slack: xoxb- (bot), xoxp- (user), xoxa- (app), xoxr- (refresh), xoxe-,
	// xoxo-, xoxs-; xapp- (app-level): digits and dashed parts.
	{re: regexp.MustCompile(`\b(?:xox[abposre]-[A-Za-z0-9-]{8,}|xapp-\d-[A-Za-z0-9-]{16,})`), to: phToken},
	// GitLab: glpat- (personal, project, group), gldt- (deploy), glrt- and
	// glrtr- (runner), glcbt- (CI job), glptt- (trigger), glft- (feed),
	// glimt- (incoming mail), glagent-, gloas- (OAuth application),
	// glsoat- (SCIM), glffct- (feature flags), glwt- (workspace) and 20 or
	// more, a routable token's ".01.xxxx" too; GR1348941 (runner
	// registration) and 20.
	{re: regexp.MustCompile(`\b(?:gl(?:pat|dt|rtr?|cbt|ptt|ft|imt|agent|oas|soat|ffct|wt)-` + tokenChars + `{20,}(?:\.[A-Za-z0-9_-]+){0,2}|GR1348941` + tokenChars + `{20,})`), to: phToken},
	// Google: API keys (AIza and 35), OAuth access tokens (ya29.), OAuth
	// client secrets (GOCSPX- and 28).
	{re: regexp.MustCompile(`\b(?:AIza` + tokenChars + `{30,}|ya29\.` + tokenChars + `{20,}|GOCSPX-` + tokenChars + `{28,})`), to: phToken},
	// npm: npm_ and 36 alphanumerics. PyPI: pypi- and a macaroon, whose
	// base64 starts "AgE" (version 2, then its location: pypi.org,
	// test.pypi.org).
	{re: regexp.MustCompile(`\b(?:npm_[A-Za-z0-9]{30,}|pypi-AgE` + tokenChars + `{50,})`), to: phToken},
	// Azure: a storage connection string, whole (its account's name and
	// key, its endpoints); a SAS token, in a connection string
	// ("SharedAccessSignature=sv=...&sig=...") or a header's
	// ("SharedAccessSignature sr=...&sig=..."). An AccountKey= or a
	// SharedAccessKey= alone is KEY=value's (secretName).
	{re: regexp.MustCompile(`\bDefaultEndpointsProtocol=(https?;[^\s"'<>),\]}]+)`), group: 1, to: phSecret},
	{re: regexp.MustCompile(`\bSharedAccessSignature[=\s]\s*([a-z]+=[^;\s"'<>]+)`), group: 1, to: phSecret},
	// Slack incoming webhooks and workflow triggers: the path is the key.
	{re: regexp.MustCompile(`\bhooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/-]{16,})`), group: 1, to: phSecret},
	// A signature or token in a URL's query.
	{re: regexp.MustCompile(`(?i)(?:\b|[?&;])(?:x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential)=([^&\s"'#<>]+)`), group: 1, to: phSecret},
	{re: regexp.MustCompile(`(?i)[?&;](?:sig|signature|token|access_token|id_token|api_key|apikey|key|password|secret|code)=([^&\s"'#<>]+)`), group: 1, to: phSecret},
	// NAME=value where the name says it holds a secret (WANDB_API_KEY,
	// HF_TOKEN, db_password, "api_key": "..."); "name: value" when the
	// name has a part before it (HF_TOKEN: ...) or is quoted.
	{re: regexp.MustCompile(`(?i)\b(` + secretName + `)(["']?\s*(?:=|:\s)\s*)("[^"\n]*"|'[^'\n]*'|[^\s"'&,;)\]}]+)`), group: 3, to: phSecret,
		check: func(s string, m []int) bool {
			name, sep := s[m[2]:m[3]], s[m[4]:m[5]]
			if strings.HasPrefix(strings.TrimLeft(sep, `"' `), ":") && !strings.ContainsAny(name, "_-.") && !strings.ContainsAny(sep, `"'`) &&
				!strings.HasPrefix(strings.ToLower(name), "passw") {
				return false // "token: 'x'", a parser's words
			}
			v := strings.Trim(s[m[6]:m[7]], `"'`)
			return v != "" && !isPlaceholder(v)
		}},
	// user:password@ in a URL.
	{re: regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://([^/\s:@"'<>]+:[^/\s@"'<>]+)@`), group: 1, to: phURLAuth},
	{re: regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b`), to: phEmail},
}

// secretName is a name that says it holds a secret: the KEY=value rule's
// names (AWS's SecretAccessKey, Azure's AccountKey and SharedAccessKey
// among them, and a key's id: aws_access_key_id, a Google service
// account's private_key_id).
const secretName = `[A-Za-z0-9_.-]*(?:token|secret|passw(?:or)?d|pwd|apikey|accesskey|accountkey|credentials?)|[A-Za-z0-9_.-]*[_-]key(?:[_-]id)?`

var secretNameRe = regexp.MustCompile(`(?i)^(?:` + secretName + `)$`)

// secretWords are the words that make a key a secret's wherever they
// stand in it (auth_header, HF_TOKEN_FILE, wandbApiKey); "max_tokens",
// "tokenizer" and "author" are none.
var secretWords = map[string]bool{"key": true, "apikey": true, "token": true, "secret": true, "password": true, "passwd": true,
	"pwd": true, "credential": true, "credentials": true, "auth": true, "oauth": true, "authorization": true}

// secretKey reports whether a meta or extra key names a secret (secretName,
// or a word of secretWords: its words split at what is no letter or digit
// and where a lower-case letter meets an upper-case one): its whole value
// is one, which no rule of the text would find alone.
func secretKey(k string) bool {
	if secretNameRe.MatchString(k) {
		return true
	}
	for _, f := range strings.FieldsFunc(k, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) }) {
		start, prev := 0, rune(0)
		for i, c := range f {
			if unicode.IsUpper(c) && unicode.IsLower(prev) {
				if secretWords[strings.ToLower(f[start:i])] {
					return true
				}
				start = i
			}
			prev = c
		}
		if secretWords[strings.ToLower(f[start:])] {
			return true
		}
	}
	return false
}

// secretValue is v as a secret-named key holds it: "" and a placeholder
// as they are, any other value the placeholder.
func secretValue(v string) string {
	if v == "" || isPlaceholder(v) {
		return v
	}
	return phSecret
}

// random is a check that group 1 of a match looks generated: it holds at
// least n of upper-case letters, lower-case letters and digits, which no
// hyphenated word or snake_case name of one case does.
func random(n int) func(s string, m []int) bool {
	return func(s string, m []int) bool {
		var upper, lower, digit int
		for _, c := range s[m[2]:m[3]] {
			switch {
			case c >= 'A' && c <= 'Z':
				upper = 1
			case c >= 'a' && c <= 'z':
				lower = 1
			case c >= '0' && c <= '9':
				digit = 1
			}
		}
		return upper+lower+digit >= n
	}
}

// authSchemeRe is an Authorization header's scheme, which stays.
var authSchemeRe = regexp.MustCompile(`(?i)^(?:bearer|basic|digest|token)$`)

var (
	ipv4Re = regexp.MustCompile(`(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)`)
	// ipv6Re is a candidate, checked by net.ParseIP.
	ipv6Re = regexp.MustCompile(`[0-9A-Fa-f:]*:[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*`)
	// versionBefore is what says that four dotted numbers are a version
	// (cuDNN 8.9.2.26), not an address.
	versionBefore = regexp.MustCompile(`(?i)(?:version|ver|cudnn|cuda|nccl|driver|torch|python|release|build|firmware|[=<>~!]=)\s*[:=]?\s*$`)
	// fqdnRe is a host name with a domain: dotted labels ending in a
	// top-level domain that no file extension or Python name is named
	// after (".py", ".so", ".pt", ".io", "torch.int" and "self.se" are not
	// taken).
	fqdnRe = regexp.MustCompile(`(?i)\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:com|org|net|edu|gov|mil|internal|local|localdomain|lan|corp|intra|intranet|cluster|hpc|ai|de|uk|fr|ch|jp|cn|nl|fi|ca|au|us|eu|kr|es|ru|br|il|dk|be|cz|sg|tw|hk|nz|ie|gr|hu|ro|ac)\b`)
)

// publicHosts are the domains of what torch and its libraries print
// (documentation, issue trackers): no one's whereabouts.
var publicHosts = []string{"pytorch.org", "github.com", "githubusercontent.com", "python.org", "pypi.org", "nvidia.com",
	"huggingface.co", "lightning.ai", "numpy.org", "readthedocs.io", "stackoverflow.com", "example.com", "example.org",
	"hooks.slack.com"}

func newRedactor(rec *Record, reg *Regression) *redactor {
	r := &redactor{}
	seen := map[string]bool{}
	add := func(word, to string) {
		for _, w := range []string{word, validText(word)} {
			if utf8.RuneCountInString(w) >= minRedacted && !seen[w] && !placeholderRe.MatchString(w) {
				seen[w] = true
				r.words = append(r.words, redaction{w, to})
			}
		}
	}
	for _, id := range reg.Batch.SampleIDs {
		add(id, phID)
	}
	for _, c := range rec.Culprits {
		for _, id := range c.IDs {
			add(id, phID)
		}
	}
	meta := reg.Batch.Meta
	var hosts []string
	for _, k := range []string{"host", "hostname", "node"} {
		hosts = append(hosts, meta[k])
	}
	hosts = append(hosts, strings.Split(rec.Environment.Meta["slurm.nodes"], ",")...)
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		short, _, dotted := strings.Cut(h, ".")
		for _, name := range []string{h, short} {
			if name == h || dotted {
				add(name, phHost)
				// As a signature's expression holds it: its numbers masked
				// ("gpu-node-17" → "gpu-node-N").
				add(digitsRe.ReplaceAllString(name, "N"), phHost)
			}
		}
	}
	add(meta["user"], phUser)
	add(meta["username"], phUser)
	texts := []string{rec.Entry, rec.Step, rec.Source.File, rec.Diagnosis, rec.Signature.Expression}
	texts = append(texts, rec.ReplayArgs...)
	for _, m := range []map[string]string{meta, rec.Environment.Meta} {
		for _, v := range m {
			texts = append(texts, v)
		}
	}
	if reg.Batch.Error != nil {
		texts = append(texts, reg.Batch.Error.Text)
	}
	if rec.CPU != nil {
		texts = append(texts, rec.CPU.Message)
	}
	if s := reg.Batch.Step; s != nil {
		texts = append(texts, s.File, s.Cwd)
		if strings.HasPrefix(s.Cwd, "/") && strings.Count(s.Cwd, "/") >= 2 {
			r.cwd = strings.TrimRight(s.Cwd, "/")
		}
	}
	for _, s := range texts {
		for _, re := range []*regexp.Regexp{homeRe, winHomeRe, scratchRe} {
			for _, m := range re.FindAllStringSubmatch(s, -1) {
				add(m[1], phUser)
			}
		}
	}
	slices.SortStableFunc(r.words, func(a, b redaction) int { return len(b.from) - len(a.from) })
	return r
}

// span is a part of a text to replace: s[start:end] by to.
type span struct {
	start, end int
	to         string
}

// signature redacts the texts of s, as a record holds them (and as a run
// the plugin reports is judged against them, JudgeRun).
func (r *redactor) signature(s *signature.Signature) {
	s.Kernel, s.Expression, s.File, s.Exception = r.text(s.Kernel), r.text(s.Expression), r.text(s.File), r.text(s.Exception)
}

// text is s redacted: every span the rules find (redactor.spans), the
// leftmost first and of those the longest, none replaced twice.
func (r *redactor) text(s string) string { return apply(s, r.spans(s, true)) }

// version is text for a version string (cuDNN's 8.9.2.26): its four
// dotted numbers are no address.
func (r *redactor) version(s string) string { return apply(s, r.spans(s, false)) }

// apply replaces spans (in order, none overlapping) in s.
func apply(s string, spans []span) string {
	var b strings.Builder
	at := 0
	for _, sp := range spans {
		b.WriteString(s[at:sp.start])
		b.WriteString(sp.to)
		at = sp.end
	}
	b.WriteString(s[at:])
	return b.String()
}

// secrets is s with its secrets alone redacted (tokens, keys, passwords,
// e-mail addresses): what a command the collector runs keeps, its paths
// and hosts needed to run it.
func secrets(s string) string {
	var spans []span
	for _, rule := range secretRules {
		spans = append(spans, rule.find(s)...)
	}
	return apply(s, pick(spans))
}

// spans are the parts of s to replace, in order, none overlapping.
func (r *redactor) spans(s string, ips bool) []span {
	var all []span
	for _, rule := range secretRules {
		all = append(all, rule.find(s)...)
	}
	if ips {
		all = append(all, ipSpans(s)...)
	}
	all = append(all, hostSpans(s)...)
	all = append(all, pathSpans(s, r.cwd)...)
	all = append(all, r.wordSpans(s)...)
	return pick(all)
}

// pick orders spans and drops those that overlap an earlier one: the
// leftmost wins, and of those starting together the longest.
func pick(all []span) []span {
	slices.SortStableFunc(all, func(a, b span) int {
		if a.start != b.start {
			return a.start - b.start
		}
		return (b.end - b.start) - (a.end - a.start)
	})
	var out []span
	end := 0
	for _, sp := range all {
		if sp.start >= end && sp.end > sp.start {
			out = append(out, sp)
			end = sp.end
		}
	}
	return out
}

func (rule secretRule) find(s string) []span {
	var out []span
	for _, m := range rule.re.FindAllStringSubmatchIndex(s, -1) {
		if rule.check != nil && !rule.check(s, m) {
			continue
		}
		start, end := m[2*rule.group], m[2*rule.group+1]
		if start < 0 || isPlaceholder(s[start:end]) {
			continue
		}
		to := rule.to
		if v := s[start:end]; rule.group > 0 && len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			to = v[:1] + to + v[:1] // a quoted value keeps its quotes
		}
		out = append(out, span{start, end, to})
	}
	return out
}

// ipSpans are the IPv4 and IPv6 addresses of s, less the ones that say
// nothing of a machine (0.0.0.0, loopback, netmasks) and four dotted
// numbers that are a version.
func ipSpans(s string) []span {
	var out []span
	for _, m := range ipv4Re.FindAllStringIndex(s, -1) {
		before, _ := utf8.DecodeLastRuneInString(s[:m[0]])
		after := s[m[1]:]
		switch {
		case m[0] > 0 && (before == '.' || isWordRune(before)),
			after != "" && (isWordRune(rune(after[0])) || after[0] == '+' || after[0] == '.' && len(after) > 1 && isDigit(after[1])),
			versionBefore.MatchString(s[max(0, m[0]-24):m[0]]):
			continue
		}
		ip := s[m[0]:m[1]]
		if ip == "0.0.0.0" || strings.HasPrefix(ip, "127.") || strings.HasPrefix(ip, "255.") {
			continue
		}
		out = append(out, span{m[0], m[1], phIP})
	}
	for _, m := range ipv6Re.FindAllStringIndex(s, -1) {
		start, end := m[0], m[1]
		for end > start && (s[end-1] == '.' || s[end-1] == ':' && (end-start < 2 || s[end-2] != ':')) {
			end-- // a sentence's colon or period after it
		}
		before, _ := utf8.DecodeLastRuneInString(s[:start])
		after, _ := utf8.DecodeRuneInString(s[end:])
		if start > 0 && (isWordRune(before) || before == '.') || end < len(s) && (isWordRune(after) || after == ':') {
			continue
		}
		cand := s[start:end]
		ip := net.ParseIP(cand)
		groups := len(strings.FieldsFunc(cand, func(r rune) bool { return r == ':' }))
		if ip == nil || ip.To4() != nil && !strings.Contains(cand, "::ffff:") || groups < 3 || ip.IsLoopback() || ip.IsUnspecified() {
			continue
		}
		out = append(out, span{start, end, phIP})
	}
	return out
}

// hostSpans are the host names with a domain in s (fqdnRe), less the
// public ones (publicHosts) and dotted names of code: one followed by a
// call, an attribute or a ":name".
func hostSpans(s string) []span {
	var out []span
	for _, m := range fqdnRe.FindAllStringIndex(s, -1) {
		before, _ := utf8.DecodeLastRuneInString(s[:m[0]])
		after := s[m[1]:]
		switch {
		case m[0] > 0 && (before == '.' || before == '_' || before == '-'),
			after != "" && (after[0] == '(' || after[0] == '_' || after[0] == '-'),
			len(after) > 1 && (after[0] == '.' || after[0] == ':') && (unicode.IsLetter(rune(after[1])) || after[1] == '_'):
			continue
		}
		host := strings.ToLower(s[m[0]:m[1]])
		public := false
		for _, p := range publicHosts {
			public = public || host == p || strings.HasSuffix(host, "."+p)
		}
		if !public {
			out = append(out, span{m[0], m[1], phHost})
		}
	}
	return out
}

// pathSpans are s's paths inside cwd (made relative: the directory and
// its slash dropped, cwd itself "."), its home directories ("~") and the
// user part of its scratch directories.
func pathSpans(s, cwd string) []span {
	var out []span
	if cwd != "" {
		for i := 0; ; {
			k := strings.Index(s[i:], cwd)
			if k < 0 {
				break
			}
			start, end := i+k, i+k+len(cwd)
			before, _ := utf8.DecodeLastRuneInString(s[:start])
			i = end
			if start > 0 && (isWordRune(before) || strings.ContainsRune("./~-", before)) {
				continue
			}
			switch {
			case end < len(s) && s[end] == '/':
				out = append(out, span{start, end + 1, ""})
			case end == len(s) || strings.ContainsRune(pathEnd, rune(s[end])) && s[end] != '/':
				out = append(out, span{start, end, "."})
			}
		}
	}
	for _, re := range []*regexp.Regexp{homeRe, winHomeRe} {
		for _, m := range re.FindAllStringIndex(s, -1) {
			out = append(out, span{m[0], m[1], "~"})
		}
	}
	for _, m := range rootHomeRe.FindAllStringSubmatchIndex(s, -1) {
		out = append(out, span{m[2], m[3], "~"})
	}
	for _, m := range scratchRe.FindAllStringSubmatchIndex(s, -1) {
		if !isPlaceholder(s[m[2]:m[3]]) {
			out = append(out, span{m[2], m[3], phUser})
		}
	}
	return out
}

// wordSpans are the known words where they stand whole (wholeWord).
func (r *redactor) wordSpans(s string) []span {
	var out []span
	if len(r.words) == 0 {
		return nil
	}
	for i := 0; i < len(s); {
		hit := false
		for _, w := range r.words {
			if strings.HasPrefix(s[i:], w.from) && wholeWord(s, i, i+len(w.from)) {
				out = append(out, span{i, i + len(w.from), w.to})
				i += len(w.from)
				hit = true
				break
			}
		}
		if !hit {
			i++
		}
	}
	return out
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// wholeWord reports whether s[i:j] does not continue a word on either side:
// where it starts (ends) with a letter or digit, the rune before (after)
// it is none. An underscore separates words: a user "alice" is taken out
// of "alice_runs" too.
func wholeWord(s string, i, j int) bool {
	isWord := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
	first, _ := utf8.DecodeRuneInString(s[i:j])
	last, _ := utf8.DecodeLastRuneInString(s[i:j])
	if before, _ := utf8.DecodeLastRuneInString(s[:i]); i > 0 && isWord(first) && isWord(before) {
		return false
	}
	if after, _ := utf8.DecodeRuneInString(s[j:]); j < len(s) && isWord(last) && isWord(after) {
		return false
	}
	return true
}

// record redacts what fixture.json holds of external text: the failure's
// words, the diagnosis, the source, the environment. The sample ids and
// tensor names are the data's own names, which the collector's tests look
// up: the ids lose their secrets only (secretIDs, as the batch files'
// do), the names stay; the command and the entry the collector runs lose
// their secrets only (secrets): their paths are needed to run them.
func (r *redactor) record(rec *Record) {
	r.signature(&rec.Signature)
	if rec.Recorded != nil {
		c := *rec.Recorded
		r.signature(&c)
		rec.Recorded = &c
	}
	rec.ModeReason, rec.Diagnosis, rec.Predates = r.text(rec.ModeReason), r.text(rec.Diagnosis), r.text(rec.Predates)
	if rec.CPU != nil {
		rec.CPU = &CPUFailure{Exception: r.text(rec.CPU.Exception), Message: r.text(rec.CPU.Message)}
	}
	if rec.Raised != nil {
		c := *rec.Raised
		c.File, c.Function = r.text(c.File), r.text(c.Function)
		rec.Raised = &c
	}
	if rec.Compiled != nil {
		c := *rec.Compiled
		c.EagerFailure = r.text(c.EagerFailure)
		rec.Compiled = &c
	}
	rec.Culprits = slices.Clone(rec.Culprits)
	for i, c := range rec.Culprits {
		rec.Culprits[i].IDs = secretIDs(c.IDs)
		if c.Relation != nil {
			rel := *c.Relation
			rel.Text = r.text(rel.Text)
			rec.Culprits[i].Relation = &rel
		}
	}
	if rec.Window != nil {
		w := *rec.Window
		w.Steps = slices.Clone(w.Steps)
		for i := range w.Steps {
			w.Steps[i].IDs = secretIDs(w.Steps[i].IDs)
		}
		rec.Window = &w
	}
	if rec.Shape != nil {
		c := *rec.Shape
		c.Text = r.text(c.Text)
		rec.Shape = &c
	}
	rec.Neighbours = slices.Clone(rec.Neighbours)
	for i := range rec.Neighbours {
		rec.Neighbours[i].What = r.text(rec.Neighbours[i].What)
	}
	rec.OtherFailures = slices.Clone(rec.OtherFailures)
	for i := range rec.OtherFailures {
		o := &rec.OtherFailures[i]
		r.signature(&o.Signature)
		o.Message = r.text(o.Message)
	}
	rec.Source.File = r.text(rec.Source.File)
	if rk := rec.Source.Ranks; rk != nil {
		c := *rk
		c.Others = slices.Clone(rk.Others)
		for i := range c.Others {
			o := &c.Others[i]
			o.File, o.Error, o.Unreadable = r.text(o.File), r.text(o.Error), r.text(o.Unreadable)
		}
		rec.Source.Ranks = &c
	}
	env := &rec.Environment
	env.Backend, env.Device, env.Launcher = r.text(env.Backend), r.text(env.Device), r.text(env.Launcher)
	env.Reduce, env.Python, env.Torch = r.version(env.Reduce), r.version(env.Python), r.version(env.Torch)
	env.Meta = r.meta(env.Meta)
	rec.Step = r.text(rec.Step)
	rec.Entry = secrets(rec.Entry)
	if rec.ReplayArgs != nil {
		args := make([]string, len(rec.ReplayArgs))
		for i, a := range rec.ReplayArgs {
			args[i] = secrets(a)
		}
		rec.ReplayArgs = args
	}
	rec.Extra = r.extra(rec.Extra)
}

// meta is m with each value redacted: a secret's (secretKey) whole, a
// version's (versionKey) as one.
func (r *redactor) meta(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch {
		case hostKey[k] && v != "":
			out[k] = phHost // whatever its length: a name too short to find in a text is still this one
		case secretKey(k):
			out[k] = secretValue(v)
		case versionKey(k):
			out[k] = r.version(v)
		default:
			out[k] = r.text(v)
		}
	}
	return out
}

// hostKey are the meta keys that name the recording's host.
var hostKey = map[string]bool{"host": true, "hostname": true, "node": true}

// digitsRe is a run of digits.
var digitsRe = regexp.MustCompile(`[0-9]+`)

// versionKey reports whether a meta key names a version.
func versionKey(k string) bool {
	k = strings.ToLower(k)
	for _, v := range []string{"torch", "python", "cuda", "cudnn", "hip", "nccl", "driver", "version", "reduce"} {
		if strings.Contains(k, v) {
			return true
		}
	}
	return false
}

// extra is Record.Extra with its strings redacted, at any depth, and the
// value of a key that names a secret (secretKey), whatever it holds, the
// placeholder.
func (r *redactor) extra(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return r.text(x)
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = walk(e)
			}
			return out
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, e := range x {
				if secretKey(k) && e != nil && e != "" {
					out[r.text(k)] = phSecret
				} else {
					out[r.text(k)] = walk(e)
				}
			}
			return out
		}
		return v
	}
	return walk(m).(map[string]any)
}

// keptMeta are the meta keys whose values reduce and the collector read
// back from a fixture's batch files (the expectation, the replay's
// switches, a rank's place, the reduction's provenance, the kept ids,
// which are the data's): their own tokens, written as they are, the ids
// less their secrets (secretIDs).
var keptMeta = map[string]bool{
	MetaExpect: true, fixtures.ReplayCompileKey: true, fixtures.ReplayStateKey: true, fixtures.MetaCompiled: true,
	"rank": true, "world_size": true, "reduce_mode": true, "partial": true, "source_hash": true, "kept_samples": true,
	"kept_ids": true,
}

// regression is reg with its batches as the fixture's batch files hold
// them (batch); reg is not modified.
func (r *redactor) regression(reg *Regression) *Regression {
	c := *reg
	c.Batch, c.Boundary = r.batch(reg.Batch), r.batch(reg.Boundary)
	if reg.Neighbours != nil {
		c.Neighbours = make(map[string]*fixtures.Batch, len(reg.Neighbours))
		for k, b := range reg.Neighbours {
			c.Neighbours[k] = r.batch(b)
		}
	}
	return &c
}

// secretIDs is ids, each with its secrets taken out (secrets): a
// sample's id is the data's own name, which the collector's tests look
// up, and keeps all else. nil stays nil.
func secretIDs(ids []string) []string {
	if ids == nil {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = secrets(id)
	}
	return out
}

// secretSamples is the structure n with the secrets taken out of each
// per-sample string (a samples leaf's), as of the ids: n itself where
// there are none, n never modified.
func secretSamples(n *fixtures.Node) *fixtures.Node {
	if n == nil {
		return nil
	}
	var c *fixtures.Node
	edit := func() *fixtures.Node {
		if c == nil {
			cc := *n
			cc.Items, cc.Values = slices.Clone(n.Items), slices.Clone(n.Values)
			c = &cc
		}
		return c
	}
	for i, it := range n.Items {
		if s := secretSamples(it); s != it {
			edit().Items[i] = s
		}
	}
	for i, v := range n.Values {
		var s string
		if n.Kind != fixtures.NodeSamples || json.Unmarshal(v, &s) != nil {
			continue // no per-sample string
		}
		if red := secrets(s); red != s {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(red) // a string always encodes
			edit().Values[i] = bytes.TrimRight(buf.Bytes(), "\n")
		}
	}
	if c == nil {
		return n
	}
	return c
}

// maxBatchError bounds the recorded failure's text a fixture's batch file
// keeps, as redaction reads every byte it is given: signature.Parse's
// bound (its maxParse), of which it keeps the head and the tail as Parse
// reads them, so that the failure parses as the whole text did.
const maxBatchError = 2 << 20

// cutMiddle is s, or when longer than n its first and last n/2 bytes with
// a line between them that says how many were cut.
func cutMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n/2] + "\n[... " + strconv.Itoa(len(s)-n) + " bytes cut ...]\n" + s[len(s)-n/2:]
}

// batch is b as a fixture's batch file holds it, users committing it:
// the recorded failure's text (cutMiddle to maxBatchError) and class
// redacted, and each meta value but keptMeta's (a secret's whole, a
// version's as one); the interpreter ("executable") without a path
// relative to the step's directory, so that a replay finds it where it
// was recorded or falls back to its own. The ids (the batch's, its window
// steps', kept_ids) and the structure's per-sample strings lose their
// secrets only (secretIDs, secretSamples), as the record's ids do. The
// tensors, the attributes, the shared values and the step are the data's,
// as they are: the collector moves the step's recorded paths into the
// repository under test (reduce_collect._step_paths), and reduce replays
// it there. nil stays nil; b is not modified.
func (r *redactor) batch(b *fixtures.Batch) *fixtures.Batch {
	if b == nil {
		return nil
	}
	c := *b
	c.SampleIDs, c.Structure = secretIDs(b.SampleIDs), secretSamples(b.Structure)
	if b.Window != nil && b.Window.Steps != nil {
		w := *b.Window
		w.Steps = make([]*fixtures.WindowStep, len(b.Window.Steps))
		for i, st := range b.Window.Steps {
			s := *st
			s.SampleIDs, s.Structure = secretIDs(st.SampleIDs), secretSamples(st.Structure)
			w.Steps[i] = &s
		}
		c.Window = &w
	}
	if b.Error != nil {
		e := *b.Error
		e.Text, e.Exception = r.text(cutMiddle(e.Text, maxBatchError)), r.text(e.Exception)
		c.Error = &e
	}
	if b.Meta != nil {
		c.Meta = make(map[string]string, len(b.Meta))
		for k, v := range b.Meta {
			switch {
			case k == "kept_ids":
				c.Meta[k] = strings.Join(secretIDs(strings.Split(v, ",")), ",")
			case keptMeta[k]:
				c.Meta[k] = v
			case hostKey[k] && v != "":
				c.Meta[k] = phHost
			case secretKey(k):
				c.Meta[k] = secretValue(v)
			case k == "executable":
				c.Meta[k] = (&redactor{words: r.words}).text(v)
			case versionKey(k):
				c.Meta[k] = r.version(v)
			default:
				c.Meta[k] = r.text(v)
			}
		}
	}
	return &c
}

// maxReportError bounds the recorded error text report.md is written
// from: it quotes the last lines, and the failure's line is the last
// exception line. Redaction reads every byte it is given.
const maxReportError = 64 << 10

// tail is s's last n bytes at most, from a line's start, after "...\n"
// when cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "...\n" + s
}

// forReport is what report.md is written from: rec (already redacted, as
// fixture.json holds it) with the command and the entry redacted whole,
// and reg with its batch's recorded failure and provenance redacted; the
// tensors, the ids and the attributes are the data's, as they are.
func (r *redactor) forReport(rec *Record, reg *Regression) (*Record, *Regression) {
	rc := *rec
	rc.Entry = r.text(rec.Entry)
	if rec.ReplayArgs != nil {
		rc.ReplayArgs = make([]string, len(rec.ReplayArgs))
		for i, a := range rec.ReplayArgs {
			rc.ReplayArgs[i] = r.text(a)
		}
	}
	rg := *reg
	b := *reg.Batch
	if b.Error != nil {
		e := *b.Error
		e.Text, e.Exception = r.text(tail(e.Text, maxReportError)), r.text(e.Exception)
		b.Error = &e
	}
	b.Meta = r.meta(b.Meta)
	rg.Batch = &b
	return &rc, &rg
}
