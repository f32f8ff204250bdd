package dataset

import (
	"context"
	"time"

	"github.com/iocorr/iocorr/sweep"
)

// Sweep adds a sweep's runs to the study dataset in Dir as each ends
// (recorder/sweeprun calls AddRun): several sweeps — models ×
// quantizations, each sweeping its budgets — given one Dir make one
// study.
type Sweep struct{ Dir string }

// AddRun adds the sweep's run in run, row its summary and command its
// command line: the whole run when it ran to its end, only its runs row
// (its status, its figures null) when it did not.
func (s Sweep) AddRun(ctx context.Context, run string, row *sweep.Row, command []string) error {
	if row.Status == sweep.StatusOK {
		_, _, err := Add(ctx, s.Dir, run)
		return err
	}
	_, _, err := AddFailed(s.Dir, run, Failure{Status: row.Status, Budget: row.MemLimit, Command: command, At: time.Now()})
	return err
}
