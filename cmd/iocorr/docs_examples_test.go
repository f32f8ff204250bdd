package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/rundir"
)

// docExample is one iocorr command line of README.md, a docs/ page or a
// command's manual, and the output the page shows under it (none where
// it shows none).
type docExample struct {
	page string // README.md, docs/NAME.md, or "iocorr help NAME"
	line int
	text string   // the command line as written
	args []string // its words after iocorr, up to a pipe or redirection
	// synopsis marks a line that shows a command's form ([--flag X],
	// A|B) rather than a command: only its flags are checked.
	synopsis bool
	output   []string
}

// The commands an example runs as written, in a directory laid out as
// the docs' runs are (docsWorkDir): they read a run. The others record,
// run a command, or write a model: their examples are parsed with the
// command's own FlagSet, and cmd/iocorr's record, sweep, pin, doctor and
// synth tests run them.
var docsRunsCommands = []string{"query", "stats", "export", "diff", "predict", "plan", "report", "inspect", "ingest", "help", "version"}

// docsSkipped are the examples that read a run the fixtures cannot
// stand for, by page and command line, with the reason. Every one is
// still parsed.
var docsSkipped = map[string]string{
	"README.md: iocorr plan -i run-96MiB --mem-limit 160MiB -o plan.json":                                                                                          noPicks,
	"docs/memory.md: iocorr plan -i run-96MiB --mem-limit 160MiB -o plan.json":                                                                                     noPicks,
	"docs/memory.md: iocorr predict -i run-96MiB --mem-limit 160MiB --plan plan.json":                                                                              noPicks,
	"iocorr help plan: iocorr plan -i run-96MiB --mem-limit 160MiB -o plan.json":                                                                                   noPicks,
	"iocorr help predict: iocorr predict -i run-96MiB --mem-limit 160MiB --plan plan.json":                                                                         noPicks,
	"docs/gpu.md: iocorr record --cold --mem-limit 3GiB -- llama-completion -m model.gguf -p \"...\" -n 32          -ngl 99 --cpu-moe --no-repack --no-op-offload": "a hybrid run: needs a GPU and its llama.cpp backend",
}

// noPicks is why a plan is not made in the docs' runs: the tiny run has
// no router picks, without which plan predicts nothing (and says so).
const noPicks = "a plan needs a recorded MoE run with the router's picks: make bench's predict section plans and pins recorded runs, predict's recorded test plans one"

// docsRunNames are the run directories the docs name; each is the tiny
// run as the default tier records it (defaultTierRun).
var docsRunNames = []string{"iocorr.data", "demo/iocorr.data", "run-96MiB", "run-160MiB", "RUN"}

// Every iocorr command line in README.md, docs/ and the commands' manual
// pages names a command and flags that exist; those that read a run run,
// as written, on the tiny run (a default-tier run of known events), and
// where a page shows their output it matches: a table's header exactly,
// its cells by kind (a size, a duration, a count, a name), the figures
// that vary masked. A flag renamed, a column added or a command gone
// fails here until the docs say so.
func TestDocsExamplesRunAsShown(t *testing.T) {
	examples := docsExamples(t)
	if len(examples) < 20 {
		t.Fatalf("%d examples found in the docs: the parser lost them", len(examples))
	}
	dir := docsWorkDir(t)
	t.Chdir(dir)
	for _, ex := range examples {
		name := ex.page + ":" + fmt.Sprint(ex.line)
		t.Run(name, func(t *testing.T) {
			if len(ex.args) == 0 {
				t.Fatalf("%s: %q: no command after iocorr", name, ex.text)
			}
			if ex.synopsis {
				checkSynopsisFlags(t, ex)
				return
			}
			if reason, ok := docsSkipped[ex.page+": "+ex.text]; ok {
				checkParses(t, ex)
				t.Skipf("%q: %s", ex.text, reason)
			}
			if !slices.Contains(docsRunsCommands, ex.args[0]) {
				checkParses(t, ex)
				t.Skipf("%q: parsed, not run: iocorr %s records, runs a command or writes a model (its own tests run it)", ex.text, ex.args[0])
			}
			out, errOut, err := runCmd(t, ex.args...)
			if err != nil {
				t.Fatalf("%s: %q: %v\n%s", name, ex.text, err, errOut)
			}
			if len(ex.output) > 0 {
				compareShown(t, ex, out)
			}
		})
	}
}

// checkParses parses ex's flags with its command's FlagSet, as run does.
func checkParses(t *testing.T, ex docExample) {
	t.Helper()
	if err := exampleFlags(t, ex).Parse(ex.args[1:]); err != nil {
		t.Fatalf("%q: %v", ex.text, err)
	}
}

// exampleFlags is the FlagSet of ex's command.
func exampleFlags(t *testing.T, ex docExample) *pflag.FlagSet {
	t.Helper()
	c, ok := commands[ex.args[0]]
	if !ok {
		t.Fatalf("%q: no command %q", ex.text, ex.args[0])
	}
	return flagsOf(c)
}

var flagWord = regexp.MustCompile(`^-(-[a-z0-9][a-z0-9-]*|[a-zA-Z])$`)

// checkSynopsisFlags checks that every flag a synopsis line names is one
// of its command's.
func checkSynopsisFlags(t *testing.T, ex docExample) {
	t.Helper()
	fs := exampleFlags(t, ex)
	for _, w := range ex.args[1:] {
		if w == "--" {
			break
		}
		for alt := range strings.SplitSeq(strings.Trim(w, "[]()."), "|") {
			alt, _, _ = strings.Cut(strings.Trim(alt, "[]"), "=")
			if !flagWord.MatchString(alt) {
				continue
			}
			var f *pflag.Flag
			if strings.HasPrefix(alt, "--") {
				f = fs.Lookup(alt[2:])
			} else {
				f = fs.ShorthandLookup(alt[1:])
			}
			if f == nil {
				t.Errorf("%q: iocorr %s has no flag %s", ex.text, ex.args[0], alt)
			}
		}
	}
}

// docsWorkDir lays out the runs and files the docs' examples name: each
// of docsRunNames, and model.gguf (and demo/model.gguf) for inspect.
func docsWorkDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	run := docsRun(t)
	for _, n := range docsRunNames {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(run, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "OUT"), 0o755); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "model.gguf")
	if _, errOut, err := runCmd(t, "synth", "-o", model, "--layers", "2", "--embd", "64", "--ff", "128", "--heads", "4",
		"--experts", "4", "--experts-used", "2", "--vocab", "300"); err != nil {
		t.Fatalf("synth: %v\n%s", err, errOut)
	}
	if err := os.Symlink(model, filepath.Join(dir, "demo", "model.gguf")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// docsRun is the tiny run as the default tier records it under a memory
// limit, with the residency snapshots predict and plan read: the model's
// first 4 pages resident at the decode tokens' starts.
func docsRun(t *testing.T) string {
	t.Helper()
	dir := defaultTierRun(t)
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	meta.Controls.MemLimit = 96 << 20
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
	var snaps []byte
	for _, tok := range []uint32{2, 3} {
		b, err := json.Marshal(rundir.Snapshot{Token: tok, Models: []*rundir.PageMap{{Resident: 4, Ranges: [][2]int64{{0, 4}}}}})
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(append(snaps, b...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, rundir.ResidencyFile), snaps, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// docsExamples reads every example of README.md, docs/*.md and the
// manual pages, in order.
func docsExamples(t *testing.T) []docExample {
	t.Helper()
	pages := []string{"README.md"}
	more, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range more {
		pages = append(pages, "docs/"+filepath.Base(p))
	}
	var all []docExample
	for _, p := range pages {
		b, err := os.ReadFile(filepath.Join("../..", p))
		if err != nil {
			t.Fatal(err)
		}
		exs, err := markdownExamples(p, string(b))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, exs...)
	}
	for _, n := range sortedCommands() {
		for _, e := range commands[n].man.examples {
			ex, err := exampleOf("iocorr help "+n, 0, e.cmd)
			if err != nil || ex == nil {
				t.Fatalf("iocorr help %s: example %q: %v (not an iocorr command line)", n, e.cmd, err)
			}
			all = append(all, *ex)
		}
	}
	return all
}

// markdownExamples finds the iocorr command lines of a page's code blocks
// (fenced, or indented by four spaces). In a block whose commands have
// a "$ " prompt, the lines under a command up to the next are its output;
// in a block without, every line is a command.
func markdownExamples(page, text string) ([]docExample, error) {
	var out []docExample
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		var block []string
		start := i + 1
		switch {
		case strings.HasPrefix(lines[i], "```"):
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				block = append(block, lines[i])
			}
			start++
		case strings.HasPrefix(lines[i], "    ") && (i == 0 || strings.TrimSpace(lines[i-1]) == ""):
			// An indented block: its lines, blank ones inside it too, up to
			// the first line that is not indented.
			for ; i < len(lines) && (strings.HasPrefix(lines[i], "    ") || strings.TrimSpace(lines[i]) == ""); i++ {
				block = append(block, strings.TrimPrefix(lines[i], "    "))
			}
			i--
		default:
			continue
		}
		exs, err := blockExamples(page, start, block)
		if err != nil {
			return nil, err
		}
		out = append(out, exs...)
	}
	return out, nil
}

func blockExamples(page string, start int, block []string) ([]docExample, error) {
	prompted := slices.ContainsFunc(block, func(l string) bool { return strings.HasPrefix(l, "$ ") })
	var out []docExample
	var cur *docExample
	for j := 0; j < len(block); j++ {
		l, n := block[j], start+j
		if prompted && !strings.HasPrefix(l, "$ ") {
			if cur != nil && strings.TrimSpace(l) != "" {
				cur.output = append(cur.output, l)
			}
			continue
		}
		l = strings.TrimPrefix(l, "$ ")
		// A command continued with a backslash.
		for strings.HasSuffix(l, `\`) && j+1 < len(block) {
			j++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(block[j])
		}
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
		ex, err := exampleOf(page, n, l)
		if err != nil {
			return nil, err
		}
		cur = ex
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out, nil
}

// exampleOf is the example of one command line, or nil where it runs no
// iocorr.
func exampleOf(page string, line int, text string) (*docExample, error) {
	// Only a line that runs iocorr is read as sh would (a block of SQL has
	// quotes of its own).
	if !slices.ContainsFunc(strings.Fields(text), isIocorr) {
		return nil, nil
	}
	words, err := shellWords(text)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: %q: %w", page, line, text, err)
	}
	for len(words) > 0 && (strings.Contains(words[0], "=") || words[0] == "sudo") {
		words = words[1:]
	}
	if len(words) == 0 || !isIocorr(words[0]) {
		return nil, nil
	}
	ex := &docExample{page: page, line: line, text: strings.TrimSpace(text), args: words[1:]}
	for _, w := range ex.args {
		if w == "--" {
			break
		}
		if strings.ContainsAny(w, "[]") || w == "|" || strings.HasSuffix(w, "...") || strings.Contains(w, "|") && strings.HasPrefix(w, "-") {
			ex.synopsis = true
		}
	}
	return ex, nil
}

func isIocorr(w string) bool { return w == "iocorr" || w == "./bin/iocorr" || w == "bin/iocorr" }

// shellWords splits a command line as sh would, quotes removed, up to an
// unquoted comment, pipe, list or redirection.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated '")
			}
			w.WriteString(s[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return nil, errors.New(`unterminated "`)
			}
			w.WriteString(s[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case c == '\\' && i+1 < len(s):
			w.WriteByte(s[i+1])
			inWord, i = true, i+1
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord, c == ';', c == '&', c == '>', c == '<':
			flush()
			return words, nil
		case c == '|' && !inWord && (i+1 == len(s) || s[i+1] == ' '):
			// A pipe; a | inside a word is a synopsis's alternatives.
			flush()
			if len(words) > 0 && (i == 0 || s[i-1] == ' ') && strings.ContainsAny(s[i:], "[") {
				words = append(words, "|")
				continue
			}
			return words, nil
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words, nil
}

var tableHeader = regexp.MustCompile(`^[A-Z][A-Z0-9_]*(  +[A-Z][A-Z0-9_]*)+ *$`)

// compareShown holds what a command printed to what its page shows: a
// table's header exactly and each column's cells by kind; other lines
// with their figures masked.
func compareShown(t *testing.T, ex docExample, got string) {
	t.Helper()
	gotLines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if !tableHeader.MatchString(ex.output[0]) {
		masked := map[string]bool{}
		for _, l := range gotLines {
			masked[maskFigures(l)] = true
		}
		for _, l := range ex.output {
			if !masked[maskFigures(l)] {
				t.Errorf("%q: the page shows the line\n  %s\nwhich the command does not print (figures masked); it printed:\n%s", ex.text, l, got)
			}
		}
		return
	}
	if strings.Join(strings.Fields(gotLines[0]), " ") != strings.Join(strings.Fields(ex.output[0]), " ") {
		t.Fatalf("%q: the page's table header\n  %s\nthe command's\n  %s", ex.text, ex.output[0], gotLines[0])
	}
	shown, printed := tableCells(ex.output), tableCells(gotLines)
	for col, name := range strings.Fields(ex.output[0]) {
		kinds := map[string]bool{}
		for _, row := range printed {
			kinds[cellKind(row[col])] = true
		}
		if kinds["NA"] && len(kinds) == 1 {
			continue
		}
		for _, row := range shown {
			if k := cellKind(row[col]); k != "NA" && !kinds[k] {
				t.Errorf("%q: column %s: the page shows %q, a %s, where the command prints %v", ex.text, name, row[col], k, slices.Sorted(maps.Keys(kinds)))
			}
		}
	}
}

// tableCells splits a text table's rows at its header's columns (a left
// aligned tabwriter's: every cell starts where its header does).
func tableCells(lines []string) [][]string {
	var starts []int
	for i := 0; i < len(lines[0]); i++ {
		if lines[0][i] != ' ' && (i == 0 || lines[0][i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	var rows [][]string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "NA: ") {
			// The reasons a table gives under its rows.
			continue
		}
		row := make([]string, len(starts))
		for k, s := range starts {
			end := len(l)
			if k+1 < len(starts) {
				end = min(starts[k+1], len(l))
			}
			if s < end {
				row[k] = strings.TrimSpace(l[s:end])
			}
		}
		rows = append(rows, row)
	}
	return rows
}

var (
	sizeCell     = regexp.MustCompile(`^-?[0-9.]+ (B|KiB|MiB|GiB|TiB)$`)
	durationCell = regexp.MustCompile(`^-?[0-9.]+ ?(ns|µs|us|ms|s|m|h)$`)
	countCell    = regexp.MustCompile(`^-?[0-9][0-9,]*$`)
	ratioCell    = regexp.MustCompile(`^-?[0-9]*\.[0-9]+(e[-+][0-9]+)?%?$`)
	figure       = regexp.MustCompile(`[0-9][0-9.,]*`)
)

// cellKind is what a table cell holds, its figure aside.
func cellKind(c string) string {
	switch {
	case c == "NA" || strings.HasPrefix(c, "NA") || c == "-":
		// "-" is a key's none (the tensors outside the layers).
		return "NA"
	case sizeCell.MatchString(c):
		return "size"
	case durationCell.MatchString(c):
		return "duration"
	case countCell.MatchString(c), ratioCell.MatchString(c):
		// A ratio of whole numbers prints as one (1, not 1.0).
		return "number"
	}
	return "name"
}

// maskFigures replaces every number of a line, so that lines compare up
// to the figures that vary.
func maskFigures(l string) string {
	return strings.Join(strings.Fields(figure.ReplaceAllString(l, "#")), " ")
}

// The parser finds commands, their prompts, output, continuations and
// synopses as a reader sees them.
func TestDocsExamplesParser(t *testing.T) {
	page := "intro\n\n    make demo    # the demo\n    iocorr query --by layer   # by layer\n\n" +
		"```\n$ iocorr stats -i demo/iocorr.data \\\n    --top 3\nA  B\n1  2\n$ echo hi\nhi\n```\n\n" +
		"    iocorr query [-i DIR] [--by layer|expert]\n    iocorr export dataset -o study/ | head\n"
	got, err := markdownExamples("p.md", page)
	if err != nil {
		t.Fatal(err)
	}
	want := []docExample{
		{page: "p.md", line: 4, text: "iocorr query --by layer   # by layer", args: []string{"query", "--by", "layer"}},
		{page: "p.md", line: 7, text: "iocorr stats -i demo/iocorr.data  --top 3", args: []string{"stats", "-i", "demo/iocorr.data", "--top", "3"}, output: []string{"A  B", "1  2"}},
		{page: "p.md", line: 15, text: "iocorr query [-i DIR] [--by layer|expert]", args: []string{"query", "[-i", "DIR]", "[--by", "layer|expert]"}, synopsis: true},
		{page: "p.md", line: 16, text: "iocorr export dataset -o study/ | head", args: []string{"export", "dataset", "-o", "study/"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d examples, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.page != w.page || g.line != w.line || g.text != w.text || !slices.Equal(g.args, w.args) || g.synopsis != w.synopsis || !slices.Equal(g.output, w.output) {
			t.Errorf("example %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}
