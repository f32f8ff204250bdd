// Package bpf holds iocorr's BPF programs, the Go bindings bpf2go
// generates for them, and the code that loads and attaches them.
package bpf

// The first directive refuses to generate with a toolchain other than the
// one in TOOLCHAIN (FORCE=1 overrides), since the objects are committed and
// must be reproducible byte for byte.
//go:generate bash ../scripts/bpf-toolchain.sh
//go:generate go tool bpf2go -tags linux -cc clang-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target amd64,arm64 -type event_hdr -type fault_event -type page_event -type page_run_event -type ra_event -type block_event -type decode_event -type graph_event -type node_event -type op_event -type experts_event -type task_event -type mmap_event -type sched_event -type read_event -type place_event -type bufname_event -type proc_state -type file_key -type blk_start Iocorr iocorr.bpf.c -- -I.
