package output

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/testkit/ducktest"
)

// A float column whose first rows are integral (a ratio 0 for the first
// tokens, then fractions) reads as a float in DuckDB with its defaults:
// its sniffer types a column from the first 20,480 rows, and a "0" there
// made it BIGINT, rounding the later 0.5s away.
func TestAFloatColumnOfIntegralFirstRowsReadsAsAFloatInDuckDB(t *testing.T) {
	const zeros, halves = 21_000, 1_000
	cols := []Column{{Name: "ratio", Type: Float64, Nullable: true}}
	dir := t.TempDir()
	db := ducktest.Open(t)
	for _, tc := range []struct {
		format Format
		read   string
	}{{CSV, "read_csv"}, {JSON, "read_json"}, {JSONL, "read_json"}, {Parquet, "read_parquet"}} {
		t.Run(string(tc.format), func(t *testing.T) {
			path := filepath.Join(dir, "ratio."+string(tc.format))
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			rw := New(f, tc.format, cols)
			for i := range zeros + halves {
				v := 0.0
				if i >= zeros {
					v = 0.5
				}
				if err := rw.Row(Float(v)); err != nil {
					t.Fatal(err)
				}
			}
			if err := rw.Close(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			var sum float64
			var typ string
			if err := db.QueryRow(`SELECT sum(ratio)::DOUBLE, any_value(typeof(ratio)) FROM `+tc.read+`('`+path+`')`).Scan(&sum, &typ); err != nil {
				t.Fatal(err)
			}
			if sum != halves*0.5 || typ != "DOUBLE" {
				t.Errorf("%s: ratio is %s summing to %v, want DOUBLE summing to %v", tc.read, typ, sum, halves*0.5)
			}
		})
	}
}

func TestAFloatCellAlwaysHasADecimalPointOrAnExponent(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{0, "0.0"}, {1, "1.0"}, {-3, "-3.0"}, {0.25, "0.25"}, {1e21, "1e+21"}, {123456, "123456.0"}} {
		if c := Float(tc.v); c.s != tc.want {
			t.Errorf("Float(%v) = %q, want %q", tc.v, c.s, tc.want)
		}
	}
}
