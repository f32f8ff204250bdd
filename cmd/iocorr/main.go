// Command iocorr records which tensors of an LLM caused disk I/O while
// llama.cpp ran, and answers questions about a recorded run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"
)

// stamped is the version the Makefile stamps at link time
// (-X main.stamped=...).
var stamped string

// version is stamped, or for a binary built without it (go install,
// go build) what the go command recorded: the module's version, else the
// VCS revision.
var version = versionOf(stamped, debug.ReadBuildInfo)

// versionOf is stamped, else the module version of the build info, else
// its vcs.revision (12 hex digits, "-dirty" when modified), else "dev".
func versionOf(stamped string, info func() (*debug.BuildInfo, bool)) string {
	if stamped != "" {
		return stamped
	}
	bi, ok := info()
	if !ok {
		return "dev"
	}
	// go install m@v records v; a build in a checkout records "(devel)"
	// (or, since Go 1.24, a pseudo-version from the VCS).
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "dev"
	}
	return rev + dirty
}

// command is one subcommand. Each owns its FlagSet so that flags of one
// subcommand never leak into another, as in perf's subcommands.
type command struct {
	name    string
	summary string
	usage   string // the synopsis after "iocorr NAME"; alternatives split by " | "
	flags   func(fs *pflag.FlagSet) func(ctx context.Context, args []string) error
	man     manual // the rest of its page (help.go)
}

var commands = map[string]*command{}

// register is called from each subcommand's file so that adding a
// subcommand touches only that file.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("duplicate command " + c.name)
	}
	commands[c.name] = c
}

// usageError marks errors that should be followed by the command's usage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// exitError carries an exit status without an error message (record
// exits with its child's status).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	// In the held child of `record` this becomes the traced command; in
	// a pin plan's holder (iocorr pin, record --pin), the holder.
	runShimIfChild()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case errors.Is(err, syscall.EPIPE):
		// The reader of an output went away (export -o /dev/stdout | head).
		// A write to stdout itself dies of SIGPIPE quietly, as in cat or
		// git; this ends the same way: no message, the shell's status for
		// a death by SIGPIPE.
		os.Exit(128 + int(syscall.SIGPIPE))
	default:
		fmt.Fprintf(os.Stderr, "iocorr: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// stdout and stderr are package variables so that tests can run
// subcommands in-process and capture what they print.
var (
	stdout io.Writer = os.Stdout
	stderr io.Writer = os.Stderr
)

func run(ctx context.Context, args []string, out, errw io.Writer) error {
	stdout, stderr = out, errw
	if len(args) == 0 {
		writeOverview(errw)
		return usagef("no command given")
	}
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		if name == "help" && len(args) > 1 {
			return help(out, args[1:])
		}
		writeOverview(out)
		return nil
	case "version", "--version":
		fmt.Fprintf(out, "iocorr %s\n", version)
		return nil
	}
	c, ok := commands[name]
	if !ok {
		return usagef("unknown command %q (see 'iocorr help')", name)
	}
	fs := newFlagSet(c)
	exec := c.flags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printCommandUsage(out, c, fs)
			return nil
		}
		return usagef("%s: %v", name, err)
	}
	return exec(ctx, fs.Args())
}

func newFlagSet(c *command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// Everything after "--" belongs to the traced command, not to us.
	fs.SetInterspersed(false)
	return fs
}

func printCommandUsage(w io.Writer, c *command, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "usage: iocorr %s %s\n\n%s\n", c.name, c.usage, c.summary)
	if fs.HasFlags() {
		fmt.Fprintf(w, "\nflags:\n%s", fs.FlagUsages())
	}
}
