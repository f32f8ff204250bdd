package sweep

import (
	"strings"
	"testing"
)

func TestReportRunIsTheSmallestBudgetThatRanInOrder(t *testing.T) {
	tests := []struct {
		name    string
		rows    []Row
		want    string // budget; "" for an error
		wantErr string
	}{
		{"smallest of those that ran", []Row{{Budget: "128MiB", MemLimit: 128 << 20, Status: StatusOK},
			{Budget: "64MiB", MemLimit: 64 << 20, Status: StatusOK}, {Budget: "96MiB", MemLimit: 96 << 20, Status: StatusOK}}, "64MiB", ""},
		{"a smaller budget that failed is passed over", []Row{{Budget: "32MiB", MemLimit: 32 << 20, Status: "killed by SIGKILL"},
			{Budget: "96MiB", MemLimit: 96 << 20, Status: StatusOK}}, "96MiB", ""},
		{"none ran in order", []Row{{Budget: "32MiB", MemLimit: 32 << 20, Status: "exit status 1"}}, "", "no run of the sweep ended in order"},
		{"no runs", nil, "", "no run of the sweep ended in order"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := (&Summary{Rows: tc.rows}).ReportRun()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Budget != tc.want {
				t.Errorf("got %q, %v; want %q", got.Budget, err, tc.want)
			}
		})
	}
}
