// Package wire is the records iocorr's BPF programs write, as bpf/iocorr.h
// defines them: their Go types, written from the compiled object's BTF by
// bpf/internal/wiregen (`make generate`, types_gen.go), and what user space
// reads in them (names, page runs, C strings). It imports no cilium/ebpf,
// so that a run recorded on Linux is decoded, ingested and reported on any
// OS; the loader (package bpf) writes these records, ingest reads them.
package wire
