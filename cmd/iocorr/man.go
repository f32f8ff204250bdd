package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/iocorr/iocorr/internal/atomicfile"
)

// writeManPages writes iocorr.1 and iocorr-COMMAND.1 for every command
// into dir (make man): the pages iocorr help prints, in roff.
func writeManPages(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	write := func(name string, render func(io.Writer)) error {
		fill := func(w io.Writer) error { render(w); return nil }
		if err := atomicfile.Write(filepath.Join(dir, name), 0o644, false, fill); err != nil {
			return fmt.Errorf("man pages: %w", err)
		}
		return nil
	}
	if err := write("iocorr.1", writeOverviewRoff); err != nil {
		return err
	}
	for _, n := range sortedCommands() {
		c := commands[n]
		if err := write("iocorr-"+n+".1", func(w io.Writer) { writeRoff(w, c) }); err != nil {
			return err
		}
	}
	return nil
}

// roff escapes s for a roff text line: a backslash prints as itself, a
// hyphen as a hyphen (not roff's breakable dash), and a line that starts
// with a control character as text.
func roff(s string) string {
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffParagraphs writes text's paragraphs as roff: filled text, or, for
// a paragraph indented as a block (writeParagraphs), lines kept as they
// are.
func roffParagraphs(w io.Writer, text string) {
	for i, para := range paragraphs(text) {
		if i > 0 {
			fmt.Fprintln(w, ".PP")
		}
		if strings.HasPrefix(para, " ") {
			fmt.Fprintln(w, ".nf")
			for l := range strings.SplitSeq(para, "\n") {
				fmt.Fprintln(w, roff(l))
			}
			fmt.Fprintln(w, ".fi")
			continue
		}
		fmt.Fprintln(w, roff(strings.Join(strings.Fields(para), " ")))
	}
}

func roffHeader(w io.Writer, title, name, summary string) {
	fmt.Fprintf(w, ".TH %s 1 \"\" \"iocorr %s\" \"iocorr manual\"\n", strings.ToUpper(title), roff(version))
	fmt.Fprintf(w, ".SH NAME\n%s \\- %s\n", roff(name), roff(summary))
}

// writeRoff writes c's page, the one writeHelp prints, in roff.
func writeRoff(w io.Writer, c *command) {
	p := pageOf(c)
	roffHeader(w, "iocorr-"+p.name, "iocorr-"+p.name, p.summary)
	fmt.Fprintln(w, ".SH SYNOPSIS")
	for i, s := range p.synopsis {
		if i > 0 {
			fmt.Fprintln(w, ".br")
		}
		fmt.Fprintf(w, "\\fB%s\\fR\n", roff(s))
	}
	fmt.Fprintln(w, ".SH DESCRIPTION")
	roffParagraphs(w, p.description())
	if len(p.options) > 0 {
		fmt.Fprintln(w, ".SH OPTIONS")
		for _, o := range p.options {
			fmt.Fprintf(w, ".TP\n\\fB%s\\fR\n%s\n", roff(o.names), roff(o.text()))
		}
	}
	if len(p.man.examples) > 0 {
		fmt.Fprintln(w, ".SH EXAMPLES")
		for _, e := range p.man.examples {
			fmt.Fprintln(w, ".PP")
			roffParagraphs(w, e.what)
			fmt.Fprintf(w, ".PP\n.RS 4\n.nf\n%s\n.fi\n.RE\n", roff(e.cmd))
		}
	}
	fmt.Fprintln(w, ".SH EXIT STATUS")
	roffParagraphs(w, p.exit())
	if len(p.man.files) > 0 {
		fmt.Fprintln(w, ".SH FILES")
		for _, f := range p.man.files {
			name, what, _ := strings.Cut(f, "  ")
			fmt.Fprintf(w, ".TP\n\\fI%s\\fR\n%s\n", roff(name), roff(strings.TrimSpace(what)))
		}
	}
	fmt.Fprintln(w, ".SH SEE ALSO")
	fmt.Fprintln(w, roff(strings.Join(p.seeAlso(), ", ")))
}

// writeOverviewRoff writes iocorr(1): the commands and their pages.
func writeOverviewRoff(w io.Writer) {
	roffHeader(w, "iocorr", "iocorr", "which tensors of an LLM caused disk I/O under llama.cpp")
	fmt.Fprintf(w, ".SH SYNOPSIS\n\\fBiocorr\\fR \\fICOMMAND\\fR [\\fIflags\\fR] [\\fIargs\\fR]\n.SH COMMANDS\n")
	var refs []string
	for _, n := range sortedCommands() {
		fmt.Fprintf(w, ".TP\n\\fBiocorr\\-%s\\fR(1)\n%s\n", roff(n), roff(commands[n].summary))
		refs = append(refs, "iocorr-"+n+"(1)")
	}
	fmt.Fprintf(w, ".TP\n\\fBiocorr help\\fR \\fICOMMAND\\fR\na command's page, as text\n.TP\n\\fBiocorr version\\fR\nthe version\n")
	fmt.Fprintf(w, ".SH EXIT STATUS\n%s\n.SH SEE ALSO\n%s\n", roff(exitStatus), roff(strings.Join(refs, ", ")))
}
