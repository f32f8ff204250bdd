/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Page-cache adds, deletions and filemap faults of model files (and of
 * any file a traced process brings in), one record per folio or
 * coalesced into runs of contiguous folios.
 */

static __always_inline int page__emit(__u16 type, __u32 dev, __u64 ino, __u64 index, __u64 pfn, __u32 order)
{
	struct page_event *e;

	if (!file__is_kept(dev, ino))
		return 0;
	e = event__reserve(sizeof(*e), type);
	if (!e)
		return 0;
	e->ino = ino;
	e->index = index;
	e->pfn = pfn;
	e->dev = dev;
	e->order = order;
	ring__submit(e, type);
	return 0;
}

/* ---- page-cache runs ------------------------------------------------- */

/*
 * Page-cache adds and deletions come in long runs of contiguous folios
 * (readahead windows, reclaim batches): one EV_PAGE_RUN record stands for
 * a run, instead of one record per folio. A pending run lives in a slot
 * (RUN_WAYS per CPU; CPUs beyond RUN_CPUS share) and is extended
 * while the next folio continues it: same kind, file, thread and stamp,
 * the next index, or a later one in the run's window of IOCORR_RUN_PAGES
 * (a window records its pages in a bitmap).
 *
 * Order. Residency is replayed from these records, so an add and a delete
 * of one page must never trade places, yet a run may sit in a slot while
 * another CPU touches one of its pages. The kernel orders the two events
 * of a page: a folio is added locked and can be deleted only once its read
 * has finished and it was unlocked, long after the add tracepoint returned;
 * a deletion runs under the mapping's i_pages lock that a new add of the
 * page must take. So when an event on a page arrives, the event it must
 * follow is already written into whatever slot holds it. Each event
 * therefore first flushes any slot whose run overlaps its pages, then
 * takes its own timestamp: the flushed run is ahead of it in the ring and
 * in time. Slots are guarded by a lock word (cmpxchg): a run is written
 * to the ring while its slot is held, so a run seen by a later event is
 * either in the ring already or still in its slot.
 * The look costs a few loads per slot in use (RUN_WAYS per CPU) on every
 * event: nothing on a small machine, a scan of a few hundred slots on a
 * large one.
 *
 * Readahead triggers are told by thread and fault window in user space:
 * a thread's add run is flushed when the thread begins or ends a fault,
 * so a run lies wholly inside or outside each fault and reaches the ring
 * before the fault's own record.
 */
/* Per CPU, one slot for adds and RUN_WAYS - 1 for deletions: reclaim
 * takes folios in LRU order, which interleaves a few ascending streams
 * (the regions that two threads read), each of them a run. */
#define RUN_WAYS 4
#define RUN_CPUS 64
#define RUN_SLOTS (RUN_WAYS * RUN_CPUS)
#define RUN_SPIN 4096

/* Set at load time: runs (the default), one page_event per folio as the
 * kernel reports them, or both side by side in one ring, so that a test
 * checks the runs against the folios of the very same events; or none,
 * in the tiers without page-cache events (their programs are not
 * attached, and the fault and token paths must not scan run slots that
 * nothing fills). */
#define PAGES_RUNS 0
#define PAGES_FOLIOS 1
#define PAGES_BOTH 2
#define PAGES_NONE 3
const volatile __u32 page_records = PAGES_RUNS;

/* runs__kept says whether page-cache runs are recorded at all: a
 * constant at load time, so the verifier drops the flushes without them. */
static __always_inline bool runs__kept(void)
{
	return page_records == PAGES_RUNS || page_records == PAGES_BOTH;
}
/* Slots in use: RUN_WAYS per possible CPU, at most RUN_SLOTS. */
const volatile __u32 run_slots = RUN_SLOTS;

#define RUN_WORDS (IOCORR_RUN_PAGES / 64)

struct page_run {
	__u32 lock;
	__u16 kind; /* 0: empty, else EV_PAGE_ADD or EV_PAGE_DEL */
	__u8 phase;
	__u8 pad;
	__u32 tgid;
	__u32 tid;
	__u32 token;
	__u32 op;
	__u32 cpu;
	__u32 dev;
	__u32 nr_folios;
	__u32 nr_pages;
	__u32 span;
	__u64 ino;
	__u64 index;
	__u64 first_ts;
	__u64 last_ts;
	__u64 pages[RUN_WORDS]; /* as in struct page_run_event */
} __attribute__((aligned(64)));

struct page_run runs[RUN_SLOTS] = {};

static long run__spin(__u64 i, void *data)
{
	__u32 slot = *(__u32 *)data;

	if (slot >= RUN_SLOTS)
		return 1;
	return __sync_val_compare_and_swap(&runs[slot].lock, 0, 1) == 0;
}

/* run__lock takes slot i. The holder is a BPF program on another CPU that
 * keeps it for a ring reservation and a few stores, so the wait is short;
 * the bound only guards against the impossible. */
static __always_inline bool run__lock(__u32 slot)
{
	if (slot >= RUN_SLOTS)
		return false;
	if (__sync_val_compare_and_swap(&runs[slot].lock, 0, 1) == 0)
		return true;
	return bpf_loop(RUN_SPIN, run__spin, &slot, 0) < RUN_SPIN;
}

static __always_inline void run__unlock(struct page_run *r)
{
	__sync_lock_test_and_set(&r->lock, 0);
}

/* run__output puts slot r's run in the ring, with its slot held, and
 * empties the slot. The record ends after the bitmap words its span needs
 * (none for a run without holes): bpf_ringbuf_output takes a size known
 * only here, and writes the record in one go, in slot order. */
static __always_inline void run__output(struct page_run *r)
{
	struct page_run_event e;
	__u32 words = 0;

	if (!r->kind)
		return;
	e.hdr.ts = r->last_ts;
	e.hdr.tgid = r->tgid;
	e.hdr.tid = r->tid;
	e.hdr.token = r->token;
	e.hdr.op = r->op;
	e.hdr.type = EV_PAGE_RUN;
	e.hdr.phase = r->phase;
	e.hdr.pad0 = 0;
	e.hdr.cpu = r->cpu;
	e.ino = r->ino;
	e.index = r->index;
	e.first_ts = r->first_ts;
	e.dev = r->dev;
	e.kind = r->kind;
	e.pad = 0;
	e.nr_pages = r->nr_pages;
	e.span = r->span;
	e.nr_folios = r->nr_folios;
	e.pad2 = 0;
	if (r->nr_pages < r->span)
		words = (r->span + 63) / 64;
	if (words > RUN_WORDS)
		words = RUN_WORDS;
	for (int w = 0; w < RUN_WORDS; w++)
		e.pages[w] = w < words ? r->pages[w] : 0;
	if (bpf_ringbuf_output(&events, &e, offsetof(struct page_run_event, pages) + words * 8,
			       ring__wakeup_flags(EV_PAGE_RUN)))
		ring__lost(EV_PAGE_RUN);
	r->kind = 0;
}

/* Page runs a flush could not take from a slot held too long (see
 * run__flush_slot): recorded, but perhaps after a page event they came
 * before. One per-CPU counter. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} runs_unordered SEC(".maps");

static __always_inline void runs__count_unordered(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&runs_unordered, &zero);

	if (n)
		*n += 1;
}

enum run_match {
	RUN_ANY = 0,       /* every pending run */
	RUN_OVERLAP = 1,   /* runs of the file that hold one of the pages */
	RUN_TID_ADDS = 2,  /* add runs of the thread */
};

struct run_flush {
	__u64 ino;
	__u64 index;
	__u64 nr_pages;
	__u32 dev;
	__u32 tid;
	__u32 match;
	__u32 pad;
};

/* run__word_mask is the bits of word w that pages [lo, hi) of a window take. */
static __always_inline __u64 run__word_mask(int w, __u64 lo, __u64 hi)
{
	__u64 a = lo > (__u64)w * 64 ? lo : (__u64)w * 64;
	__u64 b = hi < (__u64)w * 64 + 64 ? hi : (__u64)w * 64 + 64;

	if (a >= b)
		return 0;
	if (b - a == 64)
		return ~0ULL;
	return ((1ULL << (b - a)) - 1) << (a - (__u64)w * 64);
}

/* run__holds says whether one of pages [index, index + n) is in run r. */
static __always_inline bool run__holds(struct page_run *r, __u64 index, __u64 n)
{
	__u64 lo, hi;

	if (index >= r->index + r->span || r->index >= index + n)
		return false;
	if (r->nr_pages >= r->span)
		return true;
	lo = index > r->index ? index - r->index : 0;
	hi = index + n - r->index;
	for (int w = 0; w < RUN_WORDS; w++)
		if (r->pages[w] & run__word_mask(w, lo, hi))
			return true;
	return false;
}

static __always_inline void run__set(struct page_run *r, __u64 lo, __u64 hi)
{
	for (int w = 0; w < RUN_WORDS; w++)
		r->pages[w] |= run__word_mask(w, lo, hi);
}

static __always_inline bool run__matches(struct page_run *r, struct run_flush *f)
{
	if (!r->kind)
		return false;
	switch (f->match) {
	case RUN_OVERLAP:
		return r->ino == f->ino && r->dev == f->dev && run__holds(r, f->index, f->nr_pages);
	case RUN_TID_ADDS:
		return r->kind == EV_PAGE_ADD && r->tid == f->tid;
	}
	return true;
}

static long run__flush_slot(__u64 i, void *data)
{
	struct run_flush *f = data;
	struct page_run *r;

	if (i >= run_slots || i >= RUN_SLOTS)
		return 1;
	r = &runs[i];
	/* An unlocked look first: a run that matters was written before this
	 * event began (see above), and most slots do not match. */
	if (!run__matches(r, f))
		return 0;
	if (!run__lock(i)) {
		/* Its holder kept the slot past the spin (seen on a 2-vCPU VM: the
		 * holder's vCPU descheduled by the host). The run is not lost —
		 * its holder outputs it later — but it may reach the ring after
		 * this event on the same pages: counted apart, not as lost. The
		 * store orders each chunk by time, which puts it back in place. */
		runs__count_unordered();
		return 0;
	}
	if (run__matches(r, f))
		run__output(r);
	run__unlock(r);
	return 0;
}

static __always_inline void runs__flush(struct run_flush *f)
{
	bpf_loop(RUN_SLOTS, run__flush_slot, f, 0);
}

/* runs__flush_thread_adds puts the thread's pending add runs in the ring: its
 * fault begins or ends (the fault programs call it). */
static __always_inline void runs__flush_thread_adds(__u32 tid)
{
	struct run_flush f = {.tid = tid, .match = RUN_TID_ADDS};

	if (runs__kept())
		runs__flush(&f);
}

/* runs__flush_every puts every pending run in the ring. */
static __always_inline void runs__flush_every(void)
{
	struct run_flush f = {.match = RUN_ANY};

	if (runs__kept())
		runs__flush(&f);
}

/* Exact residency snapshots (set at load time): the token start stops its
 * process (SIGSTOP, held by the ptrace warden where there is one) until
 * the recorder has read the models' residency and resumes it, so that the
 * snapshot is the page cache at the token's start, not some milliseconds
 * later. A disturbance of the traced run: off by default. */
const volatile bool stop_at_tokens = false;

/* The stops sent at token starts, by process: user space resumes a
 * process at its token's record only as often as it was stopped (a stop
 * not sent leaves nothing to resume). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} token_stops SEC(".maps");

/* token__stop stops the current process at its token's start, unless the
 * ring is half full: the token's record, written after this, is what
 * tells user space to resume it, and must not be lost. */
static __always_inline void token__stop(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 one = 1, *n;

	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) * 2 > bpf_ringbuf_query(&events, BPF_RB_RING_SIZE))
		return;
	n = bpf_map_lookup_elem(&token_stops, &tgid);
	if (!n) {
		if (bpf_map_update_elem(&token_stops, &tgid, &one, BPF_NOEXIST))
			return;
		n = bpf_map_lookup_elem(&token_stops, &tgid);
		if (!n)
			return;
	} else {
		__sync_fetch_and_add(n, 1);
	}
	if (!proc__stop())
		__sync_fetch_and_add(n, -1);
}

/* runs__flush_all is the page-cache side of a token's start (llama.bpf.h's
 * decode_begin calls it before the token's record): every pending run
 * goes into the ring, and, for exact snapshots, the process stops. */
static __always_inline void runs__flush_all(void)
{
	runs__flush_every();
	if (stop_at_tokens)
		token__stop();
}

/* What a folio must share with a run to extend it. */
struct run_key {
	__u64 ino;
	__u64 index;
	__u64 nr;
	__u32 dev;
	__u32 tid;
	__u32 token;
	__u32 op;
	__u16 kind;
	__u8 phase;
	__u8 pad[5];
};

/* run__extends says whether the folio extends run r: same kind, file,
 * thread and stamp, and it comes after the run, right after it while the
 * run has no hole, or anywhere in the run's window. */
static __always_inline bool run__extends(struct page_run *r, struct run_key *k)
{
	return r->kind == k->kind && r->ino == k->ino && r->dev == k->dev && r->tid == k->tid &&
	       r->token == k->token && r->phase == k->phase && r->op == k->op && k->index >= r->index + r->span &&
	       ((k->index == r->index + r->span && r->nr_pages == r->span) ||
		k->index + k->nr <= r->index + IOCORR_RUN_PAGES);
}

/* page__fallback records a folio as its own page_event when its run slot
 * stays held (its holder was preempted on this CPU): one record more,
 * never a folio lost. */
static __always_inline int page__fallback(__u16 kind, __u32 dev, __u64 ino, __u64 index, __u32 order)
{
	return page__emit(kind, dev, ino, index, 0, order);
}

static __always_inline int run__add_folio(__u16 kind, __u32 dev, __u64 ino, __u64 index, __u32 order)
{
	__u32 tgid, tid, cpu, slot, base, first, ways, victim, token, op;
	__u64 nr = 1ULL << (order & 31), ts, oldest;
	struct run_flush f = {.ino = ino, .index = index, .nr_pages = nr, .dev = dev, .match = RUN_OVERLAP};
	struct run_key k = {};
	struct event_hdr h;
	struct page_run *r;
	__u8 phase;

	runs__flush(&f);
	/* The run's stamp is that of any event of this thread, its time
	 * taken after the flushes: later than every run they wrote. */
	hdr__fill(&h, EV_PAGE_RUN);
	tgid = h.tgid;
	tid = h.tid;
	cpu = h.cpu;
	token = h.token;
	phase = h.phase;
	op = h.op;
	ts = h.ts;
	k.kind = kind;
	k.phase = phase;
	k.dev = dev;
	k.tid = tid;
	k.token = token;
	k.op = op;
	k.ino = ino;
	k.index = index;
	k.nr = nr;
	/* Adds and deletions keep apart runs: under a memory limit the
	 * thread that reads ahead also reclaims, between two of its adds. */
	base = (cpu & (RUN_CPUS - 1)) * RUN_WAYS;
	first = kind == EV_PAGE_ADD ? 0 : 1;
	ways = kind == EV_PAGE_ADD ? 1 : RUN_WAYS - 1;
	for (int w = 0; w < RUN_WAYS - 1; w++) {
		if (w >= ways)
			break;
		slot = (base + first + w) & (RUN_SLOTS - 1);
		r = &runs[slot];
		if (!run__extends(r, &k))
			continue;
		if (!run__lock(slot))
			return page__fallback(kind, dev, ino, index, order);
		if (run__extends(r, &k)) {
			run__set(r, index - r->index, index - r->index + nr);
			r->span = index + nr - r->index;
			r->nr_pages += nr;
			r->nr_folios += 1;
			r->last_ts = ts;
			run__unlock(r);
			return 0;
		}
		run__unlock(r);
	}
	/* No run takes the folio: it starts one in an empty way, or in
	 * place of the way's oldest run. */
	victim = base + first;
	oldest = ~0ULL;
	for (int w = 0; w < RUN_WAYS - 1; w++) {
		if (w >= ways)
			break;
		slot = (base + first + w) & (RUN_SLOTS - 1);
		r = &runs[slot];
		if (!r->kind) {
			victim = slot;
			break;
		}
		if (r->last_ts < oldest) {
			oldest = r->last_ts;
			victim = slot;
		}
	}
	slot = victim & (RUN_SLOTS - 1);
	r = &runs[slot];
	if (!run__lock(slot))
		return page__fallback(kind, dev, ino, index, order);
	run__output(r);
	r->kind = kind;
	r->phase = phase;
	r->tgid = tgid;
	r->tid = tid;
	r->token = token;
	r->op = op;
	r->cpu = cpu;
	r->dev = dev;
	r->nr_folios = 1;
	r->nr_pages = nr;
	r->span = nr;
	r->ino = ino;
	r->index = index;
	r->first_ts = ts;
	r->last_ts = ts;
	for (int w = 0; w < RUN_WORDS; w++)
		r->pages[w] = run__word_mask(w, 0, nr);
	run__unlock(r);
	return 0;
}

static __always_inline int folio__record(__u16 kind, __u32 dev, __u64 ino, __u64 index, __u64 pfn, __u32 order)
{
	if (page_records != PAGES_RUNS) {
		page__emit(kind, dev, ino, index, pfn, order);
		if (page_records == PAGES_FOLIOS)
			return 0;
	}
	/* The cheap test first: most page-cache events are of other files. */
	if (!file__is_kept(dev, ino))
		return 0;
	return run__add_folio(kind, dev, ino, index, order);
}

/* User space runs this (BPF_PROG_TEST_RUN) when it stops recording, so
 * that the runs still pending reach the ring. */
SEC("raw_tp")
int flush_page_runs(void *ctx)
{
	runs__flush_every();
	return 0;
}

/* The classic tracepoints are used for the page cache because their
 * records carry folio_order() as the kernel computed it; recomputing it
 * from struct folio in BPF depends on folio flag layouts that change. */
SEC("tracepoint/filemap/mm_filemap_add_to_page_cache")
int page_add(struct trace_event_raw_mm_filemap_op_page_cache *ctx)
{
	return folio__record(EV_PAGE_ADD, ctx->s_dev, ctx->i_ino, ctx->index, ctx->pfn, ctx->order);
}

SEC("tracepoint/filemap/mm_filemap_delete_from_page_cache")
int page_del(struct trace_event_raw_mm_filemap_op_page_cache *ctx)
{
	return folio__record(EV_PAGE_DEL, ctx->s_dev, ctx->i_ino, ctx->index, ctx->pfn, ctx->order);
}

/* Filemap faults of traced processes are only counted (user space never
 * attributed them: the fault's own record has its page): one per-CPU
 * counter, instead of a ring record per fault. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} filemap_faults SEC(".maps");

SEC("tracepoint/filemap/mm_filemap_fault")
int filemap_fault(struct trace_event_raw_mm_filemap_fault *ctx)
{
	__u32 zero = 0;
	__u64 *n;

	if (!proc__is_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	n = bpf_map_lookup_elem(&filemap_faults, &zero);
	if (n)
		*n += 1;
	return 0;
}
