/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Readahead windows of model files (and of any file a traced process
 * reads ahead): the four readahead tracepoints, one record each.
 */

static __always_inline int ra__emit(__u32 kind, __u32 dev, __u64 ino, __u64 index, __u64 nr, __u32 async_size,
				    __u32 ra_pages, __u32 mmap_miss, __u32 order)
{
	struct ra_event *e;

	if (!file__is_kept(dev, ino))
		return 0;
	e = event__reserve(sizeof(*e), EV_READAHEAD);
	if (!e)
		return 0;
	e->ino = ino;
	e->index = index;
	e->nr_pages = nr;
	e->dev = dev;
	e->kind = kind;
	e->async_size = async_size;
	e->ra_pages = ra_pages;
	e->mmap_miss = mmap_miss;
	e->order = order;
	ring__submit(e, EV_READAHEAD);
	return 0;
}

SEC("tracepoint/readahead/page_cache_sync_ra")
int ra_sync(struct trace_event_raw_page_cache_ra_op *ctx)
{
	return ra__emit(RA_SYNC, ctx->s_dev, ctx->i_ino, ctx->index, ctx->size, ctx->async_size, ctx->ra_pages,
			ctx->mmap_miss, ctx->order);
}

SEC("tracepoint/readahead/page_cache_async_ra")
int ra_async(struct trace_event_raw_page_cache_ra_op *ctx)
{
	return ra__emit(RA_ASYNC, ctx->s_dev, ctx->i_ino, ctx->index, ctx->size, ctx->async_size, ctx->ra_pages,
			ctx->mmap_miss, ctx->order);
}

SEC("tracepoint/readahead/page_cache_ra_unbounded")
int ra_unbounded(struct trace_event_raw_page_cache_ra_unbounded *ctx)
{
	return ra__emit(RA_UNBOUNDED, ctx->s_dev, ctx->i_ino, ctx->index, ctx->nr_to_read, ctx->lookahead_size, 0, 0,
			0);
}

SEC("tracepoint/readahead/page_cache_ra_order")
int ra_order(struct trace_event_raw_page_cache_ra_order *ctx)
{
	return ra__emit(RA_ORDER, ctx->s_dev, ctx->i_ino, ctx->index, ctx->size, ctx->async_size, ctx->ra_pages, 0,
			ctx->order);
}
