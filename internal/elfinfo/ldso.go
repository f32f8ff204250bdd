package elfinfo

import (
	"debug/elf"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// NeededLibs lists the shared libraries the dynamic loader would load for
// an ELF file: its DT_NEEDED entries and theirs, recursively, resolved in
// ld.so's order for the common cases — DT_RPATH (only when the file has
// no DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH, the directories of
// /etc/ld.so.conf, then the system directories — with $ORIGIN expanded.
// Paths are real paths (symlinks resolved); the loader itself is left
// out, as ldd lists it apart. A file that cannot be read adds nothing.
func NeededLibs(path string) []string {
	sys := systemLibDirs()
	env := filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))
	var out []string
	seen := map[string]bool{path: true}
	queue := []string{path}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		needed, rpath, runpath := dynamic(p)
		var dirs []string
		if len(runpath) == 0 {
			dirs = append(dirs, rpath...)
		}
		dirs = append(append(append(dirs, env...), runpath...), sys...)
		for _, n := range needed {
			if strings.HasPrefix(n, "ld-linux") {
				continue
			}
			if lp := find(n, dirs); lp != "" && !seen[lp] {
				seen[lp] = true
				out = append(out, lp)
				queue = append(queue, lp)
			}
		}
	}
	return out
}

// dynamic reads the DT_NEEDED, DT_RPATH and DT_RUNPATH entries of an ELF
// file, the search paths with $ORIGIN replaced by the file's directory.
func dynamic(p string) (needed, rpath, runpath []string) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, nil, nil
	}
	defer f.Close()
	needed, _ = f.ImportedLibraries()
	origin := filepath.Dir(p)
	paths := func(tag elf.DynTag) []string {
		var dirs []string
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				if d == "" {
					continue
				}
				d = strings.ReplaceAll(d, "${ORIGIN}", origin)
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", origin))
			}
		}
		return dirs
	}
	return needed, paths(elf.DT_RPATH), paths(elf.DT_RUNPATH)
}

// find returns the real path of the first regular file called name in
// dirs, or "".
func find(name string, dirs []string) string {
	if strings.Contains(name, "/") {
		dirs = []string{""}
	}
	for _, d := range dirs {
		lp := filepath.Join(d, name)
		if st, err := os.Stat(lp); err != nil || st.IsDir() {
			continue
		}
		if real, err := filepath.EvalSymlinks(lp); err == nil {
			return real
		}
		return lp
	}
	return ""
}

// systemLibDirs are the directories of /etc/ld.so.conf (with its
// includes) and the loader's built-in defaults.
func systemLibDirs() []string {
	var dirs []string
	var read func(string, int)
	read = func(conf string, depth int) {
		b, err := os.ReadFile(conf)
		if err != nil || depth > 2 {
			return
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(strings.SplitN(line, "#", 2)[0])
			if inc, ok := strings.CutPrefix(line, "include "); ok {
				m, _ := filepath.Glob(strings.TrimSpace(inc))
				sort.Strings(m)
				for _, c := range m {
					read(c, depth+1)
				}
			} else if line != "" {
				dirs = append(dirs, line)
			}
		}
	}
	read("/etc/ld.so.conf", 0)
	return append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib")
}
