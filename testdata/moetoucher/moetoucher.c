/*
 * moetoucher: ground truth for the MoE figures of iocorr stats. It plays
 * a scripted router: for each token it calls llama_decode, and inside it,
 * for each MoE layer, ggml_compute_forward_get_rows on a node named
 * "ffn_moe_weights-<layer>" whose src[1] holds the picked expert ids — the
 * probe points and data iocorr reads from llama.cpp — and then reads every
 * page of the picked experts' slices of the layer's *_exps tensors from
 * the mmap'd model. Before a token's reads it asks mincore(2) whether each
 * picked expert's slices are wholly resident and prints that, so a test
 * knows the real hit of every pick without iocorr's page-cache replay.
 *
 *   moetoucher MODEL PLAN
 *
 * PLAN, one directive per line:
 *   slice LAYER OFFSET STRIDE       an *_exps tensor of LAYER: expert e is
 *                                   [OFFSET + e*STRIDE, +STRIDE) in the file
 *   token N LAYER:E,E,... ...       one llama_decode of N tokens (N > 1 is
 *                                   a prefill batch: its picks are N rows)
 * Output, one line per pick of a token with N == 1:
 *   pick TOKEN LAYER EXPERT RESIDENT
 *
 * The fake ggml_tensor puts each field at the offset iocorr's built-in
 * layout (bpf/layout.go) uses for the ggml of 2026: this program has no
 * debug info, so iocorr uses that table, as for a stripped llama.cpp.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TENSOR_SIZE 336
#define OFF_TYPE 0
#define OFF_NE 16
#define OFF_NB 48
#define OFF_SRC 152
#define OFF_DATA 248
#define OFF_NAME 256
#define TYPE_I32 26

#define MAX_SLICES 256
#define MAX_LAYERS 64
#define MAX_USED 32
#define MAX_BATCH 64

struct compute_params {
	int32_t ith, nth;
	char pad[64];
};

/* llama_batch is passed by value (on the stack); iocorr reads n_tokens. */
struct llama_batch {
	int32_t n_tokens;
	void *token, *embd, *pos, *n_seq_id, *seq_id, *logits;
};

struct slice {
	int layer;
	long long off, stride;
};

static struct slice slices[MAX_SLICES];
static int nslices;
static unsigned char *base;
static long page;
static long long fsize;
static unsigned long long sum;

static int plan_layers[MAX_LAYERS];
static int plan_n[MAX_LAYERS];
static int32_t plan_ids[MAX_LAYERS][MAX_BATCH * MAX_USED];
static int plan_nlayers;
static int token_no;

static void die(const char *what)
{
	fprintf(stderr, "moetoucher: %s\n", what);
	exit(1);
}

static void put64(unsigned char *t, int off, uint64_t v) { memcpy(t + off, &v, 8); }

__attribute__((noinline, used)) void ggml_compute_forward_get_rows(struct compute_params *params, unsigned char *dst)
{
	/* The probe reads dst; keep the compiler from assuming it is unused. */
	__asm__ volatile("" : : "r"(params), "r"(dst) : "memory");
}

/* range_resident: is every page of [off, off+len) in the page cache? */
static int range_resident(long long off, long long len)
{
	long long first = off / page, last = (off + len + page - 1) / page;
	size_t n = last - first;
	unsigned char *vec = malloc(n);
	int all = 1;

	if (!vec || mincore(base + first * page, n * page, vec) != 0)
		die("mincore failed");
	for (size_t i = 0; i < n; i++)
		all &= vec[i] & 1;
	free(vec);
	return all;
}

static int expert_resident(int layer, int e)
{
	int all = 1;

	for (int s = 0; s < nslices; s++)
		if (slices[s].layer == layer)
			all &= range_resident(slices[s].off + e * slices[s].stride, slices[s].stride);
	return all;
}

static void read_expert(int layer, int e)
{
	for (int s = 0; s < nslices; s++) {
		if (slices[s].layer != layer)
			continue;
		long long lo = slices[s].off + e * slices[s].stride, hi = lo + slices[s].stride;
		for (long long p = lo / page * page; p < hi; p += page)
			sum += base[p < lo ? lo : p];
	}
}

__attribute__((noinline, used)) int llama_decode(void *ctx, struct llama_batch batch)
{
	static unsigned char node[TENSOR_SIZE], ids[TENSOR_SIZE];
	struct compute_params params = {.ith = 0, .nth = 1};
	int n = batch.n_tokens;

	token_no++;
	/* The real hit of each pick, before this token reads anything. */
	if (n == 1)
		for (int l = 0; l < plan_nlayers; l++)
			for (int j = 0; j < plan_n[l]; j++)
				printf("pick %d %d %d %d\n", token_no, plan_layers[l], plan_ids[l][j],
				       expert_resident(plan_layers[l], plan_ids[l][j]));
	for (int l = 0; l < plan_nlayers; l++) {
		memset(node, 0, sizeof(node));
		memset(ids, 0, sizeof(ids));
		snprintf((char *)node + OFF_NAME, 64, "ffn_moe_weights-%d", plan_layers[l]);
		put64(node, OFF_SRC + 8, (uint64_t)(uintptr_t)ids);
		uint32_t type = TYPE_I32;
		memcpy(ids + OFF_TYPE, &type, 4);
		put64(ids, OFF_NE, plan_n[l]);
		put64(ids, OFF_NE + 8, n);
		put64(ids, OFF_NB, 4);
		put64(ids, OFF_NB + 8, 4 * plan_n[l]);
		put64(ids, OFF_DATA, (uint64_t)(uintptr_t)plan_ids[l]);
		ggml_compute_forward_get_rows(&params, node);
		for (int j = 0; j < plan_n[l] && n == 1; j++)
			read_expert(plan_layers[l], plan_ids[l][j]);
	}
	__asm__ volatile("" : : "r"(ctx) : "memory");
	return 0;
}

int main(int argc, char **argv)
{
	static char line[1 << 16];
	struct stat st;
	FILE *plan;
	int fd;

	if (argc != 3)
		die("usage: moetoucher MODEL PLAN");
	page = sysconf(_SC_PAGESIZE);
	if ((fd = open(argv[1], O_RDONLY)) < 0 || fstat(fd, &st) != 0)
		die("cannot open the model");
	fsize = st.st_size;
	base = mmap(NULL, fsize, PROT_READ, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		die("cannot map the model");
	/* One page per fault: what a pick reads is what it faults. */
	if (madvise(base, fsize, MADV_RANDOM) != 0)
		die("madvise failed");
	if (!(plan = fopen(argv[2], "r")))
		die("cannot open the plan");
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), plan)) {
		char *save, *tok = strtok_r(line, " \n", &save);
		if (!tok)
			continue;
		if (!strcmp(tok, "slice")) {
			if (nslices == MAX_SLICES)
				die("too many slices");
			struct slice *s = &slices[nslices++];
			if (sscanf(save, "%d %lld %lld", &s->layer, &s->off, &s->stride) != 3)
				die("bad slice line");
			continue;
		}
		if (strcmp(tok, "token"))
			die("unknown directive");
		int n = atoi(strtok_r(NULL, " \n", &save));
		if (n < 1 || n > MAX_BATCH)
			die("bad batch size");
		plan_nlayers = 0;
		while ((tok = strtok_r(NULL, " \n", &save))) {
			char *ids, *save2;
			if (plan_nlayers == MAX_LAYERS)
				die("too many layers");
			plan_layers[plan_nlayers] = atoi(tok);
			if (!(ids = strchr(tok, ':')))
				die("bad pick list");
			plan_n[plan_nlayers] = 0;
			for (char *e = strtok_r(ids + 1, ",", &save2); e; e = strtok_r(NULL, ",", &save2)) {
				if (plan_n[plan_nlayers] == MAX_USED)
					die("too many picks");
				plan_ids[plan_nlayers][plan_n[plan_nlayers]++] = atoi(e);
			}
			/* A prefill batch repeats the row for each of its tokens. */
			for (int r = 1; r < n; r++)
				memcpy(&plan_ids[plan_nlayers][r * plan_n[plan_nlayers]], plan_ids[plan_nlayers],
				       plan_n[plan_nlayers] * sizeof(int32_t));
			plan_nlayers++;
		}
		struct llama_batch b = {.n_tokens = n};
		llama_decode(NULL, b);
	}
	fprintf(stderr, "moetoucher: %d tokens, sum %llu\n", token_no, sum);
	return 0;
}
