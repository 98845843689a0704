package replay

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"reduce/fixtures"
)

// BatchArg is the placeholder in the exec backend's command for the
// candidate file's path.
const BatchArg = "{batch}"

// execBackend runs the user's command, {batch} replaced by a candidate file
// in the per-run directory.
type execBackend struct {
	path   string   // argv[0], looked up
	args   []string // argv[1:], {batch} replaced by {rundir}/<file>
	file   string   // the candidate's file name
	format fixtures.Format
	device string
	env    []string
	pool   *Pool
	set    Settings
	closed atomic.Bool
}

func newExecBackend(o Options) (Backend, error) {
	if strings.TrimSpace(o.Replay) == "" {
		return nil, fmt.Errorf("replay: --backend exec needs --replay 'CMD ... %s'", BatchArg)
	}
	argv, err := SplitCommand(o.Replay)
	if err != nil {
		return nil, fmt.Errorf("replay: --replay %q: %w", o.Replay, err)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("replay: --replay %q: no command", o.Replay)
	}
	if !strings.Contains(strings.Join(argv, "\x00"), BatchArg) {
		return nil, fmt.Errorf("replay: --replay %q: the command has no %s: it is replaced by the path of the candidate batch file", o.Replay, BatchArg)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("replay: --replay %q: command %q: %w", o.Replay, argv[0], err)
	}
	format, err := fixtures.ParseFormat(string(o.ReplayFormat))
	if err != nil {
		return nil, fmt.Errorf("replay: --replay-format %q: want bin, npz or safetensors", o.ReplayFormat)
	}
	kind := normKind(o.Device)
	if kind == "" || strings.Contains(o.Device, ":") {
		return nil, fmt.Errorf("replay: --device %q: the exec backend takes cpu, cuda or rocm (it only sets the environment; the command picks its device)", o.Device)
	}
	e := &execBackend{path: path, file: "batch" + format.Ext(), format: format, device: kind}
	target := RunDirArg + "/" + e.file
	shell := isShell(argv[0])
	for i, a := range argv[1:] {
		repl := target
		if shell && i > 0 && argv[i] == "-c" {
			// The script of sh -c: the path goes in quoted for the shell.
			repl = shellQuote(target)
		}
		e.args = append(e.args, strings.ReplaceAll(a, BatchArg, repl))
	}
	e.env = append(append(PythonEnv(), DeviceEnv(kind, o.blocking())...), o.env()...)
	e.set = o.settings(KindExec, kind)
	e.pool = o.pool(kind)
	return e, nil
}

func (e *execBackend) Kind() Kind { return KindExec }

func (e *execBackend) Settings() Settings { return e.set }

func (e *execBackend) Replay(ctx context.Context, b *fixtures.Batch) (Verdict, error) {
	if e.closed.Load() {
		return Verdict{Backend: KindExec, Device: e.device}, ErrClosed
	}
	start := time.Now()
	data, err := encodeBatch(b, e.format)
	if err != nil {
		return Verdict{Backend: KindExec, Device: e.device}, fmt.Errorf("replay: --replay-format %s: %w", e.format, err)
	}
	res := e.pool.Run(ctx, Command{
		Path:    e.path,
		Args:    e.args,
		Env:     e.env,
		Streams: map[string]func(io.Writer) error{e.file: data},
		Foreign: true,
	})
	return verdictOf(ctx, KindExec, e.device, res, start)
}

func (e *execBackend) Close() error {
	e.closed.Store(true)
	return nil
}

func isShell(prog string) bool {
	switch filepath.Base(prog) {
	case "sh", "bash", "dash", "zsh", "ksh", "ash", "busybox":
		return true
	}
	return false
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SplitCommand splits a --replay command into words as a POSIX shell
// would, without running one: words are separated by blanks; '...' keeps
// everything literally; "..." keeps everything but \" \\ \$ \` and
// \newline, which lose their backslash; outside quotes a backslash keeps
// the next character. Nothing is expanded: no variables, globs, ~, or
// command substitution, and the shell's operators (| & ; < > ( ) and
// backquotes) are refused outside quotes: a command that needs a shell is
// written as sh -c '...', where {batch} is replaced by the shell-quoted
// path.
func SplitCommand(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // a word has started (also an empty quoted one)
	)
	flush := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			flush()
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' at byte %d", i)
			}
			cur.WriteString(s[i+1 : i+1+j])
			in = true
			i += j + 1
		case c == '"':
			in = true
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("trailing backslash")
			}
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
				in = true
			}
		case strings.IndexByte("|&;<>()`", c) >= 0:
			return nil, fmt.Errorf("%q is a shell operator, and the command is not run by a shell: quote it, or write sh -c '...' (with %s inside)", string(c), BatchArg)
		case c == '$' && i+1 < len(s) && (s[i+1] == '(' || s[i+1] == '{' || isVarStart(s[i+1])):
			return nil, fmt.Errorf("%q: variables are not expanded, and the command is not run by a shell: write sh -c '...'", s[i:min(len(s), i+8)])
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	flush()
	return words, nil
}

func isVarStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
