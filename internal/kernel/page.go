package kernel

// PageSize is the unit of page-cache indices, of one fault and of one
// mincore entry: 4 KiB on every architecture iocorr records (x86-64, and
// arm64 kernels built with 4 KiB pages, the default of the boards it
// targets).
const PageSize = 4096
