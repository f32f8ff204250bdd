// Command toucher is ground truth for fault attribution: it maps a file,
// turns readahead off for the mapping (MADV_RANDOM) so that every first
// touch of a cold page is exactly one major fault of exactly that page,
// and touches a given list of pages in order.
//
//	toucher -file model.gguf -pages 3,17,42 [-evict] [-wait]
//
// It prints one JSON object: the mapping's address, the page size, the
// file offset of each touch, and its own major/minor fault counts.
//
// Asynchronous preemption is off: Go preempts a thread with a signal, and
// a signal that lands while a fault waits for its read makes the kernel
// return to user space with the fault unaccounted; the retry then finds
// the page and counts a minor fault. Ground truth must not depend on that,
// so the toucher re-executes itself with GODEBUG=asyncpreemptoff=1.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

type report struct {
	Mapping  uint64  `json:"mapping"`
	PageSize int     `json:"page_size"`
	Offsets  []int64 `json:"offsets"`
	Resident int     `json:"resident_before"`
	MajFlt   int64   `json:"majflt"`
	MinFlt   int64   `json:"minflt"`
	Sum      int     `json:"sum"`
	Pages    []int64 `json:"pages"`
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "toucher: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	if !strings.Contains(os.Getenv("GODEBUG"), "asyncpreemptoff=1") {
		self, err := os.Executable()
		if err != nil {
			fail("%v", err)
		}
		env := append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
		fail("re-executing itself: %v", syscall.Exec(self, os.Args, env))
	}
	file := flag.String("file", "", "file to map")
	pagesArg := flag.String("pages", "", "comma-separated page numbers to touch, in order")
	evict := flag.Bool("evict", false, "sync the file and drop it from the page cache first")
	wait := flag.Bool("wait", false, "wait for a byte on stdin before touching")
	flag.Parse()
	if *file == "" || *pagesArg == "" {
		fail("-file and -pages are required")
	}
	f, err := os.Open(*file)
	if err != nil {
		fail("%v", err)
	}
	st, err := f.Stat()
	if err != nil {
		fail("%v", err)
	}
	ps := os.Getpagesize()
	var rep report
	rep.PageSize = ps
	for _, s := range strings.Split(*pagesArg, ",") {
		p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || p < 0 || p*int64(ps) >= st.Size() {
			fail("page %q is not in the file (%d pages)", s, (st.Size()+int64(ps)-1)/int64(ps))
		}
		rep.Pages = append(rep.Pages, p)
	}
	if *evict {
		// Dirty pages do not drop: sync first.
		if err := unix.Fsync(int(f.Fd())); err != nil {
			fail("fsync: %v", err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			fail("fadvise: %v", err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fail("mmap: %v", err)
	}
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		fail("madvise: %v", err)
	}
	vec := make([]byte, (len(mem)+ps-1)/ps)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e == 0 {
		for _, v := range vec {
			rep.Resident += int(v & 1)
		}
	}
	if *wait {
		var b [1]byte
		os.Stdin.Read(b[:])
	}
	rep.Mapping = uint64(uintptr(unsafe.Pointer(&mem[0])))
	for _, p := range rep.Pages {
		rep.Sum += int(mem[p*int64(ps)])
		rep.Offsets = append(rep.Offsets, p*int64(ps))
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	rep.MajFlt, rep.MinFlt = ru.Majflt, ru.Minflt
	json.NewEncoder(os.Stdout).Encode(rep)
}
