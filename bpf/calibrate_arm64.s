#include "textflag.h"

// func calibrationTarget(x uint64) uint64
TEXT ·calibrationTarget(SB), NOSPLIT|NOFRAME, $0-16
	STP.W (R29, R30), -16(RSP)
	LDP.P 16(RSP), (R29, R30)
	MOVD  x+0(FP), R0
	MOVD  $0x9e3779b97f4a7c15, R1
	MUL   R1, R0, R0
	ADD   $1, R0, R0
	MOVD  R0, ret+8(FP)
	RET

// func calibrationTargetPC() uintptr
TEXT ·calibrationTargetPC(SB), NOSPLIT|NOFRAME, $0-8
	MOVD $·calibrationTarget(SB), R0
	MOVD R0, ret+0(FP)
	RET

// func calibrationStepped(x uint64) uint64
// A plain register move first, which the kernel steps out of line.
TEXT ·calibrationStepped(SB), NOSPLIT|NOFRAME, $0-16
	MOVD  x+0(FP), R0
	MOVD  $0x9e3779b97f4a7c15, R1
	MUL   R1, R0, R0
	ADD   $1, R0, R0
	MOVD  R0, ret+8(FP)
	RET

// func calibrationSteppedPC() uintptr
TEXT ·calibrationSteppedPC(SB), NOSPLIT|NOFRAME, $0-8
	MOVD $·calibrationStepped(SB), R0
	MOVD R0, ret+0(FP)
	RET
