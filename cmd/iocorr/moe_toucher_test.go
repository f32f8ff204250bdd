package main

import "github.com/iocorr/iocorr/internal/rectest"

// moePlan is rectest.MoEPlan's decode picks, as the capability matrix
// reads them.
type moePlan struct{ decode [][][]int }

func skewedPlan(layers, experts, used, tokens int, seed uint64) moePlan {
	return moePlan{decode: rectest.SkewedPlan(layers, experts, used, tokens, seed).Decode}
}
