/* porter.c - placeholder until the NLTK Porter stemmer lands. */
#include <string.h>

#include "lynn/score.h"

int lynn_porter_stem(const char *word, size_t len, char *out, size_t n_max)
{
	if (len + 1 > n_max)
		return -LYNN_EINVAL;
	memcpy(out, word, len);
	out[len] = 0;
	return (int)len;
}
