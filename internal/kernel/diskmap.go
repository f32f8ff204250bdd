package kernel

import "sort"

// FIEMAP_EXTENT_UNKNOWN | _DELALLOC | _ENCODED | _DATA_INLINE: an extent
// whose place on the disk is unknown, not yet chosen, encoded or inline
// has no physical byte a block request could name.
const fiemapNoPhysical = 0x2 | 0x4 | 0x8 | 0x100

// DiskMap is where a file lies on its disk: block requests name bytes of
// the whole disk, FIEMAP names bytes of the partition.
type DiskMap struct {
	DiskDev uint32
	PartDev uint32
	PartOff uint64 // partition start, bytes from the disk start
	// Extents, sorted by physical byte (partition-relative), each with
	// a physical byte.
	Extents []Extent
}

// NewDiskMap is the map of a file on bd with FIEMAP's extents.
func NewDiskMap(bd *BlockDevice, extents []Extent) DiskMap {
	dm := DiskMap{DiskDev: bd.DiskDev, PartDev: bd.Dev, PartOff: bd.PartStartSector * 512}
	for _, e := range extents {
		if e.Flags&fiemapNoPhysical != 0 || e.Length == 0 {
			continue
		}
		dm.Extents = append(dm.Extents, e)
	}
	sort.Slice(dm.Extents, func(i, j int) bool { return dm.Extents[i].Physical < dm.Extents[j].Physical })
	return dm
}

// OnDisk reports whether block requests of disk dev may hit the file.
// Without the whole disk's number (not found at record time) the
// partition's is the best guess: it is the disk itself when the file
// system sits on an unpartitioned device.
func (dm *DiskMap) OnDisk(dev uint32) bool {
	if dm.DiskDev != 0 {
		return dm.DiskDev == dev
	}
	return dm.PartDev != 0 && dm.PartDev == dev
}

// ExtentFrom is the index of the first extent that ends after partition
// byte p (len(Extents) where none does).
func (dm *DiskMap) ExtentFrom(p uint64) int {
	return sort.Search(len(dm.Extents), func(i int) bool { return dm.Extents[i].Physical+dm.Extents[i].Length > p })
}

// Holds says whether byte d of disk dev is in one of the file's extents.
func (dm *DiskMap) Holds(dev uint32, d uint64) bool {
	if !dm.OnDisk(dev) || d < dm.PartOff {
		return false
	}
	p := d - dm.PartOff
	i := dm.ExtentFrom(p)
	return i < len(dm.Extents) && dm.Extents[i].Physical <= p
}
