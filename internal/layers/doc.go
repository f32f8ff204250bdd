// Package layers holds the tree's import rules as a test: the floors of
// ARCHITECTURE.md, each package importing only from floors below its own,
// and a read side (the store and everything that only reads it) that never
// links the BPF loader. It has no code; its test is the rule.
package layers
