package kernel

// The machine's facts as the kernel reports them, in the shapes a run's
// meta.json keeps (rundir names them; internal/proc and internal/blockdev
// read them), defined here so that the readers stand below the run
// directory.

// Host describes the machine a run was recorded on: uname, sysinfo and /proc/cpuinfo.
type Host struct {
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"`
	CPUModel string `json:"cpu_model"`
	NumCPU   int    `json:"num_cpu"`
	MemTotal uint64 `json:"mem_total"`
	PageSize int    `json:"page_size"`
}

// BlockDevice is the device holding a model file. Block events carry
// sectors from the start of the whole disk; PartStartSector converts them.
type BlockDevice struct {
	Name            string `json:"name"`     // e.g. vda, nvme0n1p2
	Dev             uint32 `json:"dev"`      // kernel encoding of the partition (or disk)
	DiskDev         uint32 `json:"disk_dev"` // kernel encoding of the whole disk, as in block events
	PartStartSector uint64 `json:"part_start_sector"`
	LogicalBlock    int    `json:"logical_block_size"`
	// ReadAheadKB is the disk's queue/read_ahead_kb when the run began
	// (nil: unknown). A mapped file's fault read-around is that window,
	// twice it after fadvise(SEQUENTIAL), as llama.cpp advises its model.
	ReadAheadKB *uint64 `json:"read_ahead_kb,omitempty"`
}

// Extent is one FIEMAP extent: file bytes [Logical, Logical+Length) are
// at device bytes [Physical, Physical+Length) of the partition.
type Extent struct {
	Logical  uint64 `json:"logical"`
	Physical uint64 `json:"physical"`
	Length   uint64 `json:"length"`
	Flags    uint32 `json:"flags"`
}

// DiskStat is one line of /proc/diskstats.
type DiskStat struct {
	Name           string `json:"name"`
	Major          uint32 `json:"major"`
	Minor          uint32 `json:"minor"`
	Reads          uint64 `json:"reads"`
	SectorsRead    uint64 `json:"sectors_read"`
	ReadTicksMS    uint64 `json:"read_ms"`
	Writes         uint64 `json:"writes"`
	SectorsWritten uint64 `json:"sectors_written"`
}
