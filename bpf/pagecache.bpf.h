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
 * of the CPU its folios came on (RUN_WAYS per CPU) and is extended while
 * the next folio continues it: same kind, file, thread and stamp, the next
 * index, or a later one in the run's window of IOCORR_RUN_PAGES (a window
 * records its pages in a bitmap).
 *
 * Order. Residency is replayed from these records, so an add and a delete
 * of one page must never trade places, yet a run may sit in a slot while
 * another CPU touches one of its pages. The kernel orders the two events
 * of a page: a folio is added locked and can be deleted only once its read
 * has finished and it was unlocked, long after the add tracepoint returned;
 * a deletion runs under the mapping's i_pages lock that a new add of the
 * page must take. So when an event on a page arrives, the event it must
 * follow is already published in whatever slot holds it. Each event
 * therefore first flushes any slot whose run overlaps its pages, then
 * takes its own timestamp: the flushed run is ahead of it in the ring and
 * in time.
 *
 * No lock. A slot is written only by the page-cache tracepoints of its own
 * CPU, which run with preemption off and one at a time (the kernel runs no
 * tracing program inside another on a CPU): one writer, never preempted
 * halfway. It keeps two copies of the run and a state word (a sequence
 * number, which copy is current, whether it is full); it writes the other
 * copy and publishes it with one compare-and-swap of the state. Anyone may
 * take a slot's run out (a flush: another CPU's event on its pages, a
 * fault, a token start, user space at the end): reserve the record in the
 * ring, copy the current run into it, then compare-and-swap the state from
 * the one it read to empty. The swap fails only if the writer published
 * in between (or another flush took the run): the reservation is
 * discarded and the flush reads the slot again. So a run leaves a slot
 * only by a swap made while its record was already reserved — ring
 * records are read in reservation order — and anyone who finds the slot
 * empty afterwards reserves behind it: a run seen by a later event is in
 * the ring ahead of it, or still in its slot. Nobody waits for anyone, and
 * a program preempted halfway (the token's uprobe, user space's flush)
 * holds nothing.
 *
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
 * (the regions that two threads read), each of them a run. CPUs from
 * RUN_CPUS on have no slots: their folios are recorded one by one. */
#define RUN_WAYS 4
#define RUN_CPUS 256
#define RUN_SLOTS (RUN_WAYS * RUN_CPUS)
/* How often a flush reads a slot again after its writer published: the
 * writer publishes once per folio, a flush copies ~150 bytes, so a second
 * try is already rare. */
#define RUN_TRIES 8

/* runs__kept says whether page-cache runs are recorded at all: a
 * constant at load time, so the verifier drops the flushes without them. */
static __always_inline bool runs__kept(void)
{
	return cfg.page_records == PAGES_RUNS || cfg.page_records == PAGES_BOTH;
}
#define RUN_WORDS (IOCORR_RUN_PAGES / 64)


/* The state word of a slot: bit 0 full, bit 1 the current copy, the rest
 * a sequence number that every change advances (so that a swap from a
 * state read earlier fails after any change, ABA included). */
#define RUN_FULL 1ULL
#define RUN_COPY 2ULL
#define RUN_SEQ 4ULL

/* A slot's run is kept as the record it becomes (hdr.ts: its last
 * folio), so that taking it out is one copy. */
struct run_slot {
	__u64 state;
	struct page_run_event copy[2];
} __attribute__((aligned(64)));

struct run_slot runs[RUN_SLOTS] = {};

static __always_inline struct page_run_event *slot__run(struct run_slot *s, __u64 st)
{
	return &s->copy[(st >> 1) & 1];
}

static __always_inline struct page_run_event *slot__spare(struct run_slot *s, __u64 st)
{
	return &s->copy[((st >> 1) & 1) ^ 1];
}

/* The state that publishes the spare copy as the full current one. */
static __always_inline __u64 state__publish(__u64 st)
{
	return ((st & ~(RUN_FULL | RUN_COPY)) + RUN_SEQ) | ((st & RUN_COPY) ^ RUN_COPY) | RUN_FULL;
}

/* The state after the current run was taken out. */
static __always_inline __u64 state__empty(__u64 st)
{
	return ((st & ~RUN_FULL) + RUN_SEQ);
}

/* run__event copies run r into record e and returns the record's size:
 * it ends after the bitmap words its span needs (none for a run without
 * holes). */
static __always_inline __u32 run__event(struct page_run_event *r, struct page_run_event *e)
{
	__u32 words = 0;

	*e = *r;
	if (e->nr_pages < e->span)
		words = (e->span + 63) / 64;
	if (words > RUN_WORDS)
		words = RUN_WORDS;
	return offsetof(struct page_run_event, pages) + words * 8;
}

/* run__take puts the run of slot s in state st in the ring, if st is
 * still its state once the record is reserved and written: true when
 * the run was taken out (or lost to a full ring, and counted), false when
 * the slot changed meanwhile (nothing was written). to is the state the
 * slot goes to. */
static __always_inline bool run__take(struct run_slot *s, __u64 st, __u64 to)
{
	struct page_run_event e;
	struct bpf_dynptr ptr;
	__u32 size;

	size = run__event(slot__run(s, st), &e);
	if (size > sizeof(e))
		size = sizeof(e);
	if (bpf_ringbuf_reserve_dynptr(&events, size, 0, &ptr)) {
		bpf_ringbuf_discard_dynptr(&ptr, 0);
		/* No room: the run is lost, counted, and leaves its slot all the
		 * same (or the slot changed, and it was not this flush's). */
		if (__sync_val_compare_and_swap(&s->state, st, to) != st)
			return false;
		ring__lost(EV_PAGE_RUN);
		return true;
	}
	if (__sync_val_compare_and_swap(&s->state, st, to) != st) {
		bpf_ringbuf_discard_dynptr(&ptr, 0);
		return false;
	}
	bpf_dynptr_write(&ptr, 0, &e, size, 0);
	bpf_ringbuf_submit_dynptr(&ptr, ring__wakeup_flags(EV_PAGE_RUN));
	return true;
}

/* Page runs a flush could not take from a slot whose writer kept
 * publishing past RUN_TRIES reads: recorded, but perhaps after a page
 * event they came before. One per-CPU counter. */
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
static __always_inline bool run__holds(struct page_run_event *r, __u64 index, __u64 n)
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

static __always_inline void run__set(struct page_run_event *r, __u64 lo, __u64 hi)
{
	for (int w = 0; w < RUN_WORDS; w++)
		r->pages[w] |= run__word_mask(w, lo, hi);
}

static __always_inline bool run__matches(struct page_run_event *r, struct run_flush *f)
{
	switch (f->match) {
	case RUN_OVERLAP:
		return r->ino == f->ino && r->dev == f->dev && run__holds(r, f->index, f->nr_pages);
	case RUN_TID_ADDS:
		return r->kind == EV_PAGE_ADD && r->hdr.tid == f->tid;
	}
	return true;
}

static long run__flush_slot(__u64 i, void *data)
{
	struct run_flush *f = data;
	struct run_slot *s;
	__u64 st;

	if (i >= cfg.run_slots || i >= RUN_SLOTS)
		return 1;
	s = &runs[i];
	for (int t = 0; t < RUN_TRIES; t++) {
		/* A plain look first: a run that matters was published before
		 * this event began (see above), and most slots do not match. */
		st = *(volatile __u64 *)&s->state;
		if (!(st & RUN_FULL))
			return 0;
		if (!run__matches(slot__run(s, st), f)) {
			/* The copy read is the current one only if the state did
			 * not move meanwhile (its writer may since have written it
			 * again): a look at a moving slot is made again. */
			if (*(volatile __u64 *)&s->state == st)
				return 0;
			continue;
		}
		/* An atomic read (a full barrier, also on arm64) before the copy
		 * is read for the record. */
		st = __sync_fetch_and_add(&s->state, 0);
		if (!(st & RUN_FULL))
			return 0;
		if (run__take(s, st, state__empty(st)))
			return 0;
	}
	/* Its writer published past every try: the run stays in its slot and
	 * reaches the ring later, perhaps after this event on the same pages:
	 * counted apart, not as lost. The store orders each chunk by time,
	 * which puts it back in place. */
	runs__count_unordered();
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

/* The stops sent at token starts, by process: how many, and the token
 * of the last. User space resumes a process at its token's record only if
 * that token's start stopped it (a stop not sent leaves nothing to
 * resume, and its snapshot is not exact). */
struct token_stop {
	__u64 stops;
	__u32 token;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct token_stop);
} token_stops SEC(".maps");

/* token__stop stops the current process at the start of its next token,
 * unless the ring is half full: the token's record, written after this, is
 * what tells user space to resume it, and must not be lost. */
static __always_inline void token__stop(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct token_stop zero = {}, *n;
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);

	if (!ps)
		return;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) * 2 > bpf_ringbuf_query(&events, BPF_RB_RING_SIZE))
		return;
	n = bpf_map_lookup_elem(&token_stops, &tgid);
	if (!n) {
		bpf_map_update_elem(&token_stops, &tgid, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&token_stops, &tgid);
		if (!n)
			return;
	}
	if (!proc__stop())
		return;
	n->token = ps->token + 1;
	__sync_fetch_and_add(&n->stops, 1);
}

/* runs__flush_all is the page-cache side of a token's start (llama.bpf.h's
 * decode_begin calls it before the token's record): every pending run
 * goes into the ring, and, for exact snapshots, the process stops. */
static __always_inline void runs__flush_all(void)
{
	runs__flush_every();
	if (cfg.stop_at_tokens)
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
static __always_inline bool run__extends(struct page_run_event *r, struct run_key *k)
{
	return r->kind == k->kind && r->ino == k->ino && r->dev == k->dev && r->hdr.tid == k->tid &&
	       r->hdr.token == k->token && r->hdr.phase == k->phase && r->hdr.op == k->op && k->index >= r->index + r->span &&
	       ((k->index == r->index + r->span && r->nr_pages == r->span) ||
		k->index + k->nr <= r->index + IOCORR_RUN_PAGES);
}

/* run__start writes a run of the one folio of key k into r. */
static __always_inline void run__start(struct page_run_event *r, struct run_key *k, struct event_hdr *h)
{
	r->hdr = *h;
	r->ino = k->ino;
	r->index = k->index;
	r->first_ts = h->ts;
	r->dev = k->dev;
	r->kind = k->kind;
	r->pad = 0;
	r->nr_pages = k->nr;
	r->span = k->nr;
	r->nr_folios = 1;
	r->pad2 = 0;
	for (int w = 0; w < RUN_WORDS; w++)
		r->pages[w] = run__word_mask(w, 0, k->nr);
}

/* run__replace_cb takes the full run of a way out as the new run in its
 * spare copy replaces it (run__take to the published state). A bpf_loop
 * callback of one iteration, not inlined in run__add_folio: the record it
 * builds on its stack would otherwise sit in the program's own frame,
 * whose stack a verifier before 6.2 or so counts together with that of
 * the flush's callback (6.1 refused page_add at 544 bytes, page_del at
 * 576, over its 512). */
struct run_replace {
	__u64 st;
	__u32 slot;
	__u32 taken;
};

static long run__replace_cb(__u64 i, void *data)
{
	struct run_replace *rp = data;

	rp->taken = run__take(&runs[rp->slot & (RUN_SLOTS - 1)], rp->st, state__publish(rp->st));
	return 1;
}

static __always_inline int run__add_folio(__u16 kind, __u32 dev, __u64 ino, __u64 index, __u32 order)
{
	__u32 cpu, slot, base, first, ways, victim;
	__u64 nr = 1ULL << (order & 31), oldest, st;
	struct run_flush f = {.ino = ino, .index = index, .nr_pages = nr, .dev = dev, .match = RUN_OVERLAP};
	struct run_key k = {};
	struct event_hdr h;
	struct page_run_event *r, *n;
	struct run_slot *s;

	runs__flush(&f);
	/* The run's stamp is that of any event of this thread, its time
	 * taken after the flushes: later than every run they wrote. */
	hdr__fill(&h, EV_PAGE_RUN);
	cpu = h.cpu;
	k.kind = kind;
	k.phase = h.phase;
	k.dev = dev;
	k.tid = h.tid;
	k.token = h.token;
	k.op = h.op;
	k.ino = ino;
	k.index = index;
	k.nr = nr;
	/* CPUs without slots of their own record their folios one by one:
	 * slots shared by two CPUs would have two writers. */
	if (cpu >= RUN_CPUS || cpu * RUN_WAYS >= cfg.run_slots)
		return page__emit(kind, dev, ino, index, 0, order);
	/* Adds and deletions keep apart runs: under a memory limit the
	 * thread that reads ahead also reclaims, between two of its adds. */
	base = cpu * RUN_WAYS;
	first = kind == EV_PAGE_ADD ? 0 : 1;
	ways = kind == EV_PAGE_ADD ? 1 : RUN_WAYS - 1;
	/* This program is the slots' only writer (see above): what it reads
	 * of them stays, but for a flush emptying one. */
	for (int w = 0; w < RUN_WAYS - 1; w++) {
		if (w >= ways)
			break;
		slot = (base + first + w) & (RUN_SLOTS - 1);
		s = &runs[slot];
		st = *(volatile __u64 *)&s->state;
		if (!(st & RUN_FULL))
			continue;
		r = slot__run(s, st);
		if (!run__extends(r, &k))
			continue;
		n = slot__spare(s, st);
		*n = *r;
		run__set(n, index - n->index, index - n->index + nr);
		n->span = index + nr - n->index;
		n->nr_pages += nr;
		n->nr_folios += 1;
		n->hdr.ts = h.ts;
		if (__sync_val_compare_and_swap(&s->state, st, state__publish(st)) == st)
			return 0;
		/* A flush took the run out meanwhile: the folio starts a new
		 * one in this slot, now empty. */
		victim = slot;
		goto start;
	}
	/* No run takes the folio: it starts one in an empty way, or in
	 * place of the way's oldest run. */
	victim = base + first;
	oldest = ~0ULL;
	for (int w = 0; w < RUN_WAYS - 1; w++) {
		if (w >= ways)
			break;
		slot = (base + first + w) & (RUN_SLOTS - 1);
		s = &runs[slot];
		st = *(volatile __u64 *)&s->state;
		if (!(st & RUN_FULL)) {
			victim = slot;
			break;
		}
		r = slot__run(s, st);
		if (r->hdr.ts < oldest) {
			oldest = r->hdr.ts;
			victim = slot;
		}
	}
start:
	s = &runs[victim & (RUN_SLOTS - 1)];
	st = *(volatile __u64 *)&s->state;
	run__start(slot__spare(s, st), &k, &h);
	/* The run in the way goes to the ring as the new one replaces it, in
	 * one swap; a flush that took it out first leaves the way empty. */
	if (st & RUN_FULL) {
		struct run_replace rp = {.st = st, .slot = victim};

		bpf_loop(1, run__replace_cb, &rp, 0);
		if (rp.taken)
			return 0;
	}
	st = *(volatile __u64 *)&s->state;
	if (__sync_val_compare_and_swap(&s->state, st, state__publish(st)) != st)
		/* Impossible: only this program fills an empty way. */
		ring__lost(EV_PAGE_RUN);
	return 0;
}

static __always_inline int folio__record(__u16 kind, __u32 dev, __u64 ino, __u64 index, __u64 pfn, __u32 order)
{
	if (cfg.page_records != PAGES_RUNS) {
		page__emit(kind, dev, ino, index, pfn, order);
		if (cfg.page_records == PAGES_FOLIOS)
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
