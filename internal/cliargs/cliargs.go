// Package cliargs orders a command line for urfave/cli/v2: a subcommand's
// flags ahead of its positional arguments, which the library would take
// for arguments (it stops parsing flags at the first one).
package cliargs

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// Intersperse moves a subcommand's flags ahead of its positional arguments,
// so `reduce convert in.npz -o out.bin` works: urfave/cli/v2 stops parsing
// flags at the first positional argument. A "--" ends the flags as usual.
func Intersperse(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var cmd *cli.Command
	at := -1
	for i := 1; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			cmd = app.Command(args[i])
			at = i
			break
		}
		if takesValue(app.Flags, args[i]) {
			i++
		}
	}
	if cmd == nil {
		return args
	}
	var flags, positional []string
	rest := args[at+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			positional = append(positional, rest[i+1:]...)
			i = len(rest)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			if takesValue(cmd.Flags, a) && i+1 < len(rest) {
				flags = append(flags, rest[i+1])
				i++
			}
		default:
			positional = append(positional, a)
		}
	}
	out := append([]string{}, args[:at+1]...)
	out = append(out, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
		out = append(out, positional...)
	}
	return out
}

// takesValue reports whether arg is a flag of flags that consumes the next
// argument (it has no "=value" of its own and is not boolean).
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if v, ok := f.(cli.DocGenerationFlag); ok {
				return v.TakesValue()
			}
			return false
		}
	}
	return false
}
