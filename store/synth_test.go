package store_test

import (
	"testing"

	"github.com/iocorr/iocorr/testkit/storetest"
)

// The index tests' synthetic run is storetest's, under short names.
const (
	synLayers = storetest.SynLayers
	synExps   = storetest.SynExperts
)

type synthShape = storetest.SynthShape

type synthTotals struct {
	faults, major, readBytes, added, evicted uint64
}

func writeSynthRun(tb testing.TB, dir string, n, tokens int) synthTotals {
	tb.Helper()
	return writeSynthRunShape(tb, dir, n, tokens, storetest.SmallShape)
}

func writeSynthRunShape(tb testing.TB, dir string, n, tokens int, sh synthShape) synthTotals {
	tb.Helper()
	t := storetest.WriteSynthRun(tb, dir, n, tokens, sh)
	return synthTotals{t.Faults, t.Major, t.ReadBytes, t.Added, t.Evicted}
}
