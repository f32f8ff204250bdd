/*
 * quantcheck: llama.cpp's own word on the blocks and models synth writes.
 *
 *   quantcheck dequant TYPE < BLOCKS > FLOATS
 *       decodes whole blocks of ggml type TYPE (enum ggml_type) with
 *       ggml's to_float (ggml_get_type_traits), the function llama.cpp's
 *       CPU backend dequantizes with, and writes little-endian float32s.
 *
 *   quantcheck logits MODEL N
 *       loads MODEL, decodes a short prompt and N-1 greedy tokens (N
 *       llama_decode calls) on 2 threads and checks every logit of every
 *       call is finite; prints "logits CALLS VALUES MIN MAX" and exits 0,
 *       or names the first non-finite logit and exits 1.
 *
 * Built by gguf's tests against the shared llama.cpp build's headers
 * and libraries.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *data)
{
	(void)data;
	if (level >= GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static int dequant(int type)
{
	const struct ggml_type_traits *tt = ggml_get_type_traits((enum ggml_type)type);
	if (!tt || !tt->to_float || tt->type_size == 0) {
		fprintf(stderr, "quantcheck: type %d has no to_float\n", type);
		return 1;
	}
	size_t bs = tt->type_size, n = tt->blck_size;
	unsigned char *blk = malloc(bs);
	float *y = malloc(n * sizeof(float));
	size_t got;
	while ((got = fread(blk, 1, bs, stdin)) == bs) {
		tt->to_float(blk, y, (int64_t)n);
		fwrite(y, sizeof(float), n, stdout);
	}
	if (got != 0) {
		fprintf(stderr, "quantcheck: a partial block of %zu bytes\n", got);
		return 1;
	}
	return 0;
}

static int logits(const char *path, int n_gen)
{
	llama_log_set(quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	struct llama_model *model = llama_model_load_from_file(path, mp);
	if (!model) {
		fprintf(stderr, "quantcheck: llama.cpp could not load %s\n", path);
		return 1;
	}
	const struct llama_vocab *vocab = llama_model_get_vocab(model);
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = 128;
	cp.n_batch = 128;
	cp.n_threads = 2;
	cp.n_threads_batch = 2;
	cp.no_perf = true;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	if (!ctx) {
		fprintf(stderr, "quantcheck: no context for %s\n", path);
		return 1;
	}
	const char *prompt = "the quick brown fox jumps over the lazy dog";
	llama_token toks[64];
	int n = llama_tokenize(vocab, prompt, strlen(prompt), toks, 64, true, false);
	if (n < 1) {
		fprintf(stderr, "quantcheck: the prompt did not tokenize\n");
		return 1;
	}
	const int n_vocab = llama_vocab_n_tokens(vocab);
	struct llama_batch batch = llama_batch_get_one(toks, n);
	llama_token next;
	float lo = INFINITY, hi = -INFINITY;
	long values = 0;
	for (int call = 1; call <= n_gen; call++) {
		if (llama_decode(ctx, batch) != 0) {
			fprintf(stderr, "quantcheck: llama_decode call %d failed\n", call);
			return 1;
		}
		const float *l = llama_get_logits_ith(ctx, -1);
		next = 0;
		for (int v = 0; v < n_vocab; v++) {
			if (!isfinite(l[v])) {
				printf("nonfinite call %d token %d %g\n", call, v, l[v]);
				return 1;
			}
			lo = fminf(lo, l[v]);
			hi = fmaxf(hi, l[v]);
			if (l[v] > l[next])
				next = v;
		}
		values += n_vocab;
		batch = llama_batch_get_one(&next, 1);
	}
	printf("logits %d %ld %g %g\n", n_gen, values, lo, hi);
	llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "dequant"))
		return dequant(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "logits"))
		return logits(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: quantcheck dequant TYPE < BLOCKS | quantcheck logits MODEL N\n");
	return 2;
}
