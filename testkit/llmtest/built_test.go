//go:build linux

package llmtest

import (
	"context"
	"debug/elf"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/elfinfo"
)

// builtSpec is a small MoE model: each tool loads and runs it in seconds.
var builtSpec = gguf.SynthSpec{Layers: 2, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: WeightType}

// runBuilt runs a built tool with stdin at EOF and without
// LD_LIBRARY_PATH, so that the shared build must find its libraries by
// its own RUNPATH.
func runBuilt(t *testing.T, bin string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

var callsLine = regexp.MustCompile(`@calls: (\d+)`)

// TestBuiltCompletionGeneratesTokensNonInteractively runs llama-completion
// of both builds the way a study does: a prompt, N tokens, no
// conversation, no warm-up, end-of-generation ignored, stdin at EOF. It
// must exit by itself having called llama_decode N times: once for the
// one-batch prompt (which yields the first token) and once per further
// token. bpftrace counts the calls because llama-completion's own report
// cannot: its logger is an asynchronous thread that is never stopped
// (llama.cpp leaks it on purpose, issue 22142), so the performance lines
// printed just before exit are often lost.
func TestBuiltCompletionGeneratesTokensNonInteractively(t *testing.T) {
	Require(t)
	bt := requireBpftrace(t)
	model := Model(t, builtSpec)
	const n = 8
	for _, b := range Builds {
		t.Run(b.String(), func(t *testing.T) {
			bin := CLI(t, b, "llama-completion")
			probed := bin
			if b == Shared {
				lib, err := filepath.EvalSymlinks(filepath.Join(SharedLibDir(t), "libllama.so"))
				if err != nil {
					t.Fatal(err)
				}
				probed = lib
			}
			// bpftrace -c splits its command on spaces: no spaces in it.
			argv := []string{bin, "-m", model, "-p", "hello", "-n", strconv.Itoa(n),
				"-no-cnv", "--no-warmup", "--ignore-eos", "-t", "2", "-c", "256", "--temp", "0"}
			prog := fmt.Sprintf(`uprobe:"%s":llama_decode /pid == cpid/ { @calls = count(); }`, probed)
			stdout, _ := runBuilt(t, bt, "-q", "-e", prog, "-c", strings.Join(argv, " "))
			m := callsLine.FindStringSubmatch(stdout)
			if m == nil {
				t.Fatalf("no llama_decode count in bpftrace's output:\n%s", stdout)
			}
			if got, _ := strconv.Atoi(m[1]); got != n {
				t.Errorf("llama-completion -n %d called llama_decode %d times, want %d", n, got, n)
			}
		})
	}
}

// TestBuiltCLIAnswersOnePromptAndExits runs llama-cli (of the shared
// build, the one that has it) with a prompt and --single-turn: it must
// answer and exit without waiting for input (stdin is at EOF).
func TestBuiltCLIAnswersOnePromptAndExits(t *testing.T) {
	Require(t)
	model := Model(t, builtSpec)
	for _, b := range []Build{Shared} {
		t.Run(b.String(), func(t *testing.T) {
			bin := CLI(t, b, "llama-cli")
			stdout, stderr := runBuilt(t, bin, "-m", model, "-p", "hello world", "-n", "8", "-st",
				"--no-warmup", "-t", "2", "-c", "256", "--temp", "0")
			// The CLI echoes the prompt, prints the turn's speeds when the
			// answer is complete, and says it exits.
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(`(?m)^> hello world$`),
				regexp.MustCompile(`\[ Prompt: [0-9.]+ t/s \| Generation: [0-9.]+ t/s \]`),
				regexp.MustCompile(`(?m)^Exiting\.\.\.$`),
			} {
				if !want.MatchString(stdout) {
					t.Errorf("llama-cli's output has no %s\nstdout:\n%s\nstderr:\n%s", want, stdout, stderr)
				}
			}
		})
	}
}

// benchRow is the part of llama-bench's report the tests check.
type benchRow struct {
	BuildCommit string  `json:"build_commit"`
	NPrompt     int     `json:"n_prompt"`
	NGen        int     `json:"n_gen"`
	NThreads    int     `json:"n_threads"`
	AvgTS       float64 `json:"avg_ts"`
	Samples     []int64 `json:"samples_ns"`
}

// sourceCommit is the llama.cpp commit a build was made from, as
// scripts/build-llama.sh wrote it beside the build.
func sourceCommit(t *testing.T, b Build) string {
	t.Helper()
	dir, err := BuildDir(b)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "SOURCE"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(src), "\n") {
		if c, ok := strings.CutPrefix(l, "commit "); ok {
			return c
		}
	}
	t.Fatalf("no commit in the build's SOURCE:\n%s", src)
	return ""
}

// TestBuiltBenchReportsGenerationOnly runs `llama-bench -p 0 -n 4 -t 2`
// of both builds, in JSON and in CSV: one generation test of 4 tokens on
// 2 threads, made by the bundle's commit.
func TestBuiltBenchReportsGenerationOnly(t *testing.T) {
	Require(t)
	model := Model(t, builtSpec)
	for _, b := range Builds {
		t.Run(b.String(), func(t *testing.T) {
			bin := CLI(t, b, "llama-bench")
			commit := sourceCommit(t, b)
			check := func(t *testing.T, r benchRow) {
				if r.NPrompt != 0 || r.NGen != 4 || r.NThreads != 2 {
					t.Errorf("n_prompt %d, n_gen %d, n_threads %d; want 0, 4, 2", r.NPrompt, r.NGen, r.NThreads)
				}
				if r.BuildCommit == "" || !strings.HasPrefix(commit, r.BuildCommit) {
					t.Errorf("build_commit %q is not the bundle's commit %s", r.BuildCommit, commit)
				}
				if r.AvgTS <= 0 {
					t.Errorf("avg_ts %v: no generation measured", r.AvgTS)
				}
			}
			args := []string{"-m", model, "-p", "0", "-n", "4", "-t", "2", "-r", "1", "-o"}
			t.Run("json", func(t *testing.T) {
				stdout, _ := runBuilt(t, bin, append(args, "json")...)
				var rows []benchRow
				if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
					t.Fatalf("llama-bench -o json: %v\n%s", err, stdout)
				}
				if len(rows) != 1 {
					t.Fatalf("%d tests in the report, want 1:\n%s", len(rows), stdout)
				}
				if len(rows[0].Samples) != 1 {
					t.Errorf("%d samples with -r 1, want 1", len(rows[0].Samples))
				}
				check(t, rows[0])
			})
			t.Run("csv", func(t *testing.T) {
				stdout, _ := runBuilt(t, bin, append(args, "csv")...)
				recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
				if err != nil {
					t.Fatalf("llama-bench -o csv: %v\n%s", err, stdout)
				}
				if len(recs) != 2 {
					t.Fatalf("%d CSV records, want a header and one test:\n%s", len(recs), stdout)
				}
				col := map[string]string{}
				for i, h := range recs[0] {
					col[h] = recs[1][i]
				}
				var r benchRow
				var errs []error
				atoi := func(s string) int {
					v, err := strconv.Atoi(s)
					errs = append(errs, err)
					return v
				}
				r.BuildCommit = col["build_commit"]
				r.NPrompt, r.NGen, r.NThreads = atoi(col["n_prompt"]), atoi(col["n_gen"]), atoi(col["n_threads"])
				r.AvgTS, err = strconv.ParseFloat(col["avg_ts"], 64)
				errs = append(errs, err)
				for _, err := range errs {
					if err != nil {
						t.Fatalf("llama-bench -o csv: %v\n%s", err, stdout)
					}
				}
				check(t, r)
			})
		})
	}
}

// llamaLibs are the libraries of llama.cpp and ggml a shared build's
// tools need.
var llamaLibs = regexp.MustCompile(`^lib(llama|ggml)`)

// TestBuiltToolsLinkLlamaAsTheBuildSays checks what each build is for:
// the static tools need no libllama or libggml at all, the shared ones
// load libllama, libggml-base and libggml-cpu from their own directory
// through a RUNPATH of $ORIGIN (the cache is renamed into place, so an
// absolute build path would dangle). llama-cli is built shared only.
func TestBuiltToolsLinkLlamaAsTheBuildSays(t *testing.T) {
	for _, tool := range BuiltTools[Static] {
		t.Run("static/"+tool, func(t *testing.T) {
			bin := CLI(t, Static, tool)
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			libs, err := f.ImportedLibraries()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range libs {
				if llamaLibs.MatchString(l) {
					t.Errorf("static %s needs %s", tool, l)
				}
			}
		})
	}
	for _, tool := range []string{"llama-cli", "llama-completion", "llama-bench"} {
		t.Run("shared/"+tool, func(t *testing.T) {
			bin := CLI(t, Shared, tool)
			dir := SharedLibDir(t)
			// What the dynamic loader would load from dir, through the
			// tools' RUNPATH (elfinfo emulates ld.so for doctor).
			realDir, err := filepath.EvalSymlinks(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range elfinfo.NeededLibs(bin) {
				if filepath.Dir(p) == realDir {
					got = append(got, filepath.Base(p))
				}
			}
			for _, want := range []string{"libllama.so", "libggml-base.so", "libggml-cpu.so"} {
				if !containsPrefix(got, want) {
					t.Errorf("shared %s does not load %s from %s; it loads %v", tool, want, dir, got)
				}
			}
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rp, err := f.DynString(elf.DT_RUNPATH)
			if err != nil {
				t.Fatal(err)
			}
			// CMake writes "$ORIGIN:" (an empty entry after it).
			if len(rp) != 1 || strings.Trim(rp[0], ":") != "$ORIGIN" {
				t.Errorf("RUNPATH %q, want $ORIGIN alone", rp)
			}
		})
	}
}

// containsPrefix says whether a library of libs is want or a versioned
// name of it (libllama.so.0).
func containsPrefix(libs []string, want string) bool {
	for _, l := range libs {
		if l == want || strings.HasPrefix(l, want+".") {
			return true
		}
	}
	return false
}

// probeSymbols are the symbols iocorr's user-space probes look for.
var probeSymbols = []string{
	"llama_decode", "ggml_graph_compute", "ggml_graph_compute_thread", "ggml_compute_forward",
	"ggml_compute_forward_get_rows", "ggml_compute_forward_mul_mat", "GGML_OP_NAME",
}

// symbolKinds says where a file defines a symbol: exported in .dynsym,
// or only in .symtab, as a global (a static executable exports nothing)
// or a local (a static function) symbol. GCC's clones of a function
// (name.isra.0, name.constprop.0, name.part.0) are listed under their own
// names: their arguments are not the source's, so a probe on one would
// read them wrong.
func symbolKinds(t *testing.T, path, name string) []string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	match := func(s elf.Symbol) bool {
		return s.Section != elf.SHN_UNDEF && (s.Name == name || strings.HasPrefix(s.Name, name+"."))
	}
	var kinds []string
	seen := map[string]bool{}
	dyn, _ := f.DynamicSymbols()
	for _, s := range dyn {
		if match(s) && !seen[s.Name] {
			seen[s.Name] = true
			kinds = append(kinds, "dynsym "+s.Name)
		}
	}
	syms, _ := f.Symbols()
	for _, s := range syms {
		if !match(s) || seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		if elf.ST_BIND(s.Info) == elf.STB_LOCAL {
			kinds = append(kinds, "symtab-local "+s.Name)
		} else {
			kinds = append(kinds, "symtab-global "+s.Name)
		}
	}
	return kinds
}

// TestBuiltProbeSymbolsAreDefined finds, for each build, which file
// defines each probe symbol and in which table, logs that as a table,
// and requires llama_decode and ggml_graph_compute to be there: without
// them no token or graph is seen.
func TestBuiltProbeSymbolsAreDefined(t *testing.T) {
	for _, b := range Builds {
		t.Run(b.String(), func(t *testing.T) {
			files := []string{CLI(t, b, "llama-completion")}
			if b == Shared {
				libs, err := filepath.Glob(filepath.Join(SharedLibDir(t), "lib*.so"))
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, libs...)
			}
			var table strings.Builder
			for _, sym := range probeSymbols {
				var where []string
				for _, f := range files {
					for _, k := range symbolKinds(t, f, sym) {
						where = append(where, fmt.Sprintf("%s in %s", k, filepath.Base(f)))
					}
				}
				if len(where) == 0 {
					where = []string{"missing"}
				}
				fmt.Fprintf(&table, "\n  %-32s %s", sym, strings.Join(where, ", "))
				if len(where) == 1 && where[0] == "missing" && (sym == "llama_decode" || sym == "ggml_graph_compute") {
					t.Errorf("%s build defines no %s", b, sym)
				}
			}
			t.Logf("probe symbols of the %s build:%s", b, table.String())
		})
	}
}

// TestProbedFunctionsBeginAsOneOfTheCalibrationTargets checks that the
// llama.cpp builds the tests trace cover both costs bpf.MeasureUprobeCost
// prices: the kernel emulates a probed function's first instruction when
// it is the compilers' usual prologue (a push), as Debian's gcc leaves
// it, and steps out of line the endbr64 a CET build (node-llama-cpp's
// prebuilt libraries) begins with, 3–4× dearer here. The recorder prices
// op probes by the class of their functions.
func TestProbedFunctionsBeginAsOneOfTheCalibrationTargets(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the builds' first instructions are known for x86-64")
	}
	Require(t)
	prebuilt, err := filepath.Glob(filepath.Join(LibDir(), "libggml-cpu-*.so"))
	if err != nil {
		t.Fatal(err)
	}
	if lib, err := LlamaLib(); err == nil {
		prebuilt = append(prebuilt, lib)
	}
	// Where ggml_backend_tensor_set and ggml_backend_buffer_name are.
	prebuilt = append(prebuilt, filepath.Join(LibDir(), "libggml-base.so"))
	libs, err := filepath.Glob(filepath.Join(SharedLibDir(t), "lib*.so"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files []string
		pad   int // bytes of a landing pad the probe skips
		want  bpf.FirstInstruction
	}{
		{"shared", libs, 0, bpf.Emulated},
		{"static", []string{CLI(t, Static, "llama-completion")}, 0, bpf.Emulated},
		// A CET build: endbr64, stepped out of line at 10× the cost, then
		// the push the probe sits on.
		{"prebuilt", prebuilt, 4, bpf.Emulated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found := map[string]bool{}
			for _, p := range tc.files {
				m, code, err := elfinfo.FuncStarts(p, ggml.ProbeSymbols)
				if err != nil {
					t.Fatal(err)
				}
				for sym, b := range code {
					found[sym] = true
					if sym == ggml.SymBufferName {
						// Hit once per buffer while the model loads: its
						// cost is no token's (and the prebuilt one's
						// first instruction after endbr64 is stepped).
						continue
					}
					pad, emulated := elfinfo.ProbePoint(m, b)
					got := bpf.Stepped
					if emulated {
						got = bpf.Emulated
					}
					if pad != tc.pad || got != tc.want {
						t.Errorf("%s in %s begins % x: probed %d bytes in, %v; want %d, %v", sym, filepath.Base(p), b, pad, got, tc.pad, tc.want)
					}
				}
			}
			for _, sym := range ggml.ProbeSymbols {
				if !found[sym] {
					t.Errorf("no file of the %s build defines %s", tc.name, sym)
				}
			}
		})
	}
}
