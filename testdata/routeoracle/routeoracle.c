/*
 * routeoracle: what llama.cpp itself says its MoE router picked, token by
 * token and layer by layer, as an oracle for iocorr's router probe.
 *
 *   routeoracle -m MODEL.gguf [-p PROMPT] [-n TOKENS] [-t THREADS] [-c CTX] [--no-repack]
 *               [--backends DIR] [-ngl N] [--cpu-moe | --n-cpu-moe N] [--no-op-offload]
 *
 * It decodes the prompt in one llama_decode call, then generates greedily,
 * one llama_decode per further token (TOKENS calls in all, like
 * llama-completion -n TOKENS), and registers llama.cpp's graph evaluation
 * callback (cb_eval in llama_context_params). llama.cpp names every MoE
 * layer's selected experts "ffn_moe_topk-L" (build_moe_ffn in
 * src/llama-graph.cpp, for every architecture); the callback asks for
 * those tensors and prints each of their rows as it is computed:
 *
 *   decode CALL N_TOKENS          before llama_decode call CALL (from 1)
 *   topk CALL LAYER ROW ID...     row ROW of layer LAYER's ids in that call
 *   done PROMPT_TOKENS CALLS      at the end
 *
 * CALL counts llama_decode calls from 1, as iocorr numbers tokens. The ids
 * tensor is I32 [n_used, n_rows], a view of an argsort, so rows are nb[1]
 * bytes apart. It is itself the command iocorr traces, so iocorr's picks
 * and the oracle's come from one and the same run.
 *
 * --no-repack sets use_extra_bufts = false, as llama.cpp's --no-repack
 * does: on x86 with AVX2 the CPU backend otherwise copies Q4_0, Q4_K,
 * IQ4_NL and MXFP4 weights (expert tensors included) into anonymous
 * memory at load time, and inference never reads them from the file.
 *
 * Hybrid offload, as llama.cpp's tools spell it: -ngl N puts N layers on
 * the first GPU backend; --cpu-moe keeps every layer's expert tensors
 * (ffn_{up,down,gate,gate_up}_{,ch}exps) in the CPU's buffer, --n-cpu-moe N
 * those of layers 0..N-1 (the patterns of llama.cpp's common library).
 * --backends DIR loads ggml's backends from DIR (a GGML_BACKEND_DL build
 * loads them at run time). The router's top-k then runs on the GPU: the
 * callback reads it through ggml_backend_tensor_get, from whichever
 * buffer holds it.
 *
 * --no-op-offload clears op_offload in llama_context_params, as llama.cpp's
 * tools do: by default the scheduler runs an op whose weights sit in the
 * CPU's buffer on the GPU for a batch of GGML_OP_OFFLOAD_MIN_BATCH (32)
 * tokens or more, a prefill's MUL_MAT_ID of CPU-resident experts included.
 *
 * Built by testkit/llmtest (BuildRouteOracle) against the public headers
 * and libllama of llama.cpp's shared build.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static int calls;

/* llama.cpp's LLM_FFN_EXPS_REGEX (common/common.h): what --cpu-moe and
 * --n-cpu-moe keep on the CPU. */
#define EXPS "\\.ffn_(up|down|gate|gate_up)_(ch|)exps"

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
	(void)ud;
	/* And llama.cpp's own account of where the weights went, one line a
	 * buffer ("load_tensors:      Vulkan0 model buffer size =    16.66
	 * MiB"): the oracle of iocorr's devices. */
	if (level == GGML_LOG_LEVEL_ERROR || strstr(text, " model buffer size = "))
		fputs(text, stderr);
}

/* The layer of an "ffn_moe_topk-L" tensor, or -1 for any other. */
static int topk_layer(const struct ggml_tensor *t)
{
	static const char prefix[] = "ffn_moe_topk-";
	char *end;
	long l;

	if (strncmp(t->name, prefix, sizeof(prefix) - 1) != 0)
		return -1;
	l = strtol(t->name + sizeof(prefix) - 1, &end, 10);
	if (end == t->name + sizeof(prefix) - 1 || *end != '\0' || l < 0)
		return -1;
	return (int)l;
}

static bool on_eval(struct ggml_tensor *t, bool ask, void *ud)
{
	int layer = topk_layer(t);
	char *row;

	(void)ud;
	if (ask)
		return layer >= 0;
	if (layer < 0)
		return true;
	if (t->type != GGML_TYPE_I32) {
		fprintf(stderr, "routeoracle: %s is %s, not i32\n", t->name, ggml_type_name(t->type));
		exit(1);
	}
	row = malloc(t->nb[1]);
	for (int64_t r = 0; r < t->ne[1]; r++) {
		/* Through the backend, not t->data: right whatever buffer holds it. */
		ggml_backend_tensor_get(t, row, r * t->nb[1], t->ne[0] * sizeof(int32_t));
		printf("topk %d %d %lld", calls, layer, (long long)r);
		for (int64_t i = 0; i < t->ne[0]; i++)
			printf(" %d", ((int32_t *)row)[i]);
		putchar('\n');
	}
	free(row);
	return true;
}

static void usage(void)
{
	fprintf(stderr, "usage: routeoracle -m MODEL.gguf [-p PROMPT] [-n TOKENS] [-t THREADS] [-c CTX] [--no-repack]\n"
			"                   [--backends DIR] [-ngl N] [--cpu-moe | --n-cpu-moe N] [--no-op-offload]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *model_path = NULL, *prompt = "the quick brown fox", *backends = NULL;
	int n_gen = 8, threads = 2, n_ctx = 256, n_gpu_layers = 0, cpu_moe = 0;
	bool repack = true, op_offload = true;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--no-repack")) {
			repack = false;
			continue;
		}
		if (!strcmp(a, "--no-op-offload")) {
			op_offload = false;
			continue;
		}
		if (!strcmp(a, "--cpu-moe")) {
			cpu_moe = -1;
			continue;
		}
		if (i + 1 >= argc)
			usage();
		if (!strcmp(a, "-m"))
			model_path = argv[++i];
		else if (!strcmp(a, "-p"))
			prompt = argv[++i];
		else if (!strcmp(a, "-n"))
			n_gen = atoi(argv[++i]);
		else if (!strcmp(a, "-t"))
			threads = atoi(argv[++i]);
		else if (!strcmp(a, "-c"))
			n_ctx = atoi(argv[++i]);
		else if (!strcmp(a, "-ngl"))
			n_gpu_layers = atoi(argv[++i]);
		else if (!strcmp(a, "--n-cpu-moe"))
			cpu_moe = atoi(argv[++i]);
		else if (!strcmp(a, "--backends"))
			backends = argv[++i];
		else
			usage();
	}
	if (!model_path || n_gen < 1 || threads < 1 || n_ctx < 8 || n_gpu_layers < 0 || cpu_moe < -1 || cpu_moe > 4096)
		usage();

	llama_log_set(quiet, NULL);
	if (backends)
		ggml_backend_load_all_from_path(backends);
	llama_backend_init();

	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = n_gpu_layers;
	mp.use_extra_bufts = repack;
	/* The CPU's buffer type through the device registry: a
	 * GGML_BACKEND_DL build exports no ggml_backend_cpu_buffer_type. */
	struct llama_model_tensor_buft_override overrides[4097 + 1];
	static char patterns[4096][48];
	int n_over = 0;
	if (cpu_moe != 0) {
		ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
		if (!cpu) {
			fprintf(stderr, "routeoracle: no CPU backend loaded\n");
			return 1;
		}
		ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(cpu);
		if (cpu_moe < 0) {
			overrides[n_over++] = (struct llama_model_tensor_buft_override){ EXPS, buft };
		}
		for (int l = 0; l < cpu_moe; l++) {
			snprintf(patterns[l], sizeof(patterns[l]), "blk\\.%d%s", l, EXPS);
			overrides[n_over++] = (struct llama_model_tensor_buft_override){ patterns[l], buft };
		}
		overrides[n_over] = (struct llama_model_tensor_buft_override){ NULL, NULL };
		mp.tensor_buft_overrides = overrides;
	}
	struct llama_model *model = llama_model_load_from_file(model_path, mp);
	if (!model) {
		fprintf(stderr, "routeoracle: llama.cpp could not load %s\n", model_path);
		return 1;
	}
	const struct llama_vocab *vocab = llama_model_get_vocab(model);

	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = n_ctx;
	cp.n_batch = n_ctx;
	cp.n_ubatch = n_ctx;
	cp.n_threads = threads;
	cp.n_threads_batch = threads;
	cp.no_perf = true;
	cp.op_offload = op_offload;
	cp.cb_eval = on_eval;
	cp.cb_eval_user_data = NULL;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	if (!ctx) {
		fprintf(stderr, "routeoracle: no context for %s\n", model_path);
		return 1;
	}

	int cap = strlen(prompt) + 8;
	llama_token *toks = malloc(cap * sizeof(*toks));
	int n_prompt = llama_tokenize(vocab, prompt, strlen(prompt), toks, cap, true, false);
	if (n_prompt < 1 || n_prompt + n_gen > n_ctx) {
		fprintf(stderr, "routeoracle: prompt of %d tokens and %d more do not fit a context of %d\n", n_prompt, n_gen, n_ctx);
		return 1;
	}
	const int n_vocab = llama_vocab_n_tokens(vocab);
	struct llama_batch batch = llama_batch_get_one(toks, n_prompt);
	llama_token next;
	for (int i = 0; i < n_gen; i++) {
		calls++;
		printf("decode %d %d\n", calls, batch.n_tokens);
		if (llama_decode(ctx, batch) != 0) {
			fprintf(stderr, "routeoracle: llama_decode call %d failed\n", calls);
			return 1;
		}
		/* Greedy: the argmax of the last output's logits. */
		const float *logits = llama_get_logits_ith(ctx, -1);
		next = 0;
		for (int v = 1; v < n_vocab; v++)
			if (logits[v] > logits[next])
				next = v;
		batch = llama_batch_get_one(&next, 1);
	}
	printf("done %d %d\n", n_prompt, calls);
	fflush(stdout);

	free(toks);
	llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	return 0;
}
