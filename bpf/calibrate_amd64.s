#include "textflag.h"

// func calibrationTarget(x uint64) uint64
TEXT ·calibrationTarget(SB), NOSPLIT, $0-16
	PUSHQ BP
	POPQ  BP
	MOVQ  x+0(FP), AX
	MOVQ  $0x9e3779b97f4a7c15, CX
	IMULQ CX, AX
	INCQ  AX
	MOVQ  AX, ret+8(FP)
	RET

// func calibrationTargetPC() uintptr
TEXT ·calibrationTargetPC(SB), NOSPLIT, $0-8
	LEAQ ·calibrationTarget(SB), AX
	MOVQ AX, ret+0(FP)
	RET

// func calibrationStepped(x uint64) uint64
// endbr64, the first instruction of a CET build's functions, which the
// kernel steps out of line.
TEXT ·calibrationStepped(SB), NOSPLIT, $0-16
	BYTE  $0xf3; BYTE $0x0f; BYTE $0x1e; BYTE $0xfa
	MOVQ  x+0(FP), AX
	MOVQ  $0x9e3779b97f4a7c15, CX
	IMULQ CX, AX
	INCQ  AX
	MOVQ  AX, ret+8(FP)
	RET

// func calibrationSteppedPC() uintptr
TEXT ·calibrationSteppedPC(SB), NOSPLIT, $0-8
	LEAQ ·calibrationStepped(SB), AX
	MOVQ AX, ret+0(FP)
	RET
