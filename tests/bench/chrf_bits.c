/* chrf_bits.c - chrF / chrF++ statistics and scores of N random pairs, one
 * line each (options, statistics, the score's bits), to diff two builds of
 * src/score/chrf.c bit for bit (tests/bench/chrf_compare.sh). The pairs mix
 * tiny alphabets, words with Unicode whitespace, random bytes (invalid
 * UTF-8, NUL), code-point alphabets around the 254/256-symbol limits,
 * edited copies and, 1 in 50, texts of up to 4,000 units.
 *   chrf_bits SEED N [MAXLEN] > out.txt */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "lynn/score.h"

static uint64_t rs;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static unsigned R(unsigned n) { return n ? (unsigned)(rnd() % n) : 0; }

static size_t put(uint32_t cp, unsigned char *o)
{
	if (cp < 0x80) { o[0] = cp; return 1; }
	if (cp < 0x800) { o[0] = 0xC0 | cp >> 6; o[1] = 0x80 | (cp & 63); return 2; }
	if (cp < 0x10000) { o[0] = 0xE0 | cp >> 12; o[1] = 0x80 | (cp >> 6 & 63); o[2] = 0x80 | (cp & 63); return 3; }
	o[0] = 0xF0 | cp >> 18; o[1] = 0x80 | (cp >> 12 & 63); o[2] = 0x80 | (cp >> 6 & 63); o[3] = 0x80 | (cp & 63); return 4;
}

static const uint32_t wsx[] = { 0x85, 0xA0, 0x1680, 0x2000, 0x2005, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 9, 10, 11, 12, 13, 28, 29, 30, 31, 32 };
static const char *vocab[] = { "the", "a", "cat", "sat", "on", "mat", "dog", "ran", "fast", "and", "but",
	"supercalifragilistic", "abcdefgh", "abcdefghi", "abcdefghijklmno", "abcdefghijklmnop",
	"abcdefghijklmnopq", "x", "(hi)", "hi!", "!hi", "\"quote\"", "e.g.", "...", "--", "a,b", "don't",
	"12345678", "1234567", "x\x01y", "\x05", "\xc3\xa9t\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87", "\xf0\x9f\x98\x80!",
	"\xe0\xa4\xb9\xe0\xa4\xbf", "\xed\x95\x9c", "\xc4\xb0stanbul", "word.", ",", ".", "(", ")" };

/* one text into o (returns length): class picks the generator */
static size_t gen(unsigned char *o, unsigned cls, size_t maxlen, uint32_t *alpha, unsigned na)
{
	size_t n = 0, len = R(maxlen + 1);
	while (n < len) {
		switch (cls) {
		case 0: /* tiny ASCII alphabet */
			o[n++] = "ab c"[R(4)];
			break;
		case 1: /* words from the vocabulary with whitespace */
		{
			const char *w = vocab[R(sizeof vocab / sizeof *vocab)];
			size_t l = strlen(w);
			if (R(20) == 0 && w[0] == 0x05) { o[n++] = 0; break; }
			memcpy(o + n, w, l);
			n += l;
			if (R(8) == 0) n += put(wsx[R(sizeof wsx / sizeof *wsx)], o + n);
			else o[n++] = ' ';
			break;
		}
		case 2: /* random bytes (invalid UTF-8, NUL) */
			o[n++] = (unsigned char)R(256);
			break;
		case 3: /* an alphabet of code points (CJK etc.), ASCII, whitespace */
		{
			unsigned r = R(10);
			if (r == 0) n += put(wsx[R(sizeof wsx / sizeof *wsx)], o + n);
			else if (r == 1) o[n++] = (unsigned char)(32 + R(95));
			else n += put(alpha[R(na)], o + n);
			break;
		}
		case 4: /* mostly valid with rare corruption */
		{
			unsigned r = R(40);
			if (r == 0) o[n++] = (unsigned char)(0x80 + R(128));
			else if (r < 8) o[n++] = ' ';
			else if (r < 20) n += put(alpha[R(na)], o + n);
			else o[n++] = (unsigned char)("abcdefghij.,!?()"[R(16)]);
			break;
		}
		default: /* ASCII printable words, long ones too */
		{
			unsigned l = 1 + R(R(4) == 0 ? 30 : 9);
			for (unsigned q = 0; q < l; q++) o[n++] = (unsigned char)(33 + R(R(3) ? 26 : 94));
			o[n++] = R(10) ? ' ' : "\t\n\v\f\r\x1c\x1d\x1e\x1f "[R(10)];
		}
		}
	}
	return n;
}

/* hyp from ref: copy with edits */
static size_t mutate(unsigned char *o, const unsigned char *r, size_t rl, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < rl && n + 8 < cap; i++) {
		unsigned x = R(30);
		if (x == 0) continue;
		if (x == 1) o[n++] = ' ';
		if (x == 2) { size_t j = R((unsigned)rl); o[n++] = r[j]; }
		if (x == 3 && i + 4 < rl) { memcpy(o + n, r + R((unsigned)(rl - 4)), 4); n += 4; }
		o[n++] = r[i];
	}
	return n;
}

int main(int argc, char **argv)
{
	uint64_t seed = strtoull(argv[1], 0, 10);
	long N = atol(argv[2]);
	static unsigned char h[2200000], r[2200000];
	static uint32_t alpha[400];
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(NULL);
	rs = seed * 0x9E3779B97F4A7C15ULL + 1;
	for (long it = 0; it < N; it++) {
		struct lynn_chrf_opts o = LYNN_CHRF_OPTS_DEFAULT;
		struct lynn_chrf_stats st;
		unsigned cls = R(6), na, big = R(50) == 0;
		size_t maxlen = argc > 3 ? (size_t)atol(argv[3]) : big ? 4000 : R(4) == 0 ? 30 : 400, hl, rl;
		uint32_t base = R(3) == 0 ? 0x4E00 : R(2) ? 0x100 : 0xAC00;
		/* alphabets around the 254 / 256-symbol limits (128 + na symbols with ASCII) */
		na = R(4) == 0 ? 120 + R(20) : R(3) == 0 ? 250 + R(15) : 1 + R(60);
		for (unsigned k = 0; k < na; k++) {
			alpha[k] = base + k * (1 + R(2));
			if (R(50) == 0) alpha[k] = "\x85\xa0"[R(2)] & 0xFF;
			if (R(60) == 0) alpha[k] = 0x130;
			if (R(60) == 0) alpha[k] = 0x1F600 + R(40);
			if (R(60) == 0) alpha[k] = 0x900 + R(100);
			if (R(100) == 0) alpha[k] = 0x2028;
		}
		o.char_order = 1 + R(10);
		o.word_order = R(3) == 0 ? 0 : R(2) ? 2 : R(5);
		o.whitespace = R(3) == 0;
		o.eps_smoothing = R(5) == 0;
		o.beta = R(4) ? 2 : R(4);
		rl = gen(r, cls, maxlen, alpha, na);
		if (R(3) == 0) hl = gen(h, R(2) ? cls : R(6), maxlen, alpha, na);
		else hl = mutate(h, r, rl, sizeof h);
		if (R(30) == 0) { static unsigned char t[2200000]; size_t tl = hl; memcpy(t, h, hl); memcpy(h, r, rl); memcpy(r, t, tl); hl = rl; rl = tl; }
		int rc = lynn_chrf_stats_compute(ctx, &o, (char *)h, hl, (char *)r, rl, &st, NULL);
		double sc = lynn_chrf_stats_score(&o, &st);
		uint64_t b;
		memcpy(&b, &sc, 8);
		printf("%ld %d %d %d %d %d %d", it, o.char_order, o.word_order, o.whitespace, o.eps_smoothing, o.beta, rc);
		for (int k = 0; k < 3 * st.n_orders; k++)
			printf(" %lld", (long long)st.v[k]);
		printf(" %016llx\n", (unsigned long long)b);
	}
	lynn_score_ctx_free(ctx);
	return 0;
}
