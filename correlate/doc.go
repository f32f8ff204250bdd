// Package correlate attributes decoded BPF events to the model tensors,
// tokens, phases and ops that caused them. It sits between ingest (which
// decodes spool records) and index (which stores the result): it reads
// records in spool order, emits one attributed Event per (event, tensor
// slice), and keeps per-run aggregates in memory.
//
// # Attribution rules
//
// Tensors. Every model file of the run metadata (rundir.Meta.Models) gets
// an offset index built from its tensor table (rundir.Tensor: absolute
// offset, size, expert count and stride). The table, not the model file,
// is the source of truth: the file may be gone or changed by the time the
// run is ingested, while the table is what the recording saw. A file range
// is cut at tensor and expert boundaries; bytes of a model file outside
// every tensor (header, alignment padding) go to the pseudo tensor
// "[model header]". Pseudo tensors "[other file]" and "[anonymous]" keep
// what happened outside model files, so totals always add up.
//
// Faults (EV_FAULT). The kernel resolved (dev, ino, file_off) when the
// address lay in a file mapping. A model file's offset maps to one tensor
// and, for *_exps tensors, one expert. Ino 0 is "[anonymous]", any other
// file "[other file]". The stall is ts − start_ts (0 when start_ts is
// unknown). Class 0 minor, 1 major, 2 unaccounted are counted apart.
//
// Page cache (EV_PAGE_ADD / EV_PAGE_DEL). The folio covers pages
// [index, index + 1<<order); its byte range is split over every tensor
// slice it covers, each slice charged its own bytes (a 16 KiB folio
// straddling two tensors charges, say, 12 KiB to one and 4 KiB to the
// other). Page counts per token are kept whole, from the folio.
//
// Block requests (EV_BLOCK). Requests on the whole disk of a model file
// (Block.DiskDev) are converted to partition bytes, sector*512 −
// PartStartSector*512, looked up in the file's FIEMAP extents, and the
// resulting file ranges split over tensors like a folio. A request that
// spans two extents is cut at the extent boundary. Reads are charged as
// bytes read; bytes on the device that belong to no extent of a model file,
// and requests on other disks, are "[other file]". Writes are kept as
// events (class 1) and never charged as bytes read.
//
// Readahead. Pages that the kernel adds while a thread is inside a fault
// (same tid, add ts within the fault's [start_ts, ts]) are charged twice:
// as landed bytes to the tensor they belong to, and as trigger bytes to the
// tensor whose fault caused the read. Because the fault's record is
// written at completion, after the adds, the adds of each thread are held
// back until that thread's next non-page-cache record (normally the fault
// completion) and then emitted with their trigger. Adds of threads that
// never fault (kworkers doing async readahead) have no trigger.
//
// Token, phase, op. hdr.token and hdr.phase are stamped in the kernel and
// used as is. With op probes, hdr.op is the sequence number of the
// thread's current op; the EV_OP record with that sequence names it. With
// graph probes only, the graph node that consumes a weight (EV_NODE) names
// the op of every event on that weight: Event.Op stays 0 and the
// consumer's op is applied where events are read (Result.OpOf).
//
// Weights not backed by a file: an EV_NODE whose weight name is a tensor
// of a model but whose data lies in no file (ino 0: the weight was copied
// to anonymous or device memory) marks that tensor as not file-backed; it
// is reported, never dropped.
package correlate
