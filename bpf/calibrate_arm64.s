#include "textflag.h"

// func calibrationTarget(x uint64) uint64
TEXT ·calibrationTarget(SB), NOSPLIT|NOFRAME, $0-16
	STP.W (R29, R30), -16(RSP)
	LDP.P 16(RSP), (R29, R30)
	B     calibrationBody<>(SB)

// func calibrationStepped(x uint64) uint64
// A plain register move first, which the kernel steps out of line.
TEXT ·calibrationStepped(SB), NOSPLIT|NOFRAME, $0-16
	MOVD R0, R1
	B    calibrationBody<>(SB)

// calibrationBody is both targets' x*0x9e3779b97f4a7c15 + 1, branched to
// with their frame.
TEXT calibrationBody<>(SB), NOSPLIT|NOFRAME, $0-16
	MOVD x+0(FP), R0
	MOVD $0x9e3779b97f4a7c15, R1
	MUL  R1, R0, R0
	ADD  $1, R0, R0
	MOVD R0, ret+8(FP)
	RET

// func calibrationPCs() (target, stepped uintptr)
TEXT ·calibrationPCs(SB), NOSPLIT|NOFRAME, $0-16
	MOVD $·calibrationTarget(SB), R0
	MOVD R0, target+0(FP)
	MOVD $·calibrationStepped(SB), R0
	MOVD R0, stepped+8(FP)
	RET
