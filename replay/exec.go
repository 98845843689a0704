package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"reduce/fixtures"
)

// BatchArg is the placeholder in the exec backend's command for the
// candidate file's path.
const BatchArg = "{batch}"

// execBackend runs the user's command, {batch} replaced by a candidate file
// in the per-run directory: the candidate is built here from the view and
// the batch (candidateFile) and encoded straight into that file. A Python
// command that the fork server can run (see pythonProgramOf) runs warm:
// each candidate in a child forked from a zygote of the torch backend's
// kind (warm) that has imported torch and the --warm-import modules,
// started with the command's own interpreter.
type execBackend struct {
	bound
	path   string   // argv[0], looked up
	args   []string // argv[1:], {batch} replaced by {rundir}/<file>
	file   string   // the candidate's file name
	format fixtures.Format
	device string
	env    []string
	set    Settings
	warm   *torchBackend // nil: every candidate runs the command itself (cold)
	// A recorded command's (newCommandBackend): its directory, and the
	// startup hook's directory and the PYTHONPATH that holds it.
	dir, hook, pythonPath string
	closed                atomic.Bool
}

func newExecBackend(o Options) (Backend, error) {
	if o.Command != nil {
		return newCommandBackend(o)
	}
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
	e := &execBackend{bound: bound{src: o.src}, path: path, file: "batch" + format.Ext(), format: format, device: kind}
	if e.args, err = commandArgs(argv, RunDirArg+"/"+e.file); err != nil {
		return nil, fmt.Errorf("replay: --replay %q: %w", o.Replay, err)
	}
	e.env = append(append(PythonEnv(), DeviceEnv(kind, o.blocking())...), o.env()...)
	e.set = o.settings(KindExec, kind)
	e.pool = o.pool(kind)
	if o.NoZygote && o.slurm == nil {
		return e, nil // asked for: no notice
	}
	var why string
	switch prog, reason := pythonProgramOf(argv, e.args, e.file); {
	case reason != "":
		why = reason
	case o.slurm != nil:
		why = "the " + string(LauncherSlurm) + " launcher runs each replay as a job of its own"
	default:
		prog.warm = o.WarmImport
		e.warm, why, err = warmExec(o, path, prog, e)
		if err != nil {
			return nil, err
		}
	}
	if why != "" {
		if len(o.WarmImport) > 0 {
			return nil, fmt.Errorf("replay: --warm-import: the --replay command cannot run warm: %s", why)
		}
		o.notice("--replay runs cold (an interpreter per candidate): " + why)
	}
	return e, nil
}

// pythonProgram is a --replay command that the fork server runs as the
// interpreter would: a script (run_path) or a module (-m, run_module).
type pythonProgram struct {
	module bool     // -m target
	target string   // the script's path as given, or the module's name
	argv   []string // sys.argv: argv[0] the script ("-m" for a module), {batch} replaced
	noPyc  bool     // -B
	file   string   // the candidate's file name in its run directory
	warm   []string // --warm-import
	// handover: a recorded command, which is its own fork server
	// (newCommandBackend); the fields above but file are unused.
	handover *handoverProgram
}

// zygoteArgs say what the zygote's children run (reduce_replay.py zygote
// --exec JSON [--warm-import M,...]).
func (p *pythonProgram) zygoteArgs() []string {
	kind := "path"
	if p.module {
		kind = "module"
	}
	spec, _ := json.Marshal(map[string]any{"kind": kind, "target": p.target, "argv": p.argv, "dont_write_bytecode": p.noPyc})
	args := []string{"--exec", string(spec)}
	if len(p.warm) > 0 {
		args = append(args, "--warm-import", strings.Join(p.warm, ","))
	}
	return args
}

// pythonInterpreter matches the names of CPython's interpreters: python,
// python3, python3.11.
var pythonInterpreter = regexp.MustCompile(`^python[0-9.]*$`)

// pythonProgramOf reads the command argv (args: argv[1:] with {batch}
// replaced) as a Python interpreter's command line, or says why the fork
// server cannot run it as the interpreter would. Of the interpreter's
// options it honours -u (the replays' PYTHONUNBUFFERED is set anyway),
// -B and -m; any other changes how the interpreter starts, which a child
// of an interpreter already started cannot do.
func pythonProgramOf(argv, args []string, file string) (*pythonProgram, string) {
	if !pythonInterpreter.MatchString(filepath.Base(argv[0])) {
		return nil, fmt.Sprintf("%s is not a Python interpreter", argv[0])
	}
	p := &pythonProgram{file: file}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-" {
			return nil, "the script is read from standard input"
		}
		if !strings.HasPrefix(a, "-") {
			if st, err := os.Stat(a); err != nil || !st.Mode().IsRegular() {
				return nil, fmt.Sprintf("the script %s is not a file", a)
			}
			p.target, p.argv = a, args[i:]
			return p, ""
		}
		if strings.HasPrefix(a, "--") {
			return nil, fmt.Sprintf("interpreter option %s is not one the fork server can honour (it takes -u, -B and -m)", a)
		}
		for j := 1; j < len(a); j++ {
			switch c := a[j]; c {
			case 'u':
			case 'B':
				p.noPyc = true
			case 'm':
				mod := a[j+1:]
				if mod == "" {
					if i+1 >= len(args) {
						return nil, "-m names no module"
					}
					i++
					mod = args[i]
				}
				p.module, p.target = true, mod
				p.argv = append([]string{"-m"}, args[i+1:]...)
				return p, ""
			case 'c':
				return nil, "python -c runs no script file"
			default:
				return nil, fmt.Sprintf("interpreter option -%c is not one the fork server can honour (it takes -u, -B and -m)", c)
			}
		}
	}
	return nil, "the command runs no script"
}

// warmExec starts the fork server of e's Python program: a zygote of the
// torch backend's kind, run by the command's own interpreter, that imports
// torch and the --warm-import modules and never touches the device (its
// children initialize nothing ahead: the command does what it does cold).
// why says why the program runs cold instead: its interpreter cannot
// import torch, or the zygote cannot start. A --warm-import module that
// cannot be imported is an error.
func warmExec(o Options, python string, p *pythonProgram, e *execBackend) (t *torchBackend, why string, err error) {
	t = &torchBackend{python: python, device: DeviceCPU, kind: e.device, runner: o.runner(), env: e.env,
		program: p, seenPIDs: map[int]bool{}}
	if err := t.setUp(e.pool); err != nil {
		return nil, "", err
	}
	t.zmu.Lock()
	_, err = t.zygoteLocked()
	t.zmu.Unlock()
	if err == nil {
		return t, "", nil
	}
	os.RemoveAll(t.dir)
	msg := strings.TrimPrefix(err.Error(), "replay: ")
	switch {
	case errors.Is(err, errNoTorch):
		return nil, fmt.Sprintf("%s cannot import torch", python), nil
	case strings.Contains(msg, "--warm-import"):
		return nil, "", err
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return nil, "its fork server did not start: " + msg, nil
}

func (e *execBackend) Kind() Kind { return KindExec }

func (e *execBackend) Settings() Settings { return e.set }

func (e *execBackend) Replay(ctx context.Context, v *fixtures.View) (Verdict, error) {
	if e.closed.Load() {
		return Verdict{Backend: KindExec, Device: e.device}, ErrClosed
	}
	start := time.Now()
	data, err := candidateFile(e.src, v, e.format)
	if err != nil {
		return Verdict{Backend: KindExec, Device: e.device}, fmt.Errorf("replay: --replay-format %s: %w", e.format, err)
	}
	if e.warm != nil {
		v, err := e.warm.replayZygote(ctx, zygoteInput{data: data}, start)
		v.Device, v.Launcher = e.device, LauncherLocal
		return v, err
	}
	res := e.pool.Run(ctx, Command{
		Path:    e.path,
		Args:    e.args,
		Env:     e.env,
		Dir:     e.dir,
		Streams: map[string]func(io.Writer) error{e.file: data},
		Foreign: e.hook == "", // a recorded command's exit 86 is reduce's startup hook's (reduce_batch.command)
	})
	return verdictOf(ctx, KindExec, e.device, res, start)
}

// Close stops the fork server, if any, and kills what strays are left.
func (e *execBackend) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	var err error
	if e.warm != nil {
		err = e.warm.Close()
	}
	err = errors.Join(err, e.release())
	sweep("") // a stray re-parented after its replay's sweep
	if e.hook != "" {
		err = errors.Join(err, os.RemoveAll(e.hook))
	}
	return err
}

// commandArgs returns the arguments (argv[1:]) of the exec backend's
// command argv with every {batch} replaced by batch, the candidate's path:
// quoted for the shell in the script of a POSIX shell (shellScript), as it
// is in any other word, which no shell reads. It is the one place the
// command is built: cold and Slurm replays run these arguments, and the
// fork server gets them as the program's sys.argv. The plugin's
// exec_argv builds an exec fixture's command the same way
// (testdata/shell_commands.json is the table both are tested on).
//
// batch may hold RunDirArg, the per-run directory that the Runner (or the
// Slurm wrapper, on the node) inserts later: in the script it becomes
// runDirQuotedArg, which they replace by the directory written for the
// single quotes around it, so that the script holds the quoted real path
// whatever the directory's name holds. A {rundir} of the user's own in the
// script is quoted the same way.
func commandArgs(argv []string, batch string) ([]string, error) {
	for _, a := range argv {
		if strings.Contains(a, runDirQuotedArg) {
			return nil, fmt.Errorf("%s is reduce's own placeholder: write {rundir} (or $%s)", runDirQuotedArg, RunDirEnv)
		}
	}
	script, err := shellScript(argv)
	if err != nil {
		return nil, err
	}
	quoted := func(p string) string { return strings.ReplaceAll(shellQuote(p), RunDirArg, runDirQuotedArg) }
	inScript := strings.NewReplacer(BatchArg, quoted(batch), RunDirArg, quoted(RunDirArg))
	args := make([]string, len(argv)-1)
	for i, a := range argv[1:] {
		if i+1 == script {
			args[i] = inScript.Replace(a)
		} else {
			args[i] = strings.ReplaceAll(a, BatchArg, batch)
		}
	}
	return args, nil
}

// shells are the POSIX shells whose script shellScript finds, by their
// program's base name (busybox's by its applet's).
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "ksh93": true,
	"mksh": true, "ash": true, "hush": true, "yash": true, "posh": true}

// otherShells are shells whose quoting is not POSIX's (csh's history, fish's
// and rc's quotes): a command of theirs whose {batch} follows an option (its
// script: -c, --command, -Command) is refused, as reduce could not quote it
// for them; an argument of a script file is data, as it is for any program.
var otherShells = map[string]bool{"csh": true, "tcsh": true, "fish": true, "rc": true, "es": true, "nu": true,
	"pwsh": true, "powershell": true, "xonsh": true, "elvish": true, "cmd": true, "cmd.exe": true}

// shellFlags are the short options that take no argument in any of
// shells (besides c): POSIX's set options, i, s, l, p, r, and bash's
// capitals. o and O take the next word. Any other letter may take one in
// some shell (mksh's -T, ksh93's -R, ...).
const shellFlags = "abCefhimnuvxslprBEHPk"

// shellLongArg are the long options (bash's, zsh's --emulate) that take
// the next word; shellLong those that take none.
var (
	shellLongArg = map[string]bool{"--rcfile": true, "--init-file": true, "--emulate": true}
	shellLong    = map[string]bool{"--norc": true, "--noprofile": true, "--posix": true, "--login": true,
		"--restricted": true, "--verbose": true, "--noediting": true, "--debugger": true, "--dump-strings": true,
		"--dump-po-strings": true, "--pretty-print": true, "--help": true, "--version": true}
)

// shellScript returns the index in argv of the word a POSIX shell reads
// as its script (the command_string of sh -c), or -1 when no word of argv
// is read as a script: argv[0] is no shell, or the shell runs a script
// file or reads standard input. The options before the script are read as
// the shells read them: grouped or not (-ec, -xec, -e -c, -c -e), + ones,
// -o and -O with their word (-o pipefail, -eo pipefail), bash's long ones,
// "--" or "-" ending them; with c among them the first word after them is
// the script. It is an error when which word is the script cannot be told
// for certain: an option whose argument reduce does not know, or a shell
// that a program such as env runs with {batch} in a word after it.
func shellScript(argv []string) (int, error) {
	name, start := filepath.Base(argv[0]), 1
	if name == "busybox" && len(argv) > 1 && shells[argv[1]] {
		name, start = argv[1], 2
	}
	if !shells[name] {
		k := slices.IndexFunc(argv[1:], func(a string) bool { return strings.Contains(a, BatchArg) })
		if otherShells[name] && k > 0 && strings.HasPrefix(argv[k], "-") { // argv[k] is the word before {batch}'s
			return -1, fmt.Errorf("%s is no POSIX shell, and reduce quotes %s for a POSIX shell only: write the command as sh -c '...'", name, BatchArg)
		}
		return -1, nestedShell(argv)
	}
	c := false
	i := start
options:
	for ; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--" || a == "-":
			i++
			break options
		case len(a) < 2 || (a[0] != '-' && a[0] != '+'):
			break options
		case strings.HasPrefix(a, "--"):
			switch {
			case shellLongArg[a]:
				i++
			case !shellLong[a]:
				return 0, fmt.Errorf("%s takes option %s, and reduce cannot tell for certain which word it then reads as its script, to quote %s in it: set the option inside the script, or drop it", argv[0], a, BatchArg)
			}
			continue
		}
		for _, l := range a[1:] {
			switch {
			case l == 'c':
				c = true
			case l == 'o' || l == 'O':
				i++ // its word: the option's name
			case !strings.ContainsRune(shellFlags, l):
				return 0, fmt.Errorf("%s takes option %c%c, and reduce cannot tell for certain which word it then reads as its script, to quote %s in it: set the option inside the script (sh -c 'set %c%c; ...'), or drop it", argv[0], a[0], l, BatchArg, a[0], l)
			}
		}
	}
	if !c || i >= len(argv) {
		return -1, nil
	}
	return i, nil
}

// nestedShell refuses a command that is no shell but runs one (env,
// timeout, nice, busybox env, ...) whose script would hold {batch}: which
// of the program's words the shell gets cannot be told, so {batch} cannot
// be quoted for it.
func nestedShell(argv []string) error {
	for k := 1; k < len(argv); k++ {
		if !shells[filepath.Base(argv[k])] || !slices.ContainsFunc(argv[k+1:], func(a string) bool { return strings.Contains(a, BatchArg) }) {
			continue
		}
		script, err := shellScript(argv[k:])
		if err == nil && (script < 0 || !strings.Contains(argv[k+script], BatchArg)) {
			continue
		}
		return fmt.Errorf("%s runs %s, whose script would hold %s, and reduce quotes %s only in the script of a shell that is the command itself: write the command as sh -c '...' (env A=1 sh -c 'S' as sh -c 'A=1 S')", argv[0], argv[k], BatchArg, BatchArg)
	}
	return nil
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
