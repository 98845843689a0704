package signature

import (
	"regexp"
	"strings"
)

// Normalize removes from one line of a replay's output the parts that change
// between runs of the same failure, so that two lines can be compared. The
// rules, in the order they apply:
//
//  1. ANSI colour sequences are dropped; runs of white space (carriage
//     returns included) become one space, none at the ends.
//  2. Rank prefixes are dropped, repeatedly: "[rank3]: x", "[default0]:x"
//     (torchrun --tee), "0: x" (srun --label style), "[1,0]<stderr>:x"
//     (mpirun --tag-output) → "x".
//  3. Timestamps "2024-05-01_12:00:03", "2024-05-01 12:00:03" and
//     "2024-05-01T12:00:03" → "TIME".
//  4. Hexadecimal numbers "0x7f3a2c01" → "0x?".
//  5. Line numbers after a file name are dropped: "Loss.cu:250: f" →
//     "Loss.cu: f", "alloc_cpu.cpp:75]" → "alloc_cpu.cpp]", "x.py:30:7" →
//     "x.py"; Python's ", line 123," → ", line N,"; "line=26" → "line=N".
//  6. Paths become their last element: "../aten/src/ATen/native/cuda/Loss.cu",
//     "/opt/conda/conda-bld/pytorch_1680000000/work/aten/.../Loss.cu" and
//     "C:\actions-runner\_work\pytorch\pytorch\aten\...\Loss.cu" → "Loss.cu".
//     A path under a torchinductor_<user> directory, whose file name is a
//     generated hash, or to a file of Inductor's hash-named code in any
//     directory (TORCHINDUCTOR_CACHE_DIR), → "torchinductor". Only tokens that look like paths
//     change (they start with /, \, ., ~ or a drive, have two separators, or
//     end in a name with a dot), so "N/A" and "inf/nan" stay.
//  7. CUDA block and thread ids are dropped: "k: block: [3,0,0], thread:
//     [95,0,0] Assertion" → "k: Assertion".
//  8. Process ids, ranks and device numbers → N: "pid 4242", "(pid: 4242)",
//     "PID 4242" → "pid N" style; "rank : 3", "local_rank: 3" → "rank : N";
//     "GPU 0" → "GPU N"; "cuda:3" → "cuda:N"; "node-2" → "node-N".
//  9. Byte counts and memory figures → "N B": "20.00 MiB", "15.78 GiB",
//     "1099511627776 bytes", "512 KB" → "N B".
//  10. Generated Inductor temporaries "tmp4", "tmp17" → "tmp".
//  11. White space is collapsed and rank prefixes stripped again (a path
//     such as "/0: x" may leave one), so that Normalize(Normalize(x)) ==
//     Normalize(x).
//
// Normalize does not replace other numbers: the signature of a host
// exception additionally replaces every integer with N (see Parse), while
// device-assert expressions keep theirs.
func Normalize(line string) string {
	s := ansiRe.ReplaceAllString(line, "")
	s = stripRankPrefix(strings.Join(strings.Fields(s), " "))
	s = cutMarkRe.ReplaceAllString(s, "")
	if len(s) > MaxLine {
		s = strings.ToValidUTF8(s[:MaxLine], "")
	}
	s = timeRe.ReplaceAllString(s, "TIME")
	s = hexRe.ReplaceAllString(s, "0x?")
	s = fileLineRe.ReplaceAllString(s, "$1")
	s = pyLineRe.ReplaceAllString(s, "${1}N")
	s = pathRe.ReplaceAllStringFunc(s, basenameOfPath)
	s = blockThreadRe.ReplaceAllString(s, "")
	s = pidRe.ReplaceAllString(s, "${1}N")
	s = rankRe.ReplaceAllString(s, "${1}N")
	s = deviceNumRe.ReplaceAllString(s, "${1}N")
	s = sizeRe.ReplaceAllString(s, "N B")
	s = tmpRe.ReplaceAllString(s, "tmp")
	return stripRankPrefix(strings.Join(strings.Fields(s), " "))
}

// MaxLine bounds what of a line Normalize keeps: a longer one is compared
// by its first MaxLine bytes (white space collapsed), so that a huge
// message the recorder cut (reduce_batch.py's "[cut: N more characters]")
// and the same message in a replay's bounded capture are one.
const MaxLine = 4096

var (
	// cutMarkRe is the mark reduce_batch.py ends an error text it cut with.
	cutMarkRe = regexp.MustCompile(` ?\[cut: \d+ more characters\]$`)
	ansiRe    = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)
	// rankPrefixRe matches one rank prefix at the start of a line; the
	// bracketed forms take one following space with them.
	rankPrefixRe  = regexp.MustCompile(`^(?:\[[A-Za-z_]*\d+\]: ?|\[\d+,\d+\]<std(?:out|err)>: ?|\d{1,5}: )`)
	timeRe        = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}[_ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b`)
	hexRe         = regexp.MustCompile(`\b0[xX][0-9A-Fa-f]+\b`)
	fileLineRe    = regexp.MustCompile(`(\.[A-Za-z][A-Za-z0-9_]*):\d+(?::\d+)?`)
	pyLineRe      = regexp.MustCompile(`(\bline[ =])\d+`)
	pathRe        = regexp.MustCompile(`(?:\b[A-Za-z]:)?(?:[\w.~+@$-]*[/\\])+[\w.~+@$-]*`)
	blockThreadRe = regexp.MustCompile(`block: \[[\d, ]*\], thread: \[[\d, ]*\] ?`)
	pidRe         = regexp.MustCompile(`(?i)(\bpid\b[ :=]{0,12})\d+`)
	rankRe        = regexp.MustCompile(`(?i)(\b(?:local_|global_|group_)?rank\b[ :=]{0,12})\d+`)
	deviceNumRe   = regexp.MustCompile(`(\bGPU |\bcuda:|\bhip:|\bnode-|\bdevice #)\d+`)
	sizeRe        = regexp.MustCompile(`\b\d+(?:\.\d+)? ?(?:bytes|[KMGTPE]i?B)\b`)
	tmpRe         = regexp.MustCompile(`\btmp\d+\b`)
)

func stripRankPrefix(s string) string {
	for i := 0; i < 4 && s != "" && (s[0] == '[' || isDigit(s[0])); i++ {
		loc := rankPrefixRe.FindStringIndex(s)
		if loc == nil {
			break
		}
		s = s[loc[1]:]
	}
	return s
}

// inductorFileRe is the name of a file Inductor generates: "c", then its
// code's hash in base32 (torch/_inductor/codecache.py, code_hash), then
// ".py", ".cpp", ".main.cpp", ".so"; in a TORCHINDUCTOR_CACHE_DIR of any
// name (a replay's is not the training run's), its path is no part of the
// failure either.
var inductorFileRe = regexp.MustCompile(`^c[a-z0-9]{50,52}(\.main)?\.(py|cpp|so)$`)

// basenameOfPath implements rule 6 of Normalize for one match of pathRe.
func basenameOfPath(p string) string {
	seps := strings.Count(p, "/") + strings.Count(p, `\`)
	trimmed := strings.TrimRight(p, `/\`)
	base := trimmed
	if i := strings.LastIndexAny(trimmed, `/\`); i >= 0 {
		base = trimmed[i+1:]
	}
	looksLikePath := seps >= 2 || strings.Contains(base, ".") ||
		strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) || strings.HasPrefix(p, ".") ||
		strings.HasPrefix(p, "~") || (len(p) > 2 && p[1] == ':')
	if !looksLikePath {
		return p
	}
	if strings.Contains(p, "torchinductor_") || inductorFileRe.MatchString(base) {
		return "torchinductor"
	}
	if base == "" {
		return p
	}
	return base
}

// normalizeMessage is Normalize followed by replacing every integer that
// starts a word with N: "Target 4 is out of bounds." → "Target N is out of
// bounds.", "batch_size (3)" → "batch_size (N)", "0D or 1D" → "ND or ND",
// "-100" → "N" (the sign of a value is a value too: target -1 and target
// 4 are one bug), "1.5" → "N". Digits inside identifiers (MulBackward0,
// float32) and the "0x?" of rule 4 stay.
func normalizeMessage(msg string) string {
	return maskIntegers(Normalize(msg))
}

func maskIntegers(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if !isDigit(c) || (i > 0 && isWordByte(s[i-1])) {
			b = append(b, c)
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "0x?") {
			b = append(b, "0x?"...)
			i += 3
			continue
		}
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
			j++
			for j < len(s) && isDigit(s[j]) {
				j++
			}
		}
		// A minus sign that starts a word belongs to the number.
		if len(b) > 0 && b[len(b)-1] == '-' && (i < 2 || !isWordByte(s[i-2])) {
			b = b[:len(b)-1]
		}
		b = append(b, 'N')
		i = j
	}
	return string(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isWordByte(c byte) bool {
	return c == '_' || isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// normalizeExpression prepares a device assert's expression: source text,
// so only generated tmpN names and white space change.
func normalizeExpression(e string) string {
	return tmpRe.ReplaceAllString(strings.Join(strings.Fields(e), " "), "tmp")
}
