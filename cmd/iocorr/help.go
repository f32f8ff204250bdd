package main

import (
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// manual is what a command's page says beyond what its registration
// (name, summary, usage) and its FlagSet already give: iocorr help
// COMMAND and make man render the same page, so that a flag added to a
// command is on its page without a word written here.
type manual struct {
	// description is the page's prose: paragraphs separated by a blank
	// line, each wrapped when printed.
	description string
	examples    []example
	// exit is what the command's exit status says beyond the statuses
	// every command shares (exitStatus).
	exit string
	// files are the files the command reads or writes, one a line:
	// "NAME  what it is".
	files []string
	// seeAlso names other commands (their pages) and docs/ pages.
	seeAlso []string
}

// example is one command line of a page, and what it does. The docs test
// parses every one with the command's own FlagSet.
type example struct{ what, cmd string }

// exitStatus is what every command's status means (main).
const exitStatus = "0 when the command did what it was asked; 1 when it failed, with a one-line error on stderr; 2 on a usage error: an unknown command or flag, a bad value or argument."

// page is a command's manual, its flags read from the FlagSet the
// command parses.
type page struct {
	name, summary string
	synopsis      []string
	man           manual
	options       []option
}

// option is one flag as a page shows it.
type option struct {
	names string // "-o, --output STRING"
	usage string
	def   string // the default when it is not the zero value
}

// pageOf builds c's page: its flags come from the FlagSet c's flags
// function fills, the one the command parses.
func pageOf(c *command) page {
	fs := flagsOf(c)
	p := page{name: c.name, summary: c.summary, man: c.man}
	for s := range strings.SplitSeq(c.usage, " | ") {
		p.synopsis = append(p.synopsis, strings.TrimSpace("iocorr "+c.name+" "+strings.TrimSpace(s)))
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		p.options = append(p.options, optionOf(f))
	})
	return p
}

// pflagType is how pflag names a value it knows only by its type.
var pflagType = regexp.MustCompile(`^[a-z]+[0-9]*(Array|Slice)?$`)

func optionOf(f *pflag.Flag) option {
	name, usage := pflag.UnquoteUsage(f)
	names := "--" + f.Name
	if f.Shorthand != "" {
		names = "-" + f.Shorthand + ", " + names
	}
	if name != "" {
		// pflag names a value by its type (string, stringArray,
		// duration); a page shows a placeholder, as in a synopsis.
		if pflagType.MatchString(name) {
			name = strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(name, "Array"), "Slice"))
		}
		names += " " + name
	}
	o := option{names: names, usage: usage}
	if !slices.Contains([]string{"", "false", "0", "[]", "0s", "<nil>"}, f.DefValue) {
		o.def = f.DefValue
	}
	return o
}

// sortedCommands is the registry's names in order.
func sortedCommands() []string { return slices.Sorted(maps.Keys(commands)) }

// flagsOf is c's FlagSet, filled by its flags function as run fills it.
func flagsOf(c *command) *pflag.FlagSet {
	fs := newFlagSet(c)
	c.flags(fs)
	return fs
}

// helpWidth is where a page's text is wrapped.
const helpWidth = 80

// writeHelp prints c's page as text: iocorr help COMMAND.
func writeHelp(w io.Writer, c *command) {
	p := pageOf(c)
	section := func(name string) { fmt.Fprintf(w, "\n%s\n", name) }
	fmt.Fprintf(w, "NAME\n    iocorr-%s - %s\n", p.name, p.summary)
	section("SYNOPSIS")
	for _, s := range p.synopsis {
		fmt.Fprintf(w, "    %s\n", s)
	}
	section("DESCRIPTION")
	writeParagraphs(w, p.description(), "    ")
	if len(p.options) > 0 {
		section("OPTIONS")
		for i, o := range p.options {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "    %s\n", o.names)
			writeParagraphs(w, o.text(), "        ")
		}
	}
	if len(p.man.examples) > 0 {
		section("EXAMPLES")
		for i, e := range p.man.examples {
			if i > 0 {
				fmt.Fprintln(w)
			}
			writeParagraphs(w, e.what, "    ")
			fmt.Fprintf(w, "        %s\n", e.cmd)
		}
	}
	section("EXIT STATUS")
	writeParagraphs(w, p.exit(), "    ")
	if len(p.man.files) > 0 {
		section("FILES")
		for _, f := range p.man.files {
			fmt.Fprintf(w, "    %s\n", f)
		}
	}
	section("SEE ALSO")
	writeParagraphs(w, strings.Join(p.seeAlso(), ", "), "    ")
}

// description is the page's prose, or its summary where it has none.
func (p page) description() string {
	if p.man.description == "" {
		return p.summary + "."
	}
	return p.man.description
}

func (p page) exit() string {
	if p.man.exit == "" {
		return exitStatus
	}
	return exitStatus + "\n\n" + p.man.exit
}

// seeAlso is the page's references, then iocorr(1) and the README.
func (p page) seeAlso() []string {
	var refs []string
	for _, s := range p.man.seeAlso {
		if _, ok := commands[s]; ok {
			s = "iocorr-" + s + "(1)"
		}
		refs = append(refs, s)
	}
	return append(refs, "iocorr(1)", "README.md")
}

// text is the flag's usage with its default.
func (o option) text() string {
	if o.def == "" {
		return o.usage
	}
	return fmt.Sprintf("%s (default %s)", o.usage, o.def)
}

// writeParagraphs prints text's paragraphs (split at blank lines), each
// wrapped at helpWidth after indent, with a blank line between them. A
// paragraph whose lines start with a space is printed as it is (a table,
// a command).
func writeParagraphs(w io.Writer, text, indent string) {
	for i, para := range paragraphs(text) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if strings.HasPrefix(para, " ") {
			for l := range strings.SplitSeq(para, "\n") {
				fmt.Fprintf(w, "%s%s\n", indent, l)
			}
			continue
		}
		line := indent
		for _, word := range strings.Fields(para) {
			if len(line) > len(indent) && len(line)+1+len(word) > helpWidth {
				fmt.Fprintln(w, line)
				line = indent
			}
			if len(line) > len(indent) {
				line += " "
			}
			line += word
		}
		fmt.Fprintln(w, line)
	}
}

// paragraphs splits text at its blank lines.
func paragraphs(text string) []string {
	var out []string
	for p := range strings.SplitSeq(strings.Trim(text, "\n"), "\n\n") {
		if p = strings.Trim(p, "\n"); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// writeOverview prints iocorr's own page: every command with its summary
// (iocorr help).
func writeOverview(w io.Writer) {
	fmt.Fprintf(w, "iocorr: which tensors of an LLM caused disk I/O under llama.cpp\n\nusage: iocorr COMMAND [flags] [args]\n\ncommands:\n")
	for _, n := range sortedCommands() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n  %-10s %s\n", "help", "a command's manual page: iocorr help COMMAND", "version", "print the version")
}

// help is iocorr help COMMAND (its page) and iocorr help --man DIR (every
// page in roff, for make man).
func help(w io.Writer, args []string) error {
	if args[0] == "--man" {
		if len(args) != 2 {
			return usagef("help --man: want one directory")
		}
		return writeManPages(args[1])
	}
	if len(args) > 1 {
		return usagef("help: want one command, got %q", args)
	}
	c, ok := commands[args[0]]
	if !ok {
		return usagef("unknown command %q (see 'iocorr help')", args[0])
	}
	writeHelp(w, c)
	return nil
}
