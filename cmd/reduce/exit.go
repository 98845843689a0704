package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
)

// Exit codes: part of the CLI contract (DESIGN.md, "The CLI").
const (
	ExitOK          = 0 // done
	ExitInternal    = 1 // a bug or an environment failure in reduce itself
	ExitUsage       = 2 // bad usage or bad input
	ExitNoRepro     = 3 // the original does not reproduce
	ExitInterrupted = 4 // interrupted; a partial fixture was written
)

// exitError carries an exit code with an error; it implements cli.ExitCoder
// so urfave/cli and run agree on the code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

var _ cli.ExitCoder = (*exitError)(nil)

// errQuiet is an exit status with nothing to say (reduce record's, the
// command's own).
var errQuiet = errors.New("")

// usageErr marks err as bad usage or bad input (exit 2).
func usageErr(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: ExitUsage, err: err}
}

// usagef is usageErr(fmt.Errorf(...)).
func usagef(format string, args ...any) error {
	return usageErr(fmt.Errorf(format, args...))
}

// withCode marks err with code.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// exitCode maps an error from the app to the process's exit status. Errors
// an action returns carry their code; an error without one comes from
// urfave/cli's own parsing of the command line (an unknown flag, a bad
// value), which is bad usage.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return ExitUsage
}

// report prints err on one line, as `reduce: ...`, its control characters
// (from a file, maybe someone else's) escaped.
func report(w io.Writer, err error) {
	fmt.Fprintf(w, "reduce: %s\n", fixtures.PrintableLines(err.Error()))
}

// action wraps a command's action so that an error it returns without a code
// counts as internal (exit 1): every expected failure is given its code
// where it is detected.
func action(fn func(c *cli.Context) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		err := fn(c)
		if err == nil {
			return nil
		}
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			return err
		}
		return &exitError{code: ExitInternal, err: err}
	}
}
