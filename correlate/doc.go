// Package correlate attributes decoded BPF events to the model tensors,
// experts, tokens, phases and ops that caused them. It sits between ingest
// (which decodes spool records) and store (which keeps the result): it
// reads records in spool order, emits one attributed Event per (event,
// tensor slice) to a Sink, and keeps per-run aggregates: in memory until
// Finish returns them, or, for a sink that is also an AggSink (the store's
// writer), only for the newest tokens, handing each older token's rows
// over as the spool moves on, so that a run's length does not set the
// ingest's memory; a late record of a token already handed over is
// handed over too, and the sink sums it in. The slices of one record share its request id
// (Event.Req), so that readers put a block request or read call back
// together without guessing. A sink that is also an event.MarkSink gets the
// run's timeline as well (threads, commands, decode calls, graphs, ops,
// scheduler switches and wakeups): what the Perfetto trace draws besides
// I/O, read from the store and never again from the spool.
//
// NewRun(dir, sink) + AddSpool + Finish attribute a whole run directory
// (package pipeline drives them into the store);
// New + Add work record by record (tests, other front ends).
//
// # Attribution rules
//
// Tensors. Every model file of the run metadata (rundir.Meta.Models) gets
// an offset index built from its tensor table (rundir.Tensor: absolute
// offset, size, expert count and stride), which record copies from the
// gguf package's parse; the index is gguf's own (gguf.NewOffsetIndex, the
// one behind File.Lookup), over tensor ids. The table, not the model file, is the source of
// truth: the file may be gone or changed by the time the run is ingested.
// A file range is cut at tensor and expert boundaries; bytes of a model
// file outside every tensor (header, alignment padding, past the end) go
// to the pseudo tensor "[model header]". Pseudo tensors "[other file]" and
// "[anonymous]" keep what happened outside model files, so totals always
// add up to what was recorded.
//
// Faults (EV_FAULT). The kernel resolves (dev, ino, file_off) from the VMA
// when the fault begins. A fault it did not try to resolve (start_ts 0: a
// fault taken in kernel mode on a user address, such as copy_to_user,
// fires no page_fault_user) is looked up in the process's mappings: the
// mmap and munmap calls seen in the stream (EV_MMAP, EV_MUNMAP: exact in
// time; an unmapped range is a hole) and the /proc/PID/maps snapshots
// (which also hold what was mapped before tracing began, such as the
// executable); the newer of the two that covers the address at the fault's
// time wins. A fault the kernel resolved to no file
// stays "[anonymous]": a file mapped there before may have been unmapped
// since, and the kernel saw the VMA of the moment. A model file's offset
// maps to one tensor and, for *_exps tensors, one expert; any other file
// is "[other file]". Faults counts completed faults, Major + Minor; a
// fault that began but was never completed (class unaccounted, reported at
// the thread's next fault or exit) is counted apart and has no stall, as
// its end is not its completion. The stall is ts − start_ts.
//
// Page cache (EV_PAGE_RUN; EV_PAGE_ADD / EV_PAGE_DEL when recorded per
// folio). A run covers pages [index, index + nr_pages), a folio
// [index, index + 1<<order); either byte range is split over every tensor
// slice it covers, each slice charged its own bytes (a 16 KiB folio
// straddling two tensors charges, say, 12 KiB to one and 4 KiB to the
// other). Page counts are charged to the tensor holding each page's first
// byte, so per-tensor pages add up to the folio's even where GGUF's 32-byte
// alignment puts a tensor boundary inside a page. A run is charged as its
// folios would be, one by one: the kernel coalesces only folios of one
// thread and one token, phase and op stamp, so per-tensor, per-expert and
// per-token sums are the same (TestPageRunsChargeWhatFoliosCharge).
//
// Block requests (EV_BLOCK). A request on a disk (dev, sector from the
// start of the whole disk) is checked against every model on that disk
// (Block.DiskDev, else Block.Dev): disk bytes minus the model's partition
// start (PartStartSector × 512) are looked up in its FIEMAP extents, and
// each piece that lies in an extent becomes a file range split over
// tensors like a folio. A request spanning two extents, or two models, is
// cut at the boundary. Extents without a physical location (unknown,
// delayed allocation, encoded, inline) are skipped. Bytes in no model's
// extent, and requests on other disks, are "[other file]", at the
// request's disk byte. Reads (REQ_OP 0) are charged as bytes read to every
// slice, and as one request to the slice holding their first byte (so
// that requests add up over any grouping, as pages added do); writes,
// flushes and discards are kept as events (class 1) and never charged as
// reads.
//
// Readahead. Pages that the kernel adds while a thread is inside a fault
// (same tid, add ts within the fault's [start_ts, ts]; for a run, from its
// first_ts to its ts, as the kernel cuts a thread's runs when its faults
// begin and end) are charged twice:
// as landed bytes to the tensor they belong to, and as trigger bytes to the
// tensor (and expert) whose fault caused the read, at the fault's token and
// op. Because the fault's record is written at completion, after the adds,
// the adds of each thread are held back until that thread's next record
// that is not part of a fault in progress (page-cache adds and deletes —
// direct reclaim runs in the faulting thread —, filemap faults, readahead
// and block completions, which may run in any context) and then emitted
// with their trigger. Adds of threads that never fault (kworkers doing
// async readahead, read() syscalls) have no trigger.
//
// Token, phase, op. hdr.token and hdr.phase are stamped in the kernel and
// used as is; EV_DECODE_BEGIN/END give each token its n_tokens, start and
// duration. With op probes, hdr.op is the sequence number of the thread's
// current op; the EV_OP record with that sequence names it (through the
// target's ggml_op names in Meta.OpNames). Without op probes, or for an
// event whose thread ran no probed op, the graph node that consumes a
// weight (the first EV_NODE naming it) names the op of every event on that
// weight: Event.Op stays 0 and the consumer's op is applied where events
// are read (Result.OpOf, store.Store.OpOf), because graph nodes are only
// seen after the loading faults.
//
// Experts. EV_EXPERTS carry the router's picks of a token's MoE layer (the
// layer is the -N suffix of the node name). Each pick is counted once per
// (token, layer): if the ids were reported by more than one node of a
// layer, only the first node name's reports count.
//
// Weights not backed by a file: an EV_NODE whose weight name is a tensor
// of a model but whose data lies in no file (ino 0: the weight was copied
// to anonymous or device memory) marks that tensor as not file-backed; it
// is reported (Result.NotBacked), never dropped.
package correlate
