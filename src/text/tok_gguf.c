/* tok_gguf.c - a tokenizer from a .gguf file's vocab (tokenizer.ggml.*). */
#include "text/tok_internal.h"

struct lynn_tok *lynn_tok_load_gguf(const char *path, struct lynn_err *err)
{
	lynn_errf(err, -LYNN_EUNSUPPORTED, "tok: '%s': GGUF tokenizers are not supported yet", path);
	return NULL;
}
