#include "textflag.h"

// func calibrationTarget(x uint64) uint64
// endbr64 then a push, as a CET build opens a function: the probe goes
// past the endbr64 (elfinfo.ProbePoint), onto the push, as it does in
// llama.cpp's functions.
TEXT ·calibrationTarget(SB), NOSPLIT, $0-16
	BYTE  $0xf3; BYTE $0x0f; BYTE $0x1e; BYTE $0xfa
	PUSHQ BP
	POPQ  BP
	JMP   calibrationBody<>(SB)

// func calibrationStepped(x uint64) uint64
// A plain register move first, which the kernel steps out of line.
TEXT ·calibrationStepped(SB), NOSPLIT, $0-16
	MOVQ AX, CX
	JMP  calibrationBody<>(SB)

// calibrationBody is both targets' x*0x9e3779b97f4a7c15 + 1, jumped to
// with their frame.
TEXT calibrationBody<>(SB), NOSPLIT, $0-16
	MOVQ  x+0(FP), AX
	MOVQ  $0x9e3779b97f4a7c15, CX
	IMULQ CX, AX
	INCQ  AX
	MOVQ  AX, ret+8(FP)
	RET

// func calibrationPCs() (target, stepped uintptr)
TEXT ·calibrationPCs(SB), NOSPLIT, $0-16
	LEAQ ·calibrationTarget(SB), AX
	MOVQ AX, target+0(FP)
	LEAQ ·calibrationStepped(SB), AX
	MOVQ AX, stepped+8(FP)
	RET
