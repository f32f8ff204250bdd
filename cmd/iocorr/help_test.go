package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// linuxOnlyStub says whether c is the stub a build without the loader
// registers for a recording command (noloader.go): it has no page of its
// own there.
func linuxOnlyStub(c *command) bool { return c.usage == "(Linux only)" }

// iocorr help COMMAND is a manual page, perf's shape: every section, and
// every flag the command parses under OPTIONS, read from its FlagSet, so
// a flag added to a command is on its page without a word written for it.
func TestHelpOfEveryCommandIsAManualPageOfItsFlags(t *testing.T) {
	for _, name := range sortedCommands() {
		c := commands[name]
		t.Run(name, func(t *testing.T) {
			out, errOut, err := runCmd(t, "help", name)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			want := []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES", "EXIT STATUS", "SEE ALSO"}
			switch {
			case linuxOnlyStub(c):
				want = []string{"NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "SEE ALSO"}
			case c.man.description == "" || len(c.man.examples) == 0:
				t.Errorf("iocorr %s has no description or no example: give its registration a manual (manuals.go)", name)
			case len(c.man.files) > 0:
				want = slices.Insert(want, 6, "FILES")
			}
			var got []string
			for l := range strings.SplitSeq(out, "\n") {
				if l != "" && !strings.HasPrefix(l, " ") {
					got = append(got, l)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("sections %q, want %q:\n%s", got, want, out)
			}
			if !strings.Contains(out, "iocorr-"+name+" - "+c.summary) {
				t.Errorf("NAME is not the command's summary:\n%s", out)
			}
			fs := flagsOf(c)
			options := out[strings.Index(out, "\nOPTIONS\n")+1:]
			fs.VisitAll(func(f *pflag.Flag) {
				if !strings.Contains(options, "--"+f.Name) {
					t.Errorf("flag --%s is not under OPTIONS", f.Name)
				}
			})
		})
	}
}

// make man's pages are the help pages in roff: one per command and
// iocorr.1, each with its title, sections and flags.
func TestManPagesAreTheHelpPagesInRoff(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man")
	if _, errOut, err := runCmd(t, "help", "--man", dir); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, "iocorr.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedCommands() {
		if !strings.Contains(string(b), `\fBiocorr\-`+name+`\fR(1)`) {
			t.Errorf("iocorr.1 does not list iocorr-%s(1)", name)
		}
		page, err := os.ReadFile(filepath.Join(dir, "iocorr-"+name+".1"))
		if err != nil {
			t.Fatal(err)
		}
		s := string(page)
		if !strings.HasPrefix(s, ".TH IOCORR-"+strings.ToUpper(name)+" 1 ") {
			t.Errorf("iocorr-%s.1 starts %q", name, s[:min(len(s), 40)])
		}
		for _, sec := range []string{".SH NAME\n", ".SH SYNOPSIS\n", ".SH DESCRIPTION\n", ".SH EXIT STATUS\n", ".SH SEE ALSO\n"} {
			if !strings.Contains(s, sec) {
				t.Errorf("iocorr-%s.1 has no %q", name, sec)
			}
		}
		c := commands[name]
		fs := flagsOf(c)
		fs.VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(s, `\fB`) || !strings.Contains(s, `\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)) {
				t.Errorf("iocorr-%s.1 has no flag --%s", name, f.Name)
			}
		})
		// Text lines never start with a control character by accident.
		for l := range strings.SplitSeq(s, "\n") {
			if strings.HasPrefix(l, "'") {
				t.Errorf("iocorr-%s.1: line %q starts with roff's control character", name, l)
			}
		}
	}
}

func TestHelpRefusesWhatIsNoCommandInOneLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"an unknown command", []string{"help", "nosuch"}, `unknown command "nosuch"`},
		{"two commands", []string{"help", "query", "stats"}, "want one command"},
		{"--man without a directory", []string{"help", "--man"}, "want one directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCmd(t, tc.args...)
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
				t.Errorf("said %v, want a one-line usage error naming %q", err, tc.says)
			}
			if out != "" {
				t.Errorf("wrote %q to stdout", out)
			}
		})
	}
}
