// Package kernel holds facts of the Linux kernel's interfaces that the
// recorded events carry encoded, each decoded in one place.
package kernel

import "fmt"

// BlockOp is the operation of a block request: REQ_OP_* of
// include/linux/blk_types.h, the low reqOpBits bits of its cmd_flags
// (the rest are REQ_* modifier flags such as REQ_SYNC or REQ_META).
type BlockOp uint8

// The operations a recording meets; the values are the kernel's.
const (
	BlockRead         BlockOp = 0
	BlockWrite        BlockOp = 1
	BlockFlush        BlockOp = 2
	BlockDiscard      BlockOp = 3
	BlockSecureErase  BlockOp = 5
	BlockWriteZeroes  BlockOp = 9
	BlockZoneOpen     BlockOp = 10
	BlockZoneClose    BlockOp = 11
	BlockZoneFinish   BlockOp = 12
	BlockZoneAppend   BlockOp = 13
	BlockZoneReset    BlockOp = 15
	BlockZoneResetAll BlockOp = 17
	BlockDrvIn        BlockOp = 34
	BlockDrvOut       BlockOp = 35
)

const reqOpBits = 8

// BlockOpOf is the operation of a request with these cmd_flags.
func BlockOpOf(cmdFlags uint32) BlockOp { return BlockOp(cmdFlags & (1<<reqOpBits - 1)) }

var blockOpNames = map[BlockOp]string{
	BlockRead: "read", BlockWrite: "write", BlockFlush: "flush", BlockDiscard: "discard",
	BlockSecureErase: "secure_erase", BlockWriteZeroes: "write_zeroes",
	BlockZoneOpen: "zone_open", BlockZoneClose: "zone_close", BlockZoneFinish: "zone_finish",
	BlockZoneAppend: "zone_append", BlockZoneReset: "zone_reset", BlockZoneResetAll: "zone_reset_all",
	BlockDrvIn: "drv_in", BlockDrvOut: "drv_out",
}

// String is the kernel's name of the operation in lower case, or
// "op N" for one it does not define.
func (o BlockOp) String() string {
	if s, ok := blockOpNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op %d", uint8(o))
}
