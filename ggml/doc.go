// Package ggml holds what iocorr knows about its target, llama.cpp and
// ggml, apart from the BPF loader that acts on it: the probe points and
// their symbols, how a file defines them (exported, or local in
// .symtab), the layout of struct ggml_tensor and struct ggml_cgraph (from
// a library's DWARF, or the built-in table), the op names a build
// numbers its ops with (GGML_OP_NAME), the check of a node read with a
// layout against the traced models' GGUF tensors, and the one table of
// what a run loses without each probe point, which the recorder, the run
// metadata and iocorr doctor all read.
//
// It reads ELF files and GGUF facts only: it imports no BPF package and
// no cilium/ebpf, so doctor and the read side can use it without the
// loader, and the loader (package bpf) is handed these facts.
package ggml
