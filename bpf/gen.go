// Package bpf holds iocorr's BPF programs, the Go bindings bpf2go
// generates for them, and the code that loads and attaches them.
package bpf

// The first directive refuses to generate with a toolchain other than the
// one in TOOLCHAIN (FORCE=1 overrides), since the objects are committed and
// must be reproducible byte for byte. The last writes the records of
// iocorr.h from the object's BTF into the wire package (the read side's,
// which imports no cilium/ebpf); bpf2go writes only what the loader keeps
// to itself.
//go:generate bash ../scripts/bpf-toolchain.sh
//go:generate go tool bpf2go -tags linux -cc clang-14 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target amd64,arm64 -type proc_state -type file_key -type blk_start Iocorr iocorr.bpf.c -- -I.
//go:generate go run ./internal/wiregen -o ../wire/types_gen.go iocorr_x86_bpfel.o iocorr.h
