package procmaps

// SnapshotDir is the folder of a run directory that holds the copies of
// /proc/PID/maps (Snapshot.File names one).
const SnapshotDir = "maps"

// Snapshot is a copy of /proc/PID/maps taken when a model file was
// mapped; File is relative to the run directory.
type Snapshot struct {
	MonoNS uint64 `json:"mono_ns"`
	PID    int    `json:"pid"`
	File   string `json:"file"`
}
