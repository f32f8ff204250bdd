// Package gguf reads and writes GGUF model files (versions 2 and 3) and
// maps file offsets back to the tensors that live there.
//
// iocorr sees disk I/O as (file, byte offset) pairs coming from the
// kernel; this package is what turns such a pair into "layer 5, attn_q"
// or "expert 3 of blk.7.ffn_up_exps". It therefore cares about exact byte
// ranges, never about tensor contents: parsing reads only the header
// (metadata and tensor infos), never the tensor data, so opening a 100 GB
// model costs a few buffered reads.
//
// Model files come from the internet and are treated as hostile: every
// count and length is checked against the bytes that remain in the file
// before anything is allocated, and malformed input yields an *Error that
// names what is wrong and where, never a panic.
//
// File lookups (File.Lookup, File.AppendSlices) run on the ingest's hot
// path at millions of events per second; they do not allocate. A File
// is never modified after parsing, so lookups may run concurrently.
package gguf
