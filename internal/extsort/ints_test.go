package extsort_test

import (
	"errors"
	"math"
	"testing"

	"github.com/iocorr/iocorr/internal/extsort"
)

type mixed struct {
	u    uint64
	i    int64
	flag bool
}

var mixedCodec = extsort.Ints(3, func(v *mixed) [extsort.MaxInts]int64 {
	return [extsort.MaxInts]int64{int64(v.u), v.i, extsort.Bool(v.flag)}
}, func(v *mixed, a [extsort.MaxInts]int64) {
	v.u, v.i, v.flag = uint64(a[0]), a[1], a[2] == 1
})

func TestIntsRecordsComeBackAsTheyWentWhateverTheirSignAndSize(t *testing.T) {
	for _, v := range []mixed{
		{},
		{u: 1, i: -1, flag: true},
		{u: math.MaxUint64, i: math.MinInt64},
		{u: 1 << 63, i: math.MaxInt64, flag: true},
	} {
		var got mixed
		if err := mixedCodec.Decode(mixedCodec.Append(nil, &v), &got); err != nil || got != v {
			t.Errorf("%+v came back as %+v (%v)", v, got, err)
		}
	}
}

func TestIntsRefusesBytesOfAnotherLength(t *testing.T) {
	b := mixedCodec.Append(nil, &mixed{u: 300, i: -300, flag: true})
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"cut short", b[:len(b)-1]},
		{"a byte too many", append(b[:len(b):len(b)], 0)},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got mixed
			if err := mixedCodec.Decode(tc.b, &got); !errors.Is(err, extsort.ErrBadRecord) {
				t.Errorf("err = %v, want ErrBadRecord", err)
			}
		})
	}
}
