/*
 * gguf_offsets: where llama.cpp's own GGUF reader puts every tensor of a
 * model. It loads libggml-base.so (the library llama.cpp itself uses) at
 * run time and prints, per tensor, one line
 *
 *   NAME ABSOLUTE_OFFSET SIZE TYPE_NUMBER TYPE_NAME
 *
 * (type as enum ggml_type and as ggml_type_name says it), so that a test
 * can compare them with iocorr's parser.
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
/* enum ggml_type is an int-sized enum. */
typedef int (*ttype_fn)(const struct gguf_context *, int64_t);
typedef const char *(*tname_fn)(int);
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
	ttype_fn tensor_type = (ttype_fn)need(lib, "gguf_get_tensor_type");
	tname_fn type_name = (tname_fn)need(lib, "ggml_type_name");
	free_fn gfree = (free_fn)need(lib, "gguf_free");
	if (!init || !data_offset || !n_tensors || !tensor_name || !tensor_offset || !tensor_size || !tensor_type || !type_name || !gfree)
		return 1;

	struct gguf_init_params params = {.no_alloc = true, .ctx = NULL};
	struct gguf_context *ctx = init(argv[2], params);
	if (!ctx) {
		fprintf(stderr, "gguf_offsets: llama.cpp's gguf reader rejected %s\n", argv[2]);
		return 1;
	}
	size_t base = data_offset(ctx);
	int64_t n = n_tensors(ctx);
	for (int64_t i = 0; i < n; i++) {
		int type = tensor_type(ctx, i);
		const char *tn = type_name(type);
		printf("%s %zu %zu %d %s\n", tensor_name(ctx, i), base + tensor_offset(ctx, i), tensor_size(ctx, i),
		       type, tn ? tn : "?");
	}
	gfree(ctx);
	return 0;
}
