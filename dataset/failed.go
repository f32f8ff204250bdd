package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
)

// Failure is a run that did not run to its end, as its sweep saw it.
type Failure struct {
	// Status is how it ended (sweep.Row.Status): its run_status.
	Status  string
	Budget  int64
	Command []string
	// At is when the sweep gave it up: the start and ID of a run that
	// never started (and so has no meta.json).
	At time.Time
}

// AddFailed adds the runs row of a run in run that failed to the dataset
// in dir and returns its ID; added is false when it was there already.
// The row says what the run's meta.json says, when it has one, with
// f.Status for run_status and every figure null; the run's other tables
// are left out, their rows being of a run cut short.
func AddFailed(dir, run string, f Failure) (id string, added bool, err error) {
	meta, id, err := readMeta(run)
	started := err == nil
	if errors.Is(err, fs.ErrNotExist) {
		meta = &rundir.Meta{Start: f.At, Command: f.Command}
		meta.Controls.MemLimit = f.Budget
		abs, err := filepath.Abs(run)
		if err != nil {
			return "", false, err
		}
		b, err := json.Marshal(struct{ Run, Status string }{abs, f.Status})
		if err != nil {
			return "", false, err
		}
		id = RunID(meta, b)
	} else if err != nil {
		return "", false, err
	}
	if there, err := present(dir, id); err != nil || there {
		return id, false, err
	}
	why := "the run failed (see run_status)"
	reasons := map[string]string{"decode_tokens": why, "tokens_per_s": why, "bytes_read_per_token": why}
	err = writePartition(dir, Runs, id, func(w io.Writer) error {
		return writeRunRow(w, meta, started, run, reasons, output.Text(f.Status), output.NA(), output.NA(), output.NA())
	})
	if err != nil {
		return "", false, fmt.Errorf("dataset %s: table %s: %w", dir, Runs, err)
	}
	return id, true, nil
}
