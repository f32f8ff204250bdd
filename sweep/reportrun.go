package sweep

import "errors"

// ReportRun picks the run of the sweep a report shows: the smallest
// budget whose run ended in order.
func (s *Summary) ReportRun() (Row, error) {
	var best *Row
	for i := range s.Rows {
		r := &s.Rows[i]
		if r.Status == StatusOK && (best == nil || r.MemLimit < best.MemLimit) {
			best = r
		}
	}
	if best == nil {
		return Row{}, errors.New("no run of the sweep ended in order: nothing to report")
	}
	return *best, nil
}
