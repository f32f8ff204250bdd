//go:build amd64 || arm64

package bpf

// calibrationTarget and calibrationStepped are what MeasureUprobeCost
// probes: x*0x9e3779b97f4a7c15 + 1, in assembly, so that their first
// instructions are chosen. The kernel emulates some first instructions
// in the trap and steps the others out of line, and the two cost
// differently: on the lab's VM a hit on a push cost 6–9 µs, on a mov or
// endbr64 25–35 µs. calibrationTarget begins with the prologue C
// compilers usually give a function (a push on x86-64, stp of the frame
// pointer and link register on arm64: elfinfo.UsualPrologue), as
// llama_decode, ggml_graph_compute and ggml_compute_forward_get_rows do
// in a build of Debian's gcc; calibrationStepped with what is stepped
// (endbr64 on x86-64, as in CET builds such as node-llama-cpp's).
func calibrationTarget(x uint64) uint64
func calibrationStepped(x uint64) uint64

// calibrationPCs are where the targets' own code is: Go calls an
// assembly function through a wrapper, whose address reflect would give.
func calibrationPCs() (target, stepped uintptr)
