//go:build amd64 || arm64

package bpf

// calibrationTarget and calibrationStepped are what MeasureUprobeCost
// probes: x*0x9e3779b97f4a7c15 + 1, in assembly, so that their first
// instructions are chosen. The kernel emulates some instructions in the
// trap and steps the others out of line, and the two cost differently: on
// the lab's VM a hit on a push cost 0.6–9 µs, on a mov or endbr64 6–35 µs
// (the VM's host sets the scale). calibrationTarget is probed on the
// prologue C compilers usually give a function (a push on x86-64, stp of
// the frame pointer and link register on arm64: elfinfo.UsualPrologue),
// past the endbr64 a CET build puts before it on x86-64, as
// llama_decode, ggml_graph_compute and ggml_compute_forward_get_rows are
// in every build checked (testkit/llmtest); calibrationStepped begins
// with a register move, which is stepped.
func calibrationTarget(x uint64) uint64
func calibrationStepped(x uint64) uint64

// calibrationPCs are where the targets' own code is: Go calls an
// assembly function through a wrapper, whose address reflect would give.
func calibrationPCs() (target, stepped uintptr)
