package recorder

import (
	"fmt"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
)

// diskProfile is the kept profile (`iocorr doctor --disk`) of the disk
// holding the models, for the run's meta.json: nil when the models lie on
// no block device, on more than one disk (one profile cannot stand for
// both), or on a disk never measured. A profile that cannot be read is a
// warning, not a reason to lose the run.
func diskProfile(models []rundir.ModelFile, warn func(string)) *rundir.DiskProfile {
	var disk uint32
	for i := range models {
		d := models[i].Block.DiskDev
		switch {
		case d == 0:
		case disk == 0:
			disk = d
		case d != disk:
			warn(fmt.Sprintf("the models lie on disks %s and %s: the run keeps no disk profile, and its I/O shape has no device bandwidth to compare with", kernel.DevString(disk), kernel.DevString(d)))
			return nil
		}
	}
	if disk == 0 {
		return nil
	}
	p, err := rundir.ReadDiskProfile(disk)
	if err != nil {
		warn(err.Error())
		return nil
	}
	return p
}
