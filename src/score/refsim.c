/*
 * refsim.c - the g1 style rules and the g3 reference similarity of SPEC §5,
 * with the semantics of the original four_gate_eval.py (score_rule_based,
 * reference_similarity_score), re-implemented on code points with Python's
 * character classes (str.isspace for \s and strip, category Nd for \d).
 * docs/grading.md states every rule precisely.
 */
#include <stdlib.h>
#include <string.h>

#include "lynn/score.h"
#include "score/score_internal.h"

static const char *const default_cliches[] = {
	"I'd be happy to help", "Let me break this down", "As an AI", "I cannot",
	"好的,我来帮", "首先,让我", "当然可以,", "好的,", "当然,",
};

size_t lynn_style_default_cliches(const char *const **out)
{
	*out = default_cliches;
	return sizeof default_cliches / sizeof *default_cliches;
}

static const char *const rule_names[LYNN_STYLE_N_RULES] = {
	"length_ok", "no_tail_repetition", "no_garbage", "no_cliche", "format_match",
};

const char *lynn_style_rule_name(int rule)
{
	return rule >= 0 && rule < LYNN_STYLE_N_RULES ? rule_names[rule] : "?";
}

/* ===== style rules ===== */

static bool rule_tail_repetition_ok(const uint32_t *t, size_t n)
{
	/* in t[n/2:], no 8-code-point window occurs 5 times */
	const size_t w = 8, max_repeat = 5;
	const uint32_t *tail;
	size_t nt, cnt, cap, mask;
	struct { uint64_t h; const uint32_t *p; uint32_t c; } *tab;
	bool ok = true;

	if (n < w * max_repeat)
		return true;
	tail = t + n / 2;
	nt = n - n / 2;
	if (nt < w)
		return true;
	cnt = nt - w + 1;
	cap = pow2_at_least(2 * cnt + 2);
	mask = cap - 1;
	tab = calloc(cap, sizeof *tab);
	if (!tab)
		return true; /* out of memory: cannot decide; treated as no repetition */
	for (size_t i = 0; i < cnt && ok; i++) {
		uint64_t h = 0xCBF29CE484222325ULL;
		size_t p;
		for (size_t q = 0; q < w; q++)
			h = (h ^ tail[i + q]) * 0x100000001B3ULL;
		p = (size_t)mix64(h) & mask;
		for (;;) {
			if (!tab[p].p) {
				tab[p].h = h;
				tab[p].p = tail + i;
				tab[p].c = 1;
				break;
			}
			if (tab[p].h == h && !memcmp(tab[p].p, tail + i, w * sizeof *tail)) {
				if (++tab[p].c >= max_repeat)
					ok = false;
				break;
			}
			p = (p + 1) & mask;
		}
	}
	free(tab);
	return ok;
}

static bool ascii_ok(uint32_t c)
{
	/* [A-Za-z0-9\s<all 32 ASCII punctuation>]: printable ASCII or \s */
	return (c > 0x20 && c < 0x7F) || py_isspace(c);
}

static bool rule_garbage_ok(const uint32_t *t, size_t n)
{
	size_t ok = 0;
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (is_cjk_basic(t[i]) || ascii_ok(t[i]))
			ok++;
	return (double)ok / (double)n >= 0.6;
}

static bool rule_cliche_ok(const struct lynn_style_opts *o, const uint32_t *t, size_t n)
{
	const char *const *cl = default_cliches;
	size_t ncl = sizeof default_cliches / sizeof *default_cliches, s = 0, head;
	if (o && o->cliches && o->n_cliches) {
		cl = o->cliches;
		ncl = o->n_cliches;
	}
	while (s < n && py_isspace(t[s]))
		s++;
	head = n - s < 60 ? n - s : 60;
	for (size_t k = 0; k < ncl; k++) {
		const unsigned char *c = (const unsigned char *)cl[k];
		size_t clen = strlen(cl[k]), i = 0, q = 0;
		bool match = true;
		while (i < clen) {
			uint32_t cp = utf8_next(c, clen, &i);
			if (q >= head || t[s + q] != cp) {
				match = false;
				break;
			}
			q++;
		}
		if (match)
			return false;
	}
	return true;
}

static bool contains(const char *h, size_t hl, const char *needle)
{
	return memmem(h, hl, needle, strlen(needle)) != NULL;
}

static bool rule_format_ok(const uint32_t *p, size_t np, const char *prompt, size_t prompt_len,
			   const uint32_t *t, size_t nt, const char *out, size_t out_len)
{
	static const char *const code_kw[] = { "python", "实现", "sql", "bash", "代码" };
	static const char *const num_kw[] = { "证明", "多远", "整除", "分数", "转成" };
	char *low = malloc(prompt_len + 1);
	bool code = false, num = false, json = false, md = false;

	(void)p;
	(void)np;
	if (!low)
		return true;
	/* prompt.lower() as far as ASCII keywords can tell (the Kelvin sign
	 * lowercases to 'k') */
	{
		size_t i = 0, o = 0;
		const unsigned char *u = (const unsigned char *)prompt;
		while (i < prompt_len) {
			size_t s = i;
			uint32_t c = u[i] < 0x80 ? u[i++] : utf8_next(u, prompt_len, &i);
			if (c == 0x212A)
				low[o++] = 'k';
			else if (c >= 'A' && c <= 'Z')
				low[o++] = (char)(c + 32);
			else {
				memcpy(low + o, prompt + s, i - s);
				o += i - s;
			}
		}
		low[o] = 0;
		for (size_t k = 0; k < 5; k++)
			code = code || contains(low, o, code_kw[k]);
		json = contains(low, o, "json");
		md = contains(low, o, "markdown");
		for (size_t k = 0; k < 5; k++)
			num = num || contains(prompt, prompt_len, num_kw[k]);
	}
	free(low);
	if (code) {
		/* "```" in output or "def " in output or "SELECT" in output.upper() */
		static const uint32_t sel[6] = { 'S', 'E', 'L', 'E', 'C', 'T' };
		if (contains(out, out_len, "```") || contains(out, out_len, "def "))
			return true;
		for (size_t i = 0; i < nt; i++) {
			size_t q = 0, j = i;
			while (q < 6 && j < nt) {
				uint32_t c = t[j];
				if (c >= 'a' && c <= 'z')
					c -= 32;
				else if (c == 0x17F) /* ſ → S */
					c = 'S';
				else if (c == 0x1E97) /* ẗ → T + U+0308 */
					c = 'T';
				if (c != sel[q])
					break;
				q++;
				j++;
			}
			if (q == 6)
				return true;
		}
		return false;
	}
	if (num) {
		for (size_t i = 0; i < nt; i++)
			if (py_isdecimal(t[i]))
				return true;
		return false;
	}
	if (json)
		return memchr(out, '{', out_len) && memchr(out, '}', out_len);
	if (md && contains(prompt, prompt_len, "表格"))
		return memchr(out, '|', out_len) != NULL;
	return true;
}

void style_rules_cp(const struct lynn_style_opts *o, const uint32_t *p, size_t np,
		    const char *prompt, size_t prompt_len, const uint32_t *t, size_t nt,
		    const char *output, size_t output_len, struct lynn_style_result *out)
{
	memset(out, 0, sizeof *out);
	out->rules[LYNN_STYLE_LENGTH_OK] = nt >= 50 && nt <= 8000;
	out->rules[LYNN_STYLE_NO_TAIL_REPETITION] = rule_tail_repetition_ok(t, nt);
	out->rules[LYNN_STYLE_NO_GARBAGE] = rule_garbage_ok(t, nt);
	out->rules[LYNN_STYLE_NO_CLICHE] = rule_cliche_ok(o, t, nt);
	out->rules[LYNN_STYLE_FORMAT_MATCH] =
		rule_format_ok(p, np, prompt, prompt_len, t, nt, output, output_len);
	for (int r = 0; r < LYNN_STYLE_N_RULES; r++)
		out->n_pass += out->rules[r];
	out->pass_ratio = (double)out->n_pass / (double)LYNN_STYLE_N_RULES;
	out->overall_pass = out->n_pass >= 4;
}

int lynn_style_score(const struct lynn_style_opts *o, const char *prompt, size_t prompt_len,
		     const char *output, size_t output_len, struct lynn_style_result *out,
		     struct lynn_err *err)
{
	uint32_t *t = malloc((output_len + 1) * sizeof *t);
	size_t nt;
	if (!t)
		return lynn_errf(err, -LYNN_ENOMEM, "style: out of memory");
	nt = utf8_decode(output, output_len, t);
	style_rules_cp(o, NULL, 0, prompt, prompt_len, t, nt, output, output_len, out);
	free(t);
	return 0;
}

/* ===== reference similarity ===== */

/* A list of spans over one code point buffer. */
struct spans {
	uint32_t *off, *len;
	size_t n, cap;
};

static int spans_add(struct spans *s, size_t off, size_t len)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		uint32_t *o = realloc(s->off, cap * sizeof *o), *l;
		if (!o)
			return -LYNN_ENOMEM;
		s->off = o;
		l = realloc(s->len, cap * sizeof *l);
		if (!l)
			return -LYNN_ENOMEM;
		s->len = l;
		s->cap = cap;
	}
	s->off[s->n] = (uint32_t)off;
	s->len[s->n++] = (uint32_t)len;
	return 0;
}

static void spans_free(struct spans *s)
{
	free(s->off);
	free(s->len);
	memset(s, 0, sizeof *s);
}

/* f1_overlap of the sets of spans [0, na) and [na, n) of s over cps. */
static int set_f1(struct lynn_score_ctx *ctx, const uint32_t *cps, const struct spans *s,
		  size_t na, double *f1, struct lynn_err *err)
{
	size_t n = s->n, nb = n - na, nd, da = 0, db = 0, inter = 0;
	uint32_t *ids;
	uint8_t *mark;
	int rc;

	if (na == 0 && nb == 0) {
		*f1 = 1.0;
		return 0;
	}
	if (na == 0 || nb == 0) {
		*f1 = 0.0;
		return 0;
	}
	ids = score_buf(ctx, SLOT_IDS_A, (n + 1) * sizeof *ids, err);
	if (!ids)
		return -LYNN_ENOMEM;
	if ((rc = score_intern(ctx, SLOT_TABLE, cps, s->off, s->len, n, ids, &nd, err)))
		return rc;
	mark = score_buf(ctx, SLOT_BITS, nd + 1, err);
	if (!mark)
		return -LYNN_ENOMEM;
	memset(mark, 0, nd + 1);
	for (size_t k = 0; k < na; k++)
		if (!(mark[ids[k]] & 1)) {
			mark[ids[k]] |= 1;
			da++;
		}
	for (size_t k = na; k < n; k++)
		if (!(mark[ids[k]] & 2)) {
			mark[ids[k]] |= 2;
			db++;
			if (mark[ids[k]] & 1)
				inter++;
		}
	if (inter == 0) {
		*f1 = 0.0;
		return 0;
	}
	{
		double precision = (double)inter / (double)da;
		double recall = (double)inter / (double)db;
		*f1 = 2 * precision * recall / (precision + recall);
	}
	return 0;
}

/* char_ngrams(text, n): whitespace removed, then n-grams, or the whole
 * (shorter) text as one element, or nothing when empty. `ws` holds the
 * whitespace-free code points, starting at base. */
static int char_ngram_spans(struct spans *s, size_t base, size_t len, size_t n)
{
	if (len == 0)
		return 0;
	if (len < n)
		return spans_add(s, base, len);
	for (size_t i = 0; i + n <= len; i++)
		if (spans_add(s, base + i, n))
			return -LYNN_ENOMEM;
	return 0;
}

/* re.findall(r"(?:\d+(?:\.\d+)?%?|\d{4}年|\d+月|\d+日)", text): the first
 * alternative matches wherever any does, so it alone decides. */
static int number_spans(struct spans *s, const uint32_t *t, size_t base, size_t n)
{
	size_t i = 0;
	while (i < n) {
		size_t st = i;
		if (!py_isdecimal(t[base + i])) {
			i++;
			continue;
		}
		while (i < n && py_isdecimal(t[base + i]))
			i++;
		if (i + 1 < n && t[base + i] == '.' && py_isdecimal(t[base + i + 1])) {
			i++;
			while (i < n && py_isdecimal(t[base + i]))
				i++;
		}
		if (i < n && t[base + i] == '%')
			i++;
		if (spans_add(s, base + st, i - st))
			return -LYNN_ENOMEM;
	}
	return 0;
}

/* re.findall(r"[\u4e00-\u9fff]{2,8}", text) */
static int term_spans(struct spans *s, const uint32_t *t, size_t base, size_t n)
{
	size_t i = 0;
	while (i < n) {
		size_t run;
		if (!is_cjk_basic(t[base + i])) {
			i++;
			continue;
		}
		run = 0;
		while (i + run < n && is_cjk_basic(t[base + i + run]))
			run++;
		while (run >= 2) {
			size_t take = run < 8 ? run : 8;
			if (spans_add(s, base + i, take))
				return -LYNN_ENOMEM;
			i += take;
			run -= take;
		}
		i += run;
	}
	return 0;
}

static bool is_line_break(uint32_t c)
{
	/* str.splitlines() boundaries */
	return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
	       c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

static bool is_cn_numeral(uint32_t c)
{
	static const uint32_t d[] = { 0x4E00, 0x4E8C, 0x4E09, 0x56DB, 0x4E94,
				      0x516D, 0x4E03, 0x516B, 0x4E5D, 0x5341 };
	for (size_t k = 0; k < sizeof d / sizeof *d; k++)
		if (c == d[k])
			return true;
	return false;
}

static bool is_header(const uint32_t *x, size_t n)
{
	size_t r = 0;
	/* #{1,4}\s+ */
	while (r < n && x[r] == '#')
		r++;
	if (r >= 1 && r <= 4 && r < n && py_isspace(x[r]))
		return true;
	/* [一二三四五六七八九十]+[、.．] */
	r = 0;
	while (r < n && is_cn_numeral(x[r]))
		r++;
	if (r >= 1 && r < n && (x[r] == 0x3001 || x[r] == '.' || x[r] == 0xFF0E))
		return true;
	/* [0-9]+[、.．] */
	r = 0;
	while (r < n && x[r] >= '0' && x[r] <= '9')
		r++;
	return r >= 1 && r < n && (x[r] == 0x3001 || x[r] == '.' || x[r] == 0xFF0E);
}

static bool is_bullet(const uint32_t *x, size_t n)
{
	size_t r = 0;
	/* [-*+]\s+ */
	if (n >= 2 && (x[0] == '-' || x[0] == '*' || x[0] == '+') && py_isspace(x[1]))
		return true;
	/* [0-9]+[.)、]\s+ */
	while (r < n && x[r] >= '0' && x[r] <= '9')
		r++;
	return r >= 1 && r + 1 < n && (x[r] == '.' || x[r] == ')' || x[r] == 0x3001) &&
	       py_isspace(x[r + 1]);
}

static int features_cp(struct lynn_score_ctx *ctx, const uint32_t *t, size_t n,
		       struct lynn_text_features *f, struct lynn_err *err)
{
	size_t i = 0, s, e;
	memset(f, 0, sizeof *f);

	/* lines: splitlines(), strip(), non-empty */
	while (i < n) {
		size_t ls = i, le, pipes = 0;
		while (i < n && !is_line_break(t[i]))
			i++;
		le = i;
		if (i < n) {
			if (t[i] == '\r' && i + 1 < n && t[i + 1] == '\n')
				i++;
			i++;
		}
		while (ls < le && py_isspace(t[ls]))
			ls++;
		while (le > ls && py_isspace(t[le - 1]))
			le--;
		if (le == ls)
			continue;
		f->headers += is_header(t + ls, le - ls);
		f->bullets += is_bullet(t + ls, le - ls);
		for (size_t k = ls; k < le; k++)
			pipes += t[k] == '|';
		f->tables += pipes >= 2;
	}
	/* text.count("```") // 2 */
	{
		int c = 0;
		for (size_t k = 0; k + 3 <= n;) {
			if (t[k] == '`' && t[k + 1] == '`' && t[k + 2] == '`') {
				c++;
				k += 3;
			} else {
				k++;
			}
		}
		f->code_blocks = c / 2;
	}
	/* paragraphs: len(re.split(r"\n\s*\n", text.strip())), at least 1 */
	s = 0;
	e = n;
	while (s < e && py_isspace(t[s]))
		s++;
	while (e > s && py_isspace(t[e - 1]))
		e--;
	if (e > s) {
		int pieces = 1;
		for (size_t k = s; k < e; k++) {
			size_t j, last = 0;
			if (t[k] != '\n')
				continue;
			for (j = k + 1; j < e && py_isspace(t[j]); j++)
				if (t[j] == '\n')
					last = j;
			if (last) {
				pieces++;
				k = last;
			}
		}
		f->paragraphs = pieces;
	}
	/* distinct numbers */
	{
		struct spans sp = { 0 };
		int rc = number_spans(&sp, t, 0, n);
		if (!rc && sp.n) {
			uint32_t *ids = score_buf(ctx, SLOT_IDS_B, sp.n * sizeof *ids, err);
			size_t nd = 0;
			rc = ids ? score_intern(ctx, SLOT_TABLE, t, sp.off, sp.len, sp.n, ids, &nd, err)
				 : -LYNN_ENOMEM;
			f->numbers = (int)nd;
		}
		spans_free(&sp);
		if (rc)
			return lynn_errf(err, -LYNN_ENOMEM, "refsim: out of memory");
	}
	return 0;
}

int lynn_text_features(const char *text, size_t len, struct lynn_text_features *out,
		       struct lynn_err *err)
{
	struct lynn_score_ctx tmp, *ctx = score_ctx_get(NULL, &tmp);
	uint32_t *t = score_buf(ctx, SLOT_CP_A, (len + 1) * sizeof *t, err);
	int rc = -LYNN_ENOMEM;
	if (t)
		rc = features_cp(ctx, t, utf8_decode(text, len, t), out, err);
	score_ctx_done(ctx, &tmp);
	return rc;
}

static double coverage(int actual, int target)
{
	if (target <= 0)
		return actual <= 0 ? 1.0 : 0.8;
	{
		double r = (double)actual / (double)target;
		return r < 1.0 ? r : 1.0;
	}
}

int lynn_refsim_score(struct lynn_score_ctx *ctx_in, const struct lynn_style_opts *o,
		      const char *prompt, size_t prompt_len, const char *output, size_t output_len,
		      const char *reference, size_t reference_len, struct lynn_refsim *out,
		      struct lynn_err *err)
{
	struct lynn_score_ctx tmp, *ctx = score_ctx_get(ctx_in, &tmp);
	uint32_t *t, *r, *nw;
	size_t nt, nr, mo = 0, mr = 0;
	struct spans sp = { 0 };
	int rc = -LYNN_ENOMEM;

	memset(out, 0, sizeof *out);
	/* output and reference code points, then both without whitespace */
	t = score_buf(ctx, SLOT_CP_A, (output_len + reference_len + 1) * sizeof *t, err);
	nw = score_buf(ctx, SLOT_CP_B, (output_len + reference_len + 1) * sizeof *nw, err);
	if (!t || !nw)
		goto out;
	nt = utf8_decode(output, output_len, t);
	r = t + nt;
	nr = utf8_decode(reference, reference_len, r);
	style_rules_cp(o, NULL, 0, prompt, prompt_len, t, nt, output, output_len, &out->style);
	if (nr == 0) {
		out->has_reference = false;
		out->score = out->score_raw = out->style.pass_ratio;
		rc = 0;
		goto out;
	}
	out->has_reference = true;
	for (size_t i = 0; i < nt; i++)
		if (!py_isspace(t[i]))
			nw[mo++] = t[i];
	for (size_t i = 0; i < nr; i++)
		if (!py_isspace(r[i]))
			nw[mo + mr++] = r[i];

	/* trigram and bigram F1 */
	{
		double *dst[2] = { &out->trigram_f1, &out->bigram_f1 };
		for (int k = 0; k < 2; k++) {
			size_t n = k == 0 ? 3 : 2, na;
			sp.n = 0;
			if (char_ngram_spans(&sp, 0, mo, n))
				goto out;
			na = sp.n;
			if (char_ngram_spans(&sp, mo, mr, n))
				goto out;
			if ((rc = set_f1(ctx, nw, &sp, na, dst[k], err)))
				goto out;
			rc = -LYNN_ENOMEM;
		}
	}
	/* numbers and CJK terms */
	{
		size_t na;
		sp.n = 0;
		if (number_spans(&sp, t, 0, nt))
			goto out;
		na = sp.n;
		if (number_spans(&sp, t, nt, nr))
			goto out;
		if ((rc = set_f1(ctx, t, &sp, na, &out->number_f1, err)))
			goto out;
		sp.n = 0;
		rc = -LYNN_ENOMEM;
		if (term_spans(&sp, t, 0, nt))
			goto out;
		na = sp.n;
		if (term_spans(&sp, t, nt, nr))
			goto out;
		if ((rc = set_f1(ctx, t, &sp, na, &out->term_f1, err)))
			goto out;
	}
	/* sequence ratio on the first 5000 code points */
	if ((rc = lynn_seq_ratio_cp(ctx, t, nt < 5000 ? nt : 5000, r, nr < 5000 ? nr : 5000,
				    &out->sequence, err)))
		goto out;
	/* structure */
	if ((rc = features_cp(ctx, t, nt, &out->out_features, err)) ||
	    (rc = features_cp(ctx, r, nr, &out->ref_features, err)))
		goto out;
	{
		const struct lynn_text_features *of = &out->out_features, *rf = &out->ref_features;
		double parts[6] = {
			coverage(of->headers, rf->headers),
			coverage(of->bullets, rf->bullets),
			coverage(of->code_blocks, rf->code_blocks),
			coverage(of->tables, rf->tables),
			coverage(of->paragraphs, rf->paragraphs),
			coverage(of->numbers, rf->numbers),
		};
		double sum = 0.0;
		for (int k = 0; k < 6; k++)
			sum += parts[k];
		out->structure = sum / 6;
	}
	/* floor penalty and the weighted score */
	{
		double fp = 1.0, lexical, entity, score;
		if (!out->style.rules[LYNN_STYLE_NO_CLICHE])
			fp -= 0.15;
		if (!out->style.rules[LYNN_STYLE_NO_TAIL_REPETITION])
			fp -= 0.15;
		if (!out->style.rules[LYNN_STYLE_NO_GARBAGE])
			fp -= 0.20;
		fp = fp > 0.5 ? fp : 0.5;
		out->floor_penalty = fp;
		lexical = 0.60 * out->trigram_f1 + 0.40 * out->bigram_f1;
		entity = 0.55 * out->term_f1 + 0.45 * out->number_f1;
		score = (0.45 * lexical + 0.25 * out->sequence + 0.15 * entity +
			 0.15 * out->structure) * fp;
		out->score_raw = score;
		out->score = lynn_score_round(score, 4);
	}
	rc = 0;
out:
	spans_free(&sp);
	score_ctx_done(ctx, &tmp);
	return rc;
}
