/*
 * gguf_offsets: where llama.cpp's own GGUF reader puts every tensor of a
 * model. It loads libggml-base.so (the library llama.cpp itself uses) at
 * run time and prints, per tensor, its name, absolute file offset and
 * size, so that a test can compare them with iocorr's parser.
 *
 *   gguf_offsets LIBDIR/libggml-base.so MODEL.gguf
 *
 * The few gguf functions used are declared here by hand, from their
 * documented signatures, so the program needs no ggml headers.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct gguf_context;
struct ggml_context;
struct gguf_init_params {
	bool no_alloc;
	struct ggml_context **ctx;
};

typedef struct gguf_context *(*init_fn)(const char *, struct gguf_init_params);
typedef size_t (*size_fn)(const struct gguf_context *);
typedef int64_t (*count_fn)(const struct gguf_context *);
typedef const char *(*name_fn)(const struct gguf_context *, int64_t);
typedef size_t (*toff_fn)(const struct gguf_context *, int64_t);
typedef void (*free_fn)(struct gguf_context *);

static void *need(void *lib, const char *sym)
{
	void *p = dlsym(lib, sym);
	if (!p) {
		fprintf(stderr, "gguf_offsets: %s: %s\n", sym, dlerror());
		return NULL;
	}
	return p;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: gguf_offsets libggml-base.so model.gguf\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "gguf_offsets: %s\n", dlerror());
		return 1;
	}
	init_fn init = (init_fn)need(lib, "gguf_init_from_file");
	size_fn data_offset = (size_fn)need(lib, "gguf_get_data_offset");
	count_fn n_tensors = (count_fn)need(lib, "gguf_get_n_tensors");
	name_fn tensor_name = (name_fn)need(lib, "gguf_get_tensor_name");
	toff_fn tensor_offset = (toff_fn)need(lib, "gguf_get_tensor_offset");
	toff_fn tensor_size = (toff_fn)need(lib, "gguf_get_tensor_size");
	free_fn gfree = (free_fn)need(lib, "gguf_free");
	if (!init || !data_offset || !n_tensors || !tensor_name || !tensor_offset || !tensor_size || !gfree)
		return 1;

	struct gguf_init_params params = {.no_alloc = true, .ctx = NULL};
	struct gguf_context *ctx = init(argv[2], params);
	if (!ctx) {
		fprintf(stderr, "gguf_offsets: llama.cpp's gguf reader rejected %s\n", argv[2]);
		return 1;
	}
	size_t base = data_offset(ctx);
	int64_t n = n_tensors(ctx);
	for (int64_t i = 0; i < n; i++)
		printf("%s %zu %zu\n", tensor_name(ctx, i), base + tensor_offset(ctx, i), tensor_size(ctx, i));
	gfree(ctx);
	return 0;
}
