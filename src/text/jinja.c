/*
 * jinja.c - a Jinja template engine for chat templates (include/lynn/jinja.h).
 *
 * Byte-exact with Jinja2 3.1 as transformers configures it: ImmutableSandboxedEnvironment
 * (trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]), keep_trailing_newline=False,
 * a json.dumps-based tojson, raise_exception and strftime_now globals. The lexer follows
 * jinja2/lexer.py rule for rule (OptionalLStrip, block_suffix_re, line_starting), the parser
 * jinja2/parser.py (precedence, tests taking one bare argument, tuples), and values follow
 * Python (str() of True/None/floats, int vs float arithmetic, code-point string indexing,
 * insertion-ordered dicts, Markup's escaping on `+`).
 *
 * Memory: every parse and every render allocates from its own arena, freed as a whole; errors
 * unwind with longjmp to the entry point (nothing is leaked since nothing is freed piecemeal).
 * Bounds: nesting depth while parsing, call depth, total loop iterations, output size, arena
 * size, and value nesting depth for str()/tojson/equality.
 */
#include "lynn/jinja.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "lynn/buf.h"

#define PARSE_MAX_DEPTH 200   /* nested expressions/statements while parsing (C stack) */
#define VALUE_MAX_DEPTH 200   /* nested lists/dicts for str()/tojson/== and JSON input */
#define RANGE_MAX 100000      /* Jinja2's sandbox MAX_RANGE */

/* ===================================================================== arena + failure */

struct chunk {
	struct chunk *next;
	size_t used, cap;
	max_align_t data[];
};

struct jx {
	jmp_buf jb;
	struct lynn_err *err;
	const char *name;        /* template name for messages */
	struct chunk *arena;
	size_t mem, mem_limit;
	int line, col; /* statement being rendered, for errors without a node */
};

static void jx_free_arena(struct chunk *c)
{
	while (c) {
		struct chunk *n = c->next;
		free(c);
		c = n;
	}
}

static _Noreturn void jfail(struct jx *x, int code, int line, int col, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static _Noreturn void jfail(struct jx *x, int code, int line, int col, const char *fmt, ...)
{
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (line > 0)
		lynn_errf(x->err, code, "jinja: '%s':%d:%d: %s", x->name, line, col, msg);
	else
		lynn_errf(x->err, code, "jinja: '%s': %s", x->name, msg);
	longjmp(x->jb, 1);
}

static void *jalloc(struct jx *x, size_t n)
{
	struct chunk *c = x->arena;
	n = (n + 15) & ~(size_t)15;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		if (x->mem + cap > x->mem_limit)
			jfail(x, -LYNN_EUNSUPPORTED, x->line, x->col,
			      "working memory limit of %zu bytes reached", x->mem_limit);
		c = malloc(sizeof *c + cap);
		if (!c)
			jfail(x, -LYNN_ENOMEM, 0, 0, "out of memory");
		x->mem += cap;
		c->used = 0;
		c->cap = cap;
		if (x->arena && n > 4096) { /* keep the current chunk in front for small allocs */
			c->next = x->arena->next;
			x->arena->next = c;
		} else {
			c->next = x->arena;
			x->arena = c;
		}
	}
	void *p = (char *)c->data + c->used;
	c->used += n;
	return p;
}

static void *jzalloc(struct jx *x, size_t n)
{
	void *p = jalloc(x, n);
	memset(p, 0, n);
	return p;
}

/* ===================================================================== values */

enum vt {
	VT_UNDEF, VT_NONE, VT_BOOL, VT_INT, VT_FLOAT, VT_STR, VT_LIST, VT_TUPLE, VT_DICT, VT_NS,
	VT_MACRO, VT_FUNC, VT_LOOP,
};

struct jstr {
	size_t len;
	char d[]; /* NUL-terminated */
};

/* VT_LIST flavours: what Python would have (iterators and views behave differently). */
enum lk { LK_LIST, LK_GEN, LK_ITEMS, LK_KEYS, LK_VALUES, LK_RANGE };

struct val {
	uint8_t t;
	uint8_t safe; /* VT_STR: Markup */
	uint8_t sub;  /* VT_LIST: enum lk */
	union {
		bool b;
		int64_t i;
		double f;
		struct jstr *s;       /* VT_STR; VT_UNDEF: the message to raise when used (may be NULL) */
		struct jlist *l;
		struct jdict *d;
		struct macro *m;
		struct func *fn;
		struct loopst *lp;
	} u;
};

struct jlist {
	size_t n, cap;
	struct val *v;
};

struct jdict {
	size_t n, cap;
	struct val *k, *v;
};

static const struct val V_UNDEF = { .t = VT_UNDEF };
static const struct val V_NONE = { .t = VT_NONE };

static struct jstr *mkstr(struct jx *x, const char *s, size_t n)
{
	struct jstr *r = jalloc(x, sizeof *r + n + 1);
	r->len = n;
	if (n)
		memcpy(r->d, s, n);
	r->d[n] = 0;
	return r;
}

static struct val vstr(struct jx *x, const char *s, size_t n)
{
	struct val v = { .t = VT_STR };
	v.u.s = mkstr(x, s, n);
	return v;
}

static struct val vcstr(struct jx *x, const char *s)
{
	return vstr(x, s, strlen(s));
}

static struct val vbool(bool b)
{
	struct val v = { .t = VT_BOOL };
	v.u.b = b;
	return v;
}

static struct val vint(int64_t i)
{
	struct val v = { .t = VT_INT };
	v.u.i = i;
	return v;
}

static struct val vfloat(double f)
{
	struct val v = { .t = VT_FLOAT };
	v.u.f = f;
	return v;
}

static struct val vundef_msg(struct jx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static struct val vundef_msg(struct jx *x, const char *fmt, ...)
{
	char m[200];
	va_list ap;
	struct val v = { .t = VT_UNDEF };
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	v.u.s = mkstr(x, m, strlen(m));
	return v;
}

static struct jlist *mklist(struct jx *x, size_t cap)
{
	struct jlist *l = jzalloc(x, sizeof *l);
	if (cap) {
		l->v = jalloc(x, cap * sizeof *l->v);
		l->cap = cap;
	}
	return l;
}

static void list_push(struct jx *x, struct jlist *l, struct val v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4;
		struct val *nv = jalloc(x, cap * sizeof *nv);
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof *nv);
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = v;
}

static struct val vlist(struct jlist *l)
{
	struct val v = { .t = VT_LIST };
	v.u.l = l;
	return v;
}

static struct val vlist_k(struct jlist *l, int sub)
{
	struct val v = { .t = VT_LIST };
	v.u.l = l;
	v.sub = (uint8_t)sub;
	return v;
}

static struct val vtuple(struct jlist *l)
{
	struct val v = { .t = VT_TUPLE };
	v.u.l = l;
	return v;
}

static struct jdict *mkdict(struct jx *x)
{
	return jzalloc(x, sizeof(struct jdict));
}

static struct val vdict(struct jdict *d)
{
	struct val v = { .t = VT_DICT };
	v.u.d = d;
	return v;
}

static const char *type_name(const struct val *v)
{
	switch (v->t) {
	case VT_UNDEF: return "Undefined";
	case VT_NONE: return "NoneType";
	case VT_BOOL: return "bool";
	case VT_INT: return "int";
	case VT_FLOAT: return "float";
	case VT_STR: return "str";
	case VT_LIST:
		switch (v->sub) {
		case LK_GEN: return "generator";
		case LK_ITEMS: return "dict_items";
		case LK_KEYS: return "dict_keys";
		case LK_VALUES: return "dict_values";
		case LK_RANGE: return "range";
		}
		return "list";
	case VT_TUPLE: return "tuple";
	case VT_DICT: return "dict";
	case VT_NS: return "Namespace";
	case VT_MACRO: return "Macro";
	case VT_FUNC: return "function";
	case VT_LOOP: return "LoopContext";
	}
	return "object";
}

/* ===================================================================== UTF-8 + Python text helpers */

static size_t u8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned c = s[0];
	if (c < 0x80 || n < 2) {
		*cp = c;
		return 1;
	}
	if ((c & 0xe0) == 0xc0) {
		*cp = ((c & 0x1f) << 6) | (s[1] & 0x3f);
		return 2;
	}
	if ((c & 0xf0) == 0xe0 && n >= 3) {
		*cp = ((c & 0x0f) << 12) | ((s[1] & 0x3fu) << 6) | (s[2] & 0x3f);
		return 3;
	}
	if ((c & 0xf8) == 0xf0 && n >= 4) {
		*cp = ((c & 0x07) << 18) | ((s[1] & 0x3fu) << 12) | ((s[2] & 0x3fu) << 6) | (s[3] & 0x3f);
		return 4;
	}
	*cp = c;
	return 1;
}

static size_t u8_encode(uint32_t cp, char *o)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static size_t cp_count(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

/* Python str.isspace for one code point. */
static bool py_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Python's str.splitlines boundaries. */
static bool py_linebreak(uint32_t c)
{
	return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
	       c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
}

/* Byte offset of the code point that starts before `end` (end > 0). */
static size_t u8_prev(const char *s, size_t end)
{
	size_t i = end - 1;
	while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80)
		i--;
	return i;
}

/* Whether strip removes code point c: whitespace when chars is NULL, else any code point of chars. */
static bool strip_hit(uint32_t c, const char *chars, size_t cn)
{
	if (!chars)
		return py_space(c);
	for (size_t q = 0; q < cn;) {
		uint32_t d;
		q += u8_decode((const unsigned char *)chars + q, cn - q, &d);
		if (d == c)
			return true;
	}
	return false;
}

/* Strip: mode 1 left, 2 right, 3 both; chars NULL = whitespace. */
static void py_strip(const char *s, size_t n, const char *chars, size_t cn, int mode, size_t *b,
		     size_t *e)
{
	size_t i = 0, j = n;
	uint32_t c;
	if (mode & 1) {
		while (i < j) {
			size_t k = u8_decode((const unsigned char *)s + i, j - i, &c);
			if (!strip_hit(c, chars, cn))
				break;
			i += k;
		}
	}
	if (mode & 2) {
		while (j > i) {
			size_t p = u8_prev(s, j);
			u8_decode((const unsigned char *)s + p, j - p, &c);
			if (!strip_hit(c, chars, cn))
				break;
			j = p;
		}
	}
	*b = i;
	*e = j;
}

/* Python repr(float) (shortest round-trip digits, exponent outside 1e-4..1e16). */
static void fmt_float(double f, char *out, size_t cap)
{
	char tmp[40], digits[24];
	int p, exp, nd = 0, decpt;
	bool neg;
	size_t o = 0;
	if (isnan(f)) {
		snprintf(out, cap, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(out, cap, f < 0 ? "-inf" : "inf");
		return;
	}
	if (f == 0) {
		snprintf(out, cap, signbit(f) ? "-0.0" : "0.0");
		return;
	}
	for (p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	neg = tmp[0] == '-';
	for (char *q = tmp + neg; *q && *q != 'e'; q++)
		if (isdigit((unsigned char)*q))
			digits[nd++] = *q;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = 0;
	exp = atoi(strchr(tmp, 'e') + 1);
	decpt = exp + 1;
	if (neg)
		out[o++] = '-';
	if (exp >= -5 + 1 && exp < 16) {
		if (decpt <= 0) {
			o += (size_t)snprintf(out + o, cap - o, "0.");
			for (int i = 0; i < -decpt; i++)
				out[o++] = '0';
			o += (size_t)snprintf(out + o, cap - o, "%s", digits);
		} else if (decpt >= nd) {
			o += (size_t)snprintf(out + o, cap - o, "%s", digits);
			for (int i = nd; i < decpt; i++)
				out[o++] = '0';
			o += (size_t)snprintf(out + o, cap - o, ".0");
		} else {
			memcpy(out + o, digits, (size_t)decpt);
			o += (size_t)decpt;
			out[o++] = '.';
			o += (size_t)snprintf(out + o, cap - o, "%s", digits + decpt);
		}
	} else {
		out[o++] = digits[0];
		if (nd > 1) {
			out[o++] = '.';
			o += (size_t)snprintf(out + o, cap - o, "%s", digits + 1);
		}
		o += (size_t)snprintf(out + o, cap - o, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
	}
	out[o] = 0;
}

/* ===================================================================== lexer (jinja2/lexer.py) */

enum tt { T_DATA, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF };

struct tok {
	uint8_t t;
	int line, col;
	const char *s; /* DATA/STR: decoded text (arena); NAME/OP: text */
	size_t len;
	int64_t i;
	double f;
};

struct lexer {
	struct jx *x;
	const char *src; /* normalised source */
	size_t n;
	size_t *line_start;
	size_t nlines;
	struct tok *toks;
	size_t ntok, cap;
};

static void pos_lc(const struct lexer *L, size_t pos, int *line, int *col)
{
	size_t lo = 0, hi = L->nlines;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (L->line_start[mid] <= pos)
			lo = mid;
		else
			hi = mid;
	}
	*line = (int)lo + 1;
	*col = (int)(cp_count(L->src + L->line_start[lo], pos - L->line_start[lo]) + 1);
}

static struct tok *push_tok(struct lexer *L, int t, size_t pos)
{
	struct tok *k;
	if (L->ntok == L->cap) {
		size_t cap = L->cap ? L->cap * 2 : 256;
		struct tok *nt = jalloc(L->x, cap * sizeof *nt);
		if (L->ntok)
			memcpy(nt, L->toks, L->ntok * sizeof *nt);
		L->toks = nt;
		L->cap = cap;
	}
	k = &L->toks[L->ntok++];
	memset(k, 0, sizeof *k);
	k->t = (uint8_t)t;
	pos_lc(L, pos, &k->line, &k->col);
	return k;
}

static _Noreturn void lex_fail(struct lexer *L, size_t pos, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static _Noreturn void lex_fail(struct lexer *L, size_t pos, const char *fmt, ...)
{
	char m[160];
	int line, col;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	pos_lc(L, pos, &line, &col);
	jfail(L->x, -LYNN_EFORMAT, line, col, "%s", m);
}

/* Python `\s` at a UTF-8 position: returns its byte length or 0. */
static size_t ws_at(const char *s, size_t n)
{
	uint32_t c;
	size_t k;
	if (!n)
		return 0;
	k = u8_decode((const unsigned char *)s, n, &c);
	return py_space(c) ? k : 0;
}

static void emit_data(struct lexer *L, size_t pos, const char *s, size_t n)
{
	struct tok *k;
	if (!n)
		return;
	k = push_tok(L, T_DATA, pos);
	k->s = mkstr(L->x, s, n)->d;
	k->len = n;
}

/* Decode a Jinja string literal body the way Python's unicode-escape does. */
static void decode_string(struct lexer *L, size_t pos, const char *s, size_t n, struct tok *k)
{
	char *o = jalloc(L->x, n + 1);
	size_t j = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c != '\\' || i + 1 >= n) {
			o[j++] = c;
			continue;
		}
		c = s[++i];
		switch (c) {
		case '\n': break;
		case '\\': o[j++] = '\\'; break;
		case '\'': o[j++] = '\''; break;
		case '"': o[j++] = '"'; break;
		case 'a': o[j++] = '\a'; break;
		case 'b': o[j++] = '\b'; break;
		case 'f': o[j++] = '\f'; break;
		case 'n': o[j++] = '\n'; break;
		case 'r': o[j++] = '\r'; break;
		case 't': o[j++] = '\t'; break;
		case 'v': o[j++] = '\v'; break;
		case 'x': case 'u': case 'U': {
			int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
			uint32_t cp = 0;
			if (i + (size_t)nd >= n)
				lex_fail(L, pos, "truncated \\%c escape in string", c);
			for (int q = 1; q <= nd; q++) {
				char h = s[i + (size_t)q];
				if (!isxdigit((unsigned char)h))
					lex_fail(L, pos, "truncated \\%c escape in string", c);
				cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower(h) - 'a' + 10));
			}
			if (cp > 0x10ffff)
				lex_fail(L, pos, "illegal unicode escape in string");
			i += (size_t)nd;
			j += u8_encode(cp, o + j);
			break;
		}
		default:
			if (c >= '0' && c <= '7') {
				uint32_t cp = (uint32_t)(c - '0');
				for (int q = 0; q < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; q++)
					cp = cp * 8 + (uint32_t)(s[++i] - '0');
				j += u8_encode(cp, o + j);
			} else {
				o[j++] = '\\';
				o[j++] = c;
			}
		}
	}
	o[j] = 0;
	k->s = o;
	k->len = j;
}

static size_t digits_us(const char *s, size_t n, size_t i, bool hex, int base)
{
	/* (_?D)* after a first digit; returns new index */
	(void)hex;
	for (;;) {
		size_t k = i;
		if (k < n && s[k] == '_')
			k++;
		if (k < n && ((base == 16 && isxdigit((unsigned char)s[k])) ||
			      (base == 10 && isdigit((unsigned char)s[k])) ||
			      (base == 8 && s[k] >= '0' && s[k] <= '7') ||
			      (base == 2 && (s[k] == '0' || s[k] == '1'))))
			i = k + 1;
		else
			return i;
	}
}

/* (\d+_)*\d+ at i; returns end or i when none. */
static size_t digit_run(const char *s, size_t n, size_t i)
{
	size_t j = i;
	if (j >= n || !isdigit((unsigned char)s[j]))
		return i;
	for (;;) {
		while (j < n && isdigit((unsigned char)s[j]))
			j++;
		if (j + 1 < n && s[j] == '_' && isdigit((unsigned char)s[j + 1]))
			j++;
		else
			return j;
	}
}

static double parse_num_text(const char *s, size_t n, int base, bool is_float)
{
	char buf[128];
	size_t j = 0;
	for (size_t i = 0; i < n && j < sizeof buf - 1; i++)
		if (s[i] != '_')
			buf[j++] = s[i];
	buf[j] = 0;
	if (is_float)
		return strtod(buf, NULL);
	return 0 * base;
}

/* Lex one tag's tokens (variable or block) from pos; returns the position after the end. */
static size_t lex_tag(struct lexer *L, size_t pos, bool block, size_t tag_pos)
{
	const char *s = L->src;
	size_t n = L->n;
	char stack[PARSE_MAX_DEPTH];
	int sp = 0;
	for (;;) {
		if (pos >= n)
			lex_fail(L, tag_pos, "unexpected end of template: %s tag is not closed",
				 block ? "'{%'" : "'{{'");
		if (sp == 0) {
			if (block) {
				if (s[pos] == '+' && pos + 2 < n && s[pos + 1] == '%' && s[pos + 2] == '}') {
					push_tok(L, T_BEND, pos);
					return pos + 3;
				}
				if (s[pos] == '-' && pos + 2 < n && s[pos + 1] == '%' && s[pos + 2] == '}') {
					size_t w, p = pos + 3;
					push_tok(L, T_BEND, pos);
					while ((w = ws_at(s + p, n - p)))
						p += w;
					return p;
				}
				if (s[pos] == '%' && pos + 1 < n && s[pos + 1] == '}') {
					push_tok(L, T_BEND, pos);
					return pos + 2 + (pos + 2 < n && s[pos + 2] == '\n');
				}
			} else {
				if (s[pos] == '-' && pos + 2 < n && s[pos + 1] == '}' && s[pos + 2] == '}') {
					size_t w, p = pos + 3;
					push_tok(L, T_VEND, pos);
					while ((w = ws_at(s + p, n - p)))
						p += w;
					return p;
				}
				if (s[pos] == '}' && pos + 1 < n && s[pos + 1] == '}') {
					push_tok(L, T_VEND, pos);
					return pos + 2;
				}
			}
		}
		size_t w = ws_at(s + pos, n - pos);
		if (w) {
			pos += w;
			continue;
		}
		char c = s[pos];
		/* float: (\d+_)*\d+ ( (\.(\d+_)*\d+)? e[+-]?(\d+_)*\d+ | \.(\d+_)*\d+ ), not after '.' */
		if (isdigit((unsigned char)c) && !(pos > 0 && s[pos - 1] == '.')) {
			size_t a = digit_run(s, n, pos), e = 0;
			if (a < n && s[a] == '.' && digit_run(s, n, a + 1) > a + 1) {
				size_t b = digit_run(s, n, a + 1);
				e = b;
				if (b < n && (s[b] == 'e' || s[b] == 'E')) {
					size_t q = b + 1;
					if (q < n && (s[q] == '+' || s[q] == '-'))
						q++;
					if (digit_run(s, n, q) > q)
						e = digit_run(s, n, q);
				}
			} else if (a < n && (s[a] == 'e' || s[a] == 'E')) {
				size_t q = a + 1;
				if (q < n && (s[q] == '+' || s[q] == '-'))
					q++;
				if (digit_run(s, n, q) > q)
					e = digit_run(s, n, q);
			}
			if (e) {
				struct tok *k = push_tok(L, T_FLOAT, pos);
				k->f = parse_num_text(s + pos, e - pos, 10, true);
				pos = e;
				continue;
			}
		}
		if (isdigit((unsigned char)c)) {
			size_t e;
			int base = 10;
			size_t start = pos;
			if (c == '0' && pos + 2 < n && strchr("bBoOxX", s[pos + 1]) && s[pos + 1]) {
				char b = (char)tolower(s[pos + 1]);
				base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
				e = digits_us(s, n, pos + 2, base == 16, base);
				if (e == pos + 2) { /* "0" followed by a name */
					base = 10;
					e = pos + 1;
				} else {
					start = pos + 2;
				}
			} else if (c == '0') {
				e = pos + 1;
				for (;;) {
					size_t k = e;
					if (k < n && s[k] == '_')
						k++;
					if (k < n && s[k] == '0')
						e = k + 1;
					else
						break;
				}
			} else {
				e = digits_us(s, n, pos + 1, false, 10);
			}
			struct tok *k = push_tok(L, T_INT, pos);
			uint64_t v = 0;
			for (size_t q = start; q < e; q++) {
				int d;
				if (s[q] == '_')
					continue;
				d = isdigit((unsigned char)s[q]) ? s[q] - '0' : tolower(s[q]) - 'a' + 10;
				if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base || v * (uint64_t)base + (uint64_t)d > (uint64_t)INT64_MAX)
					lex_fail(L, pos, "integer literal too large");
				v = v * (uint64_t)base + (uint64_t)d;
			}
			k->i = (int64_t)v;
			pos = e;
			continue;
		}
		if (isalpha((unsigned char)c) || c == '_') {
			size_t e = pos + 1;
			while (e < n && (isalnum((unsigned char)s[e]) || s[e] == '_'))
				e++;
			struct tok *k = push_tok(L, T_NAME, pos);
			k->s = s + pos;
			k->len = e - pos;
			pos = e;
			continue;
		}
		if (c == '\'' || c == '"') {
			size_t e = pos + 1;
			while (e < n && s[e] != c) {
				if (s[e] == '\\')
					e++;
				e++;
			}
			if (e >= n)
				lex_fail(L, pos, "unexpected char %c%c%c (unterminated string)", c == '"' ? '\'' : '"', c, c == '"' ? '\'' : '"');
			struct tok *k = push_tok(L, T_STR, pos);
			decode_string(L, pos, s + pos + 1, e - pos - 1, k);
			pos = e + 1;
			continue;
		}
		{
			static const char *ops2[] = { "//", "**", "==", "!=", ">=", "<=" };
			size_t len = 0;
			for (size_t q = 0; q < 6; q++)
				if (pos + 1 < n && s[pos] == ops2[q][0] && s[pos + 1] == ops2[q][1])
					len = 2;
			if (!len && strchr("+-/*%~[](){}><=.:|,;", c) && c)
				len = 1;
			if (!len)
				lex_fail(L, pos, "unexpected char '%c'", c);
			if (len == 1 && (c == '(' || c == '[' || c == '{')) {
				if (sp >= PARSE_MAX_DEPTH)
					lex_fail(L, pos, "brackets nested too deeply");
				stack[sp++] = c == '(' ? ')' : c == '[' ? ']' : '}';
			} else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
				if (!sp)
					lex_fail(L, pos, "unexpected '%c'", c);
				if (stack[sp - 1] != c)
					lex_fail(L, pos, "unexpected '%c', expected '%c'", c, stack[sp - 1]);
				sp--;
			}
			struct tok *k = push_tok(L, T_OP, pos);
			k->s = s + pos;
			k->len = len;
			pos += len;
		}
	}
}

static bool starts(const char *s, size_t n, size_t pos, const char *lit)
{
	size_t k = strlen(lit);
	return pos + k <= n && !memcmp(s + pos, lit, k);
}

/* `{%[-+]?\s*raw\s*(-%}\s*|%})` at pos: returns the end or 0. */
static size_t match_raw(const char *s, size_t n, size_t pos, const char *word, bool with_trim,
			int *sign)
{
	size_t p = pos + 2, w;
	*sign = 0;
	if (p < n && (s[p] == '-' || s[p] == '+'))
		*sign = s[p++];
	while ((w = ws_at(s + p, n - p)))
		p += w;
	if (!starts(s, n, p, word))
		return 0;
	p += strlen(word);
	while ((w = ws_at(s + p, n - p)))
		p += w;
	if (with_trim && starts(s, n, p, "+%}"))
		return p + 3;
	if (starts(s, n, p, "-%}")) {
		p += 3;
		while ((w = ws_at(s + p, n - p)))
			p += w;
		return p;
	}
	if (starts(s, n, p, "%}"))
		return p + 2 + (with_trim && p + 2 < n && s[p + 2] == '\n');
	return 0;
}

/* OptionalLStrip: the data before a tag. */
static void strip_data(struct lexer *L, size_t text_b, size_t *text_e, int sign, bool is_var,
		       bool line_starting)
{
	const char *s = L->src;
	size_t e = *text_e;
	if (sign == '-') {
		while (e > text_b) {
			size_t p = u8_prev(s, e);
			if (p < text_b || !ws_at(s + p, e - p))
				break;
			e = p;
		}
	} else if (sign != '+' && !is_var) {
		size_t l = e;
		while (l > text_b && s[l - 1] != '\n')
			l--;
		if ((l > text_b || line_starting) && l < e) {
			size_t p = l, w;
			while (p < e && (w = ws_at(s + p, e - p)))
				p += w;
			if (p == e)
				e = l;
		}
	}
	*text_e = e;
}

static void lex(struct lexer *L)
{
	const char *s = L->src;
	size_t n = L->n, pos = 0;
	bool line_starting = true;
	while (pos < n) {
		size_t p = pos;
		int kind = 0; /* 1 var, 2 block, 3 comment, 4 raw */
		int sign = 0;
		size_t raw_end = 0;
		while (p + 1 < n) {
			if (s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#'))
				break;
			p++;
		}
		if (p + 1 >= n) {
			emit_data(L, pos, s + pos, n - pos);
			break;
		}
		if (s[p + 1] == '%' && (raw_end = match_raw(s, n, p, "raw", false, &sign)))
			kind = 4;
		else {
			kind = s[p + 1] == '{' ? 1 : s[p + 1] == '%' ? 2 : 3;
			sign = (p + 2 < n && (s[p + 2] == '-' || s[p + 2] == '+')) ? s[p + 2] : 0;
		}
		size_t te = p;
		strip_data(L, pos, &te, sign, kind == 1, line_starting);
		emit_data(L, pos, s + pos, te - pos);
		if (kind == 4) {
			/* raw: data up to {% endraw %} */
			size_t q = raw_end, end = 0;
			int esign = 0;
			for (; q + 1 < n; q++)
				if (s[q] == '{' && s[q + 1] == '%' && (end = match_raw(s, n, q, "endraw", true, &esign)))
					break;
			if (!end)
				lex_fail(L, p, "missing end of raw directive");
			size_t de = q;
			strip_data(L, raw_end, &de, esign, false, s[raw_end - 1] == '\n');
			emit_data(L, raw_end, s + raw_end, de - raw_end);
			pos = end;
			line_starting = s[end - 1] == '\n';
			continue;
		}
		if (kind == 3) {
			size_t q = p + 2 + (sign ? 1 : 0), end = 0;
			for (; q < n; q++) {
				if (starts(s, n, q, "+#}")) {
					end = q + 3;
					break;
				}
				if (starts(s, n, q, "-#}")) {
					size_t w;
					end = q + 3;
					while ((w = ws_at(s + end, n - end)))
						end += w;
					break;
				}
				if (starts(s, n, q, "#}")) {
					end = q + 2 + (q + 2 < n && s[q + 2] == '\n');
					break;
				}
			}
			if (!end)
				lex_fail(L, p, "missing end of comment tag");
			pos = end;
			line_starting = s[end - 1] == '\n';
			continue;
		}
		push_tok(L, kind == 1 ? T_VBEGIN : T_BBEGIN, p);
		pos = lex_tag(L, p + 2 + (sign ? 1 : 0), kind == 2, p);
		line_starting = s[pos - 1] == '\n';
	}
	push_tok(L, T_EOF, n);
}

/* ===================================================================== AST + parser (jinja2/parser.py) */

enum nk {
	/* statements */
	N_DATA, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_FILTERBLOCK, N_BREAK, N_CONTINUE,
	/* expressions */
	E_CONST, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_NEG, E_POS,
	E_NOT, E_AND, E_OR, E_CMP, E_COND, E_LIST, E_TUPLE, E_DICT, E_CONCAT, E_BLOCKVAL,
};

enum binop { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW };
enum cmpop { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

struct nlist {
	struct node **v;
	size_t n, cap;
};

struct node {
	uint8_t k, op;
	bool flag;              /* FOR: recursive; SETBLOCK etc. */
	int line, col;
	struct val v;           /* E_CONST */
	const char *name;       /* NAME/ATTR/FILTER/TEST/MACRO */
	struct node *a, *b, *c, *d;
	struct nlist kids;      /* args, items, body (statements), CMP operands */
	struct nlist kids2;     /* else body, DICT values, kwarg values, macro defaults */
	const char **knames;    /* kwarg names (kids2 holds values) */
	uint8_t *cmpops;        /* E_CMP */
	int fid;                /* filter/test id */
};

struct parser {
	struct jx *x;
	struct tok *t;
	size_t i, n;
	int depth;
	int in_loop;
	bool soft;              /* inside an if statement or if-expression (Jinja2's soft frame) */
	struct nlist unknown;   /* filters/tests Jinja2 does not know: a compile error outside soft frames */
};

static void nl_push(struct jx *x, struct nlist *l, struct node *nd)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4;
		struct node **nv = jalloc(x, cap * sizeof *nv);
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof *nv);
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = nd;
}

static struct tok *cur(struct parser *P)
{
	return &P->t[P->i];
}

static struct tok *look(struct parser *P)
{
	return &P->t[P->i + 1 < P->n ? P->i + 1 : P->n - 1];
}

static void advance(struct parser *P)
{
	if (P->i + 1 < P->n)
		P->i++;
}

static bool tok_is_op(const struct tok *k, const char *op)
{
	return k->t == T_OP && k->len == strlen(op) && !memcmp(k->s, op, k->len);
}

static bool tok_is_name(const struct tok *k, const char *nm)
{
	return k->t == T_NAME && k->len == strlen(nm) && !memcmp(k->s, nm, k->len);
}

static const char *tok_desc(struct parser *P, const struct tok *k)
{
	char *b = jalloc(P->x, 80);
	switch (k->t) {
	case T_DATA: return "template data";
	case T_VBEGIN: return "'{{'";
	case T_VEND: return "end of print statement";
	case T_BBEGIN: return "'{%'";
	case T_BEND: return "end of statement block";
	case T_EOF: return "end of template";
	case T_STR: return "string";
	case T_INT: return "integer";
	case T_FLOAT: return "float";
	default:
		snprintf(b, 80, "'%.*s'", (int)(k->len > 60 ? 60 : k->len), k->s);
		return b;
	}
}

static _Noreturn void pfail(struct parser *P, const struct tok *k, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static _Noreturn void pfail(struct parser *P, const struct tok *k, const char *fmt, ...)
{
	char m[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	jfail(P->x, -LYNN_EFORMAT, k->line, k->col, "%s", m);
}

static struct node *mknode(struct parser *P, int k, const struct tok *at)
{
	struct node *nd = jzalloc(P->x, sizeof *nd);
	nd->k = (uint8_t)k;
	nd->line = at->line;
	nd->col = at->col;
	return nd;
}

static const char *tok_cstr(struct parser *P, const struct tok *k)
{
	return mkstr(P->x, k->s, k->len)->d;
}

static void expect_op(struct parser *P, const char *op)
{
	if (!tok_is_op(cur(P), op))
		pfail(P, cur(P), "expected '%s', got %s", op, tok_desc(P, cur(P)));
	advance(P);
}

static const char *expect_name(struct parser *P)
{
	const char *s;
	if (cur(P)->t != T_NAME)
		pfail(P, cur(P), "expected a name, got %s", tok_desc(P, cur(P)));
	s = tok_cstr(P, cur(P));
	advance(P);
	return s;
}

static void expect_bend(struct parser *P)
{
	if (cur(P)->t != T_BEND)
		pfail(P, cur(P), "expected end of statement block, got %s", tok_desc(P, cur(P)));
	advance(P);
}

static void enter(struct parser *P)
{
	if (++P->depth > PARSE_MAX_DEPTH)
		pfail(P, cur(P), "template nested too deeply (more than %d levels)", PARSE_MAX_DEPTH);
}

/* ---- filter and test tables ---- */

enum filt {
	F_ABS, F_ATTR, F_CAPITALIZE, F_CENTER, F_COUNT, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST,
	F_FLOAT, F_FORCEESCAPE, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER,
	F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE,
	F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE,
	F_UPPER, F_WORDCOUNT, F_FORMAT, F_STRIPTAGS, F_BATCH,
};

static const struct {
	const char *name;
	int id;
} filters[] = {
	{ "abs", F_ABS }, { "attr", F_ATTR }, { "capitalize", F_CAPITALIZE }, { "center", F_CENTER },
	{ "count", F_COUNT }, { "d", F_DEFAULT }, { "default", F_DEFAULT },
	{ "dictsort", F_DICTSORT }, { "e", F_ESCAPE }, { "escape", F_ESCAPE }, { "first", F_FIRST },
	{ "float", F_FLOAT }, { "forceescape", F_FORCEESCAPE }, { "indent", F_INDENT },
	{ "int", F_INT }, { "items", F_ITEMS }, { "join", F_JOIN }, { "last", F_LAST },
	{ "length", F_LENGTH }, { "list", F_LIST }, { "lower", F_LOWER }, { "map", F_MAP },
	{ "max", F_MAX }, { "min", F_MIN }, { "reject", F_REJECT }, { "rejectattr", F_REJECTATTR },
	{ "replace", F_REPLACE }, { "reverse", F_REVERSE }, { "round", F_ROUND }, { "safe", F_SAFE },
	{ "select", F_SELECT }, { "selectattr", F_SELECTATTR }, { "sort", F_SORT },
	{ "string", F_STRING }, { "sum", F_SUM }, { "title", F_TITLE }, { "tojson", F_TOJSON },
	{ "trim", F_TRIM }, { "unique", F_UNIQUE }, { "upper", F_UPPER },
	{ "wordcount", F_WORDCOUNT }, { "format", F_FORMAT }, { "striptags", F_STRIPTAGS },
	{ "batch", F_BATCH },
};

/* Jinja2 filters this engine does not implement: a template using one fails to parse with
 * "unsupported filter" rather than "unknown filter". */
static const char *const filters_unsupported[] = {
	"filesizeformat", "groupby", "pprint", "random", "slice", "truncate", "urlencode",
	"urlize", "wordwrap", "xmlattr",
};

enum test {
	X_ODD, X_EVEN, X_DIVISIBLEBY, X_DEFINED, X_UNDEFINED, X_NONE, X_BOOLEAN, X_FALSE, X_TRUE,
	X_INTEGER, X_FLOAT, X_LOWER, X_UPPER, X_STRING, X_MAPPING, X_NUMBER, X_SEQUENCE,
	X_ITERABLE, X_CALLABLE, X_SAMEAS, X_ESCAPED, X_IN, X_EQ, X_NE, X_GT, X_GE, X_LT, X_LE,
	X_FILTER, X_TEST,
};

static const struct {
	const char *name;
	int id;
} tests[] = {
	{ "odd", X_ODD }, { "even", X_EVEN }, { "divisibleby", X_DIVISIBLEBY },
	{ "defined", X_DEFINED }, { "undefined", X_UNDEFINED }, { "none", X_NONE },
	{ "boolean", X_BOOLEAN }, { "false", X_FALSE }, { "true", X_TRUE }, { "integer", X_INTEGER },
	{ "float", X_FLOAT }, { "lower", X_LOWER }, { "upper", X_UPPER }, { "string", X_STRING },
	{ "mapping", X_MAPPING }, { "number", X_NUMBER }, { "sequence", X_SEQUENCE },
	{ "iterable", X_ITERABLE }, { "callable", X_CALLABLE }, { "sameas", X_SAMEAS },
	{ "escaped", X_ESCAPED }, { "in", X_IN }, { "==", X_EQ }, { "eq", X_EQ },
	{ "equalto", X_EQ }, { "!=", X_NE }, { "ne", X_NE }, { ">", X_GT }, { "gt", X_GT },
	{ "greaterthan", X_GT }, { ">=", X_GE }, { "ge", X_GE }, { "<", X_LT }, { "lt", X_LT },
	{ "lessthan", X_LT }, { "<=", X_LE }, { "le", X_LE }, { "filter", X_FILTER },
	{ "test", X_TEST },
};

static int find_filter(const char *name)
{
	for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
		if (!strcmp(filters[i].name, name))
			return filters[i].id;
	return -1;
}

static int find_test(const char *name)
{
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
		if (!strcmp(tests[i].name, name))
			return tests[i].id;
	return -1;
}

/* ---- expressions ---- */

static struct node *parse_expression(struct parser *P, bool with_condexpr);
static struct node *parse_tuple(struct parser *P, bool with_condexpr, const char *extra_end,
				bool explicit_parens);
static struct node *parse_unary(struct parser *P, bool with_filter);
static struct node *parse_primary(struct parser *P);
static struct node *parse_postfix(struct parser *P, struct node *nd);

static void parse_call_args(struct parser *P, struct node *call)
{
	/* at '(' */
	expect_op(P, "(");
	while (!tok_is_op(cur(P), ")")) {
		if (call->kids.n || call->knames)
			expect_op(P, ",");
		if (tok_is_op(cur(P), ")"))
			break;
		if (tok_is_op(cur(P), "*") || tok_is_op(cur(P), "**"))
			pfail(P, cur(P), "*args and **kwargs in calls are not supported");
		if (cur(P)->t == T_NAME && tok_is_op(look(P), "=")) {
			const char *k = tok_cstr(P, cur(P));
			size_t nk = call->kids2.n;
			const char **kn = jalloc(P->x, (nk + 1) * sizeof *kn);
			advance(P);
			advance(P);
			if (nk)
				memcpy(kn, call->knames, nk * sizeof *kn);
			kn[nk] = k;
			call->knames = kn;
			nl_push(P->x, &call->kids2, parse_expression(P, true));
		} else {
			if (call->kids2.n)
				pfail(P, cur(P), "positional argument follows keyword argument");
			nl_push(P->x, &call->kids, parse_expression(P, true));
		}
	}
	advance(P);
}

static const char *dotted_name(struct parser *P)
{
	const char *nm = expect_name(P);
	while (tok_is_op(cur(P), ".")) {
		const char *more;
		char *j;
		advance(P);
		more = expect_name(P);
		j = jalloc(P->x, strlen(nm) + strlen(more) + 2);
		sprintf(j, "%s.%s", nm, more);
		nm = j;
	}
	return nm;
}

static struct node *parse_filter(struct parser *P, struct node *nd, bool start_inline)
{
	while (tok_is_op(cur(P), "|") || start_inline) {
		struct tok *at;
		struct node *f;
		if (!start_inline)
			advance(P);
		at = cur(P);
		f = mknode(P, E_FILTER, at);
		f->name = dotted_name(P);
		f->fid = find_filter(f->name);
		if (f->fid < 0) {
			/* Jinja2 filters lynn lacks fail when run (-2); unknown names fail at compile
			 * time unless inside an if (-1, checked after parsing). */
			for (size_t i = 0; i < sizeof filters_unsupported / sizeof filters_unsupported[0]; i++)
				if (!strcmp(filters_unsupported[i], f->name))
					f->fid = -2;
			if (f->fid == -1) {
				f->flag = P->soft;
				nl_push(P->x, &P->unknown, f);
			}
		}
		f->a = nd;
		if (tok_is_op(cur(P), "("))
			parse_call_args(P, f);
		nd = f;
		start_inline = false;
	}
	return nd;
}

static struct node *parse_test(struct parser *P, struct node *nd)
{
	struct tok *at = cur(P);
	bool neg = false;
	struct node *t;
	advance(P); /* is */
	if (tok_is_name(cur(P), "not")) {
		neg = true;
		advance(P);
	}
	t = mknode(P, E_TEST, cur(P));
	t->name = dotted_name(P);
	t->fid = find_test(t->name);
	if (t->fid < 0) {
		t->flag = P->soft;
		nl_push(P->x, &P->unknown, t);
	}
	t->a = nd;
	if (tok_is_op(cur(P), "(")) {
		parse_call_args(P, t);
	} else {
		struct tok *c = cur(P);
		bool arg = c->t == T_NAME || c->t == T_STR || c->t == T_INT || c->t == T_FLOAT ||
			   tok_is_op(c, "(") || tok_is_op(c, "[") || tok_is_op(c, "{");
		if (arg && !(tok_is_name(c, "else") || tok_is_name(c, "or") || tok_is_name(c, "and"))) {
			if (tok_is_name(c, "is"))
				pfail(P, c, "you cannot chain multiple tests with is");
			nl_push(P->x, &t->kids, parse_postfix(P, parse_primary(P)));
		}
	}
	if (neg) {
		struct node *n2 = mknode(P, E_NOT, at);
		n2->a = t;
		return n2;
	}
	return t;
}

static struct node *parse_subscribed(struct parser *P)
{
	struct tok *at = cur(P);
	struct node *args[3] = { NULL, NULL, NULL };
	struct node *sl;
	if (tok_is_op(cur(P), ":")) {
		advance(P);
	} else {
		struct node *e = parse_expression(P, true);
		if (!tok_is_op(cur(P), ":"))
			return e;
		advance(P);
		args[0] = e;
	}
	if (!tok_is_op(cur(P), ":") && !tok_is_op(cur(P), "]") && !tok_is_op(cur(P), ","))
		args[1] = parse_expression(P, true);
	if (tok_is_op(cur(P), ":")) {
		advance(P);
		if (!tok_is_op(cur(P), "]") && !tok_is_op(cur(P), ","))
			args[2] = parse_expression(P, true);
	}
	sl = mknode(P, E_SLICE, at);
	sl->b = args[0];
	sl->c = args[1];
	sl->d = args[2];
	return sl;
}

static struct node *parse_postfix(struct parser *P, struct node *nd)
{
	for (;;) {
		struct tok *at = cur(P);
		if (tok_is_op(at, ".")) {
			struct node *g;
			advance(P);
			if (cur(P)->t == T_NAME) {
				g = mknode(P, E_ATTR, at);
				g->name = tok_cstr(P, cur(P));
				g->a = nd;
				advance(P);
			} else if (cur(P)->t == T_INT) {
				g = mknode(P, E_ITEM, at);
				g->a = nd;
				g->b = mknode(P, E_CONST, cur(P));
				g->b->v = vint(cur(P)->i);
				advance(P);
			} else {
				pfail(P, cur(P), "expected a name or number after '.'");
			}
			nd = g;
		} else if (tok_is_op(at, "[")) {
			struct nlist args = { 0 };
			struct node *g = mknode(P, E_ITEM, at);
			advance(P);
			while (!tok_is_op(cur(P), "]")) {
				if (args.n)
					expect_op(P, ",");
				nl_push(P->x, &args, parse_subscribed(P));
			}
			advance(P);
			if (!args.n)
				pfail(P, at, "expected a subscript");
			g->a = nd;
			if (args.n == 1 && args.v[0]->k == E_SLICE) {
				g = args.v[0];
				g->a = nd;
			} else if (args.n == 1) {
				g->b = args.v[0];
			} else {
				g->b = mknode(P, E_TUPLE, at);
				g->b->kids = args;
			}
			nd = g;
		} else if (tok_is_op(at, "(")) {
			struct node *c = mknode(P, E_CALL, at);
			c->a = nd;
			parse_call_args(P, c);
			nd = c;
		} else {
			return nd;
		}
	}
}

static struct node *parse_filter_expr(struct parser *P, struct node *nd)
{
	for (;;) {
		if (tok_is_op(cur(P), "|")) {
			nd = parse_filter(P, nd, false);
		} else if (tok_is_name(cur(P), "is")) {
			nd = parse_test(P, nd);
		} else if (tok_is_op(cur(P), "(")) {
			struct node *c = mknode(P, E_CALL, cur(P));
			c->a = nd;
			parse_call_args(P, c);
			nd = c;
		} else {
			return nd;
		}
	}
}

static struct node *parse_primary(struct parser *P)
{
	struct tok *k = cur(P);
	struct node *nd;
	enter(P);
	if (k->t == T_NAME) {
		nd = mknode(P, E_CONST, k);
		if (tok_is_name(k, "true") || tok_is_name(k, "True"))
			nd->v = vbool(true);
		else if (tok_is_name(k, "false") || tok_is_name(k, "False"))
			nd->v = vbool(false);
		else if (tok_is_name(k, "none") || tok_is_name(k, "None"))
			nd->v = V_NONE;
		else {
			nd->k = E_NAME;
			nd->name = tok_cstr(P, k);
		}
		advance(P);
	} else if (k->t == T_STR) {
		struct lynn_buf b = LYNN_BUF_INIT;
		nd = mknode(P, E_CONST, k);
		while (cur(P)->t == T_STR) {
			if (lynn_buf_append(&b, cur(P)->s, cur(P)->len)) {
				lynn_buf_release(&b);
				jfail(P->x, -LYNN_ENOMEM, 0, 0, "out of memory");
			}
			advance(P);
		}
		nd->v = vstr(P->x, b.data ? b.data : "", b.len);
		lynn_buf_release(&b);
	} else if (k->t == T_INT) {
		nd = mknode(P, E_CONST, k);
		nd->v = vint(k->i);
		advance(P);
	} else if (k->t == T_FLOAT) {
		nd = mknode(P, E_CONST, k);
		nd->v = vfloat(k->f);
		advance(P);
	} else if (tok_is_op(k, "(")) {
		advance(P);
		nd = parse_tuple(P, true, NULL, true);
		expect_op(P, ")");
	} else if (tok_is_op(k, "[")) {
		nd = mknode(P, E_LIST, k);
		advance(P);
		while (!tok_is_op(cur(P), "]")) {
			if (nd->kids.n)
				expect_op(P, ",");
			if (tok_is_op(cur(P), "]"))
				break;
			nl_push(P->x, &nd->kids, parse_expression(P, true));
		}
		advance(P);
	} else if (tok_is_op(k, "{")) {
		nd = mknode(P, E_DICT, k);
		advance(P);
		while (!tok_is_op(cur(P), "}")) {
			if (nd->kids.n)
				expect_op(P, ",");
			if (tok_is_op(cur(P), "}"))
				break;
			nl_push(P->x, &nd->kids, parse_expression(P, true));
			expect_op(P, ":");
			nl_push(P->x, &nd->kids2, parse_expression(P, true));
		}
		advance(P);
	} else {
		pfail(P, k, "unexpected %s", tok_desc(P, k));
	}
	P->depth--;
	return nd;
}

static struct node *parse_unary(struct parser *P, bool with_filter)
{
	struct tok *k = cur(P);
	struct node *nd;
	enter(P);
	if (tok_is_op(k, "-") || tok_is_op(k, "+")) {
		nd = mknode(P, tok_is_op(k, "-") ? E_NEG : E_POS, k);
		advance(P);
		nd->a = parse_unary(P, false);
	} else {
		nd = parse_primary(P);
	}
	nd = parse_postfix(P, nd);
	if (with_filter)
		nd = parse_filter_expr(P, nd);
	P->depth--;
	return nd;
}

static struct node *binop(struct parser *P, int op, struct tok *at, struct node *a, struct node *b)
{
	struct node *nd = mknode(P, E_BIN, at);
	nd->op = (uint8_t)op;
	nd->a = a;
	nd->b = b;
	return nd;
}

static struct node *parse_pow(struct parser *P)
{
	struct node *l = parse_unary(P, true);
	while (tok_is_op(cur(P), "**")) {
		struct tok *at = cur(P);
		advance(P);
		l = binop(P, OP_POW, at, l, parse_unary(P, true));
	}
	return l;
}

static struct node *parse_math2(struct parser *P)
{
	struct node *l = parse_pow(P);
	for (;;) {
		struct tok *at = cur(P);
		int op;
		if (tok_is_op(at, "*"))
			op = OP_MUL;
		else if (tok_is_op(at, "/"))
			op = OP_DIV;
		else if (tok_is_op(at, "//"))
			op = OP_FDIV;
		else if (tok_is_op(at, "%"))
			op = OP_MOD;
		else
			return l;
		advance(P);
		l = binop(P, op, at, l, parse_pow(P));
	}
}

static struct node *parse_concat(struct parser *P)
{
	struct tok *at = cur(P);
	struct node *first = parse_math2(P), *nd;
	if (!tok_is_op(cur(P), "~"))
		return first;
	nd = mknode(P, E_CONCAT, at);
	nl_push(P->x, &nd->kids, first);
	while (tok_is_op(cur(P), "~")) {
		advance(P);
		nl_push(P->x, &nd->kids, parse_math2(P));
	}
	return nd;
}

static struct node *parse_math1(struct parser *P)
{
	struct node *l = parse_concat(P);
	for (;;) {
		struct tok *at = cur(P);
		int op;
		if (tok_is_op(at, "+"))
			op = OP_ADD;
		else if (tok_is_op(at, "-"))
			op = OP_SUB;
		else
			return l;
		advance(P);
		l = binop(P, op, at, l, parse_concat(P));
	}
}

static struct node *parse_compare(struct parser *P)
{
	struct tok *at = cur(P);
	struct node *e = parse_math1(P), *nd = NULL;
	uint8_t ops[64];
	size_t nops = 0;
	for (;;) {
		struct tok *k = cur(P);
		int op = -1;
		if (tok_is_op(k, "=="))
			op = C_EQ;
		else if (tok_is_op(k, "!="))
			op = C_NE;
		else if (tok_is_op(k, "<"))
			op = C_LT;
		else if (tok_is_op(k, "<="))
			op = C_LE;
		else if (tok_is_op(k, ">"))
			op = C_GT;
		else if (tok_is_op(k, ">="))
			op = C_GE;
		else if (tok_is_name(k, "in"))
			op = C_IN;
		else if (tok_is_name(k, "not") && tok_is_name(look(P), "in")) {
			op = C_NOTIN;
			advance(P);
		}
		if (op < 0)
			break;
		advance(P);
		if (!nd) {
			nd = mknode(P, E_CMP, at);
			nl_push(P->x, &nd->kids, e);
		}
		if (nops == sizeof ops)
			pfail(P, k, "comparison chain too long");
		ops[nops++] = (uint8_t)op;
		nl_push(P->x, &nd->kids, parse_math1(P));
	}
	if (!nd)
		return e;
	nd->cmpops = jalloc(P->x, nops);
	memcpy(nd->cmpops, ops, nops);
	return nd;
}

static struct node *parse_not(struct parser *P)
{
	if (tok_is_name(cur(P), "not")) {
		struct node *nd = mknode(P, E_NOT, cur(P));
		advance(P);
		enter(P);
		nd->a = parse_not(P);
		P->depth--;
		return nd;
	}
	return parse_compare(P);
}

static struct node *parse_and(struct parser *P)
{
	struct node *l = parse_not(P);
	while (tok_is_name(cur(P), "and")) {
		struct node *nd = mknode(P, E_AND, cur(P));
		advance(P);
		nd->a = l;
		nd->b = parse_not(P);
		l = nd;
	}
	return l;
}

static struct node *parse_or(struct parser *P)
{
	struct node *l = parse_and(P);
	while (tok_is_name(cur(P), "or")) {
		struct node *nd = mknode(P, E_OR, cur(P));
		advance(P);
		nd->a = l;
		nd->b = parse_and(P);
		l = nd;
	}
	return l;
}

static void mark_soft(struct node *nd, int depth)
{
	if (!nd || depth > PARSE_MAX_DEPTH * 4)
		return;
	if ((nd->k == E_FILTER || nd->k == E_TEST) && nd->fid == -1)
		nd->flag = true;
	mark_soft(nd->a, depth + 1);
	mark_soft(nd->b, depth + 1);
	mark_soft(nd->c, depth + 1);
	mark_soft(nd->d, depth + 1);
	for (size_t i = 0; i < nd->kids.n; i++)
		mark_soft(nd->kids.v[i], depth + 1);
	for (size_t i = 0; i < nd->kids2.n; i++)
		mark_soft(nd->kids2.v[i], depth + 1);
}

static struct node *parse_condexpr(struct parser *P)
{
	struct node *e1 = parse_or(P);
	while (tok_is_name(cur(P), "if")) {
		struct node *nd = mknode(P, E_COND, cur(P));
		advance(P);
		nd->a = e1;            /* value if true */
		nd->b = parse_or(P);   /* condition */
		if (tok_is_name(cur(P), "else")) {
			advance(P);
			enter(P);
			nd->c = parse_condexpr(P);
			P->depth--;
		}
		mark_soft(nd, 0);
		e1 = nd;
	}
	return e1;
}

static struct node *parse_expression(struct parser *P, bool with_condexpr)
{
	struct node *nd;
	enter(P);
	nd = with_condexpr ? parse_condexpr(P) : parse_or(P);
	P->depth--;
	return nd;
}

static bool tuple_end(struct parser *P, const char *extra_end)
{
	struct tok *k = cur(P);
	if (k->t == T_VEND || k->t == T_BEND || k->t == T_EOF || tok_is_op(k, ")"))
		return true;
	return extra_end && tok_is_name(k, extra_end);
}

static struct node *parse_tuple(struct parser *P, bool with_condexpr, const char *extra_end,
				bool explicit_parens)
{
	struct tok *at = cur(P);
	struct nlist args = { 0 };
	bool is_tuple = false;
	struct node *nd;
	for (;;) {
		if (args.n)
			expect_op(P, ",");
		if (tuple_end(P, extra_end))
			break;
		nl_push(P->x, &args, parse_expression(P, with_condexpr));
		if (tok_is_op(cur(P), ","))
			is_tuple = true;
		else
			break;
	}
	if (!is_tuple) {
		if (args.n)
			return args.v[0];
		if (!explicit_parens)
			pfail(P, cur(P), "expected an expression, got %s", tok_desc(P, cur(P)));
	}
	nd = mknode(P, E_TUPLE, at);
	nd->kids = args;
	return nd;
}

/* Assignment target: a name, ns.attr (with_ns) or a tuple of names. */
static struct node *parse_assign_target(struct parser *P, bool with_ns, const char *extra_end)
{
	struct tok *at = cur(P);
	struct node *nd;
	if (with_ns && cur(P)->t == T_NAME && tok_is_op(look(P), ".")) {
		nd = mknode(P, E_ATTR, at);
		nd->a = mknode(P, E_NAME, at);
		nd->a->name = expect_name(P);
		advance(P);
		nd->name = expect_name(P);
		return nd;
	}
	nd = mknode(P, E_TUPLE, at);
	for (;;) {
		struct node *nm;
		if (nd->kids.n)
			expect_op(P, ",");
		if (tuple_end(P, extra_end) || tok_is_op(cur(P), "="))
			break;
		if (tok_is_op(cur(P), "(")) {
			advance(P);
			nm = parse_assign_target(P, false, NULL);
			expect_op(P, ")");
		} else {
			nm = mknode(P, E_NAME, cur(P));
			nm->name = expect_name(P);
		}
		nl_push(P->x, &nd->kids, nm);
		if (!tok_is_op(cur(P), ","))
			break;
	}
	if (!nd->kids.n)
		pfail(P, at, "expected an assignment target");
	if (nd->kids.n == 1 && !tok_is_op(&P->t[P->i - 1], ","))
		return nd->kids.v[0];
	return nd;
}

/* ---- statements ---- */

static void parse_body(struct parser *P, struct nlist *body, const char *const *ends,
		       const struct tok *opener, const char *opener_name);

static struct node *parse_statement(struct parser *P);

static bool at_end_tag(struct parser *P, const char *const *ends)
{
	if (cur(P)->t != T_BBEGIN)
		return false;
	for (size_t i = 0; ends && ends[i]; i++)
		if (tok_is_name(look(P), ends[i]))
			return true;
	return false;
}

static void parse_body(struct parser *P, struct nlist *body, const char *const *ends,
		       const struct tok *opener, const char *opener_name)
{
	enter(P);
	for (;;) {
		struct tok *k = cur(P);
		if (k->t == T_EOF) {
			if (ends) {
				char want[200] = "";
				for (size_t i = 0; ends[i]; i++)
					snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'",
						 i ? " or " : "", ends[i]);
				jfail(P->x, -LYNN_EFORMAT, opener->line, opener->col,
				      "unexpected end of template: the '%s' block opened here was never "
				      "closed (looking for %s)", opener_name, want);
			}
			break;
		}
		if (k->t == T_DATA) {
			struct node *nd = mknode(P, N_DATA, k);
			nd->v = vstr(P->x, k->s, k->len);
			nl_push(P->x, body, nd);
			advance(P);
		} else if (k->t == T_VBEGIN) {
			struct node *nd = mknode(P, N_OUT, k);
			advance(P);
			nd->a = parse_tuple(P, true, NULL, false);
			if (cur(P)->t != T_VEND)
				pfail(P, cur(P), "expected end of print statement, got %s", tok_desc(P, cur(P)));
			advance(P);
			nl_push(P->x, body, nd);
		} else if (k->t == T_BBEGIN) {
			if (at_end_tag(P, ends))
				break;
			nl_push(P->x, body, parse_statement(P));
		} else {
			pfail(P, k, "unexpected %s", tok_desc(P, k));
		}
	}
	P->depth--;
}

static struct node *parse_if(struct parser *P, struct tok *at)
{
	static const char *const ends[] = { "elif", "else", "endif", NULL };
	struct node *nd = mknode(P, N_IF, at), *top = nd;
	bool saved = P->soft;
	P->soft = true;
	for (;;) {
		nd->a = parse_tuple(P, false, NULL, false);
		expect_bend(P);
		parse_body(P, &nd->kids, ends, at, "if");
		advance(P); /* {% */
		if (tok_is_name(cur(P), "elif")) {
			struct node *el = mknode(P, N_IF, cur(P));
			advance(P);
			nl_push(P->x, &nd->kids2, el);
			nd = el;
			continue;
		}
		if (tok_is_name(cur(P), "else")) {
			static const char *const e2[] = { "endif", NULL };
			advance(P);
			expect_bend(P);
			parse_body(P, &nd->kids2, e2, at, "if");
			advance(P);
		}
		advance(P); /* endif */
		expect_bend(P);
		P->soft = saved;
		return top;
	}
}

static struct node *parse_for(struct parser *P, struct tok *at)
{
	static const char *const ends[] = { "endfor", "else", NULL };
	static const char *const e2[] = { "endfor", NULL };
	struct node *nd = mknode(P, N_FOR, at);
	nd->a = parse_assign_target(P, false, "in");
	if (!tok_is_name(cur(P), "in"))
		pfail(P, cur(P), "expected 'in', got %s", tok_desc(P, cur(P)));
	advance(P);
	nd->b = parse_tuple(P, false, "recursive", false);
	if (tok_is_name(cur(P), "if")) {
		advance(P);
		nd->c = parse_expression(P, true);
	}
	if (tok_is_name(cur(P), "recursive"))
		pfail(P, cur(P), "recursive for loops are not supported");
	expect_bend(P);
	bool saved = P->soft;
	P->soft = false;
	P->in_loop++;
	parse_body(P, &nd->kids, ends, at, "for");
	P->in_loop--;
	advance(P);
	if (tok_is_name(cur(P), "else")) {
		advance(P);
		expect_bend(P);
		parse_body(P, &nd->kids2, e2, at, "for");
		advance(P);
	}
	advance(P);
	expect_bend(P);
	P->soft = saved;
	return nd;
}

static struct node *parse_set(struct parser *P, struct tok *at)
{
	static const char *const ends[] = { "endset", NULL };
	struct node *nd = mknode(P, N_SET, at);
	nd->a = parse_assign_target(P, true, NULL);
	if (tok_is_op(cur(P), "=")) {
		advance(P);
		nd->b = parse_tuple(P, true, NULL, false);
		expect_bend(P);
		return nd;
	}
	nd->k = N_SETBLOCK;
	if (tok_is_op(cur(P), "|"))
		nd->c = parse_filter(P, mknode(P, E_BLOCKVAL, cur(P)), false);
	expect_bend(P);
	bool saved = P->soft;
	P->soft = false;
	parse_body(P, &nd->kids, ends, at, "set");
	P->soft = saved;
	advance(P);
	advance(P);
	expect_bend(P);
	return nd;
}

static struct node *parse_macro(struct parser *P, struct tok *at)
{
	static const char *const ends[] = { "endmacro", NULL };
	struct node *nd = mknode(P, N_MACRO, at);
	int saved_loop = P->in_loop;
	bool saved_soft = P->soft;
	P->soft = false;
	nd->name = expect_name(P);
	expect_op(P, "(");
	while (!tok_is_op(cur(P), ")")) {
		struct node *arg;
		if (nd->kids.n)
			expect_op(P, ",");
		if (tok_is_op(cur(P), ")"))
			break;
		arg = mknode(P, E_NAME, cur(P));
		arg->name = expect_name(P);
		nl_push(P->x, &nd->kids, arg);
		if (tok_is_op(cur(P), "=")) {
			advance(P);
			nl_push(P->x, &nd->kids2, parse_expression(P, true));
		} else {
			for (size_t q = 0; q < nd->kids2.n; q++)
				if (nd->kids2.v[q])
					pfail(P, cur(P), "non-default argument follows default argument");
			nl_push(P->x, &nd->kids2, NULL);
		}
	}
	advance(P);
	expect_bend(P);
	P->in_loop = 0;
	/* the body goes in kids2 after the defaults? keep separate: body in ->a as a list holder */
	nd->a = mknode(P, N_DATA, at);
	parse_body(P, &nd->a->kids, ends, at, "macro");
	P->in_loop = saved_loop;
	P->soft = saved_soft;
	advance(P);
	advance(P);
	expect_bend(P);
	return nd;
}

static struct node *parse_statement(struct parser *P)
{
	struct tok *at, *nm;
	struct node *nd;
	advance(P); /* {% */
	at = cur(P);
	nm = cur(P);
	if (nm->t != T_NAME)
		pfail(P, nm, "tag name expected");
	advance(P);
	enter(P);
	if (tok_is_name(nm, "if")) {
		nd = parse_if(P, at);
	} else if (tok_is_name(nm, "for")) {
		nd = parse_for(P, at);
	} else if (tok_is_name(nm, "set")) {
		nd = parse_set(P, at);
	} else if (tok_is_name(nm, "macro")) {
		nd = parse_macro(P, at);
	} else if (tok_is_name(nm, "filter")) {
		static const char *const ends[] = { "endfilter", NULL };
		bool saved = P->soft;
		nd = mknode(P, N_FILTERBLOCK, at);
		nd->c = parse_filter(P, mknode(P, E_BLOCKVAL, cur(P)), true);
		expect_bend(P);
		P->soft = false;
		parse_body(P, &nd->kids, ends, at, "filter");
		P->soft = saved;
		advance(P);
		advance(P);
		expect_bend(P);
	} else if (tok_is_name(nm, "break") || tok_is_name(nm, "continue")) {
		if (!P->in_loop)
			pfail(P, nm, "'%s' outside of a loop", tok_is_name(nm, "break") ? "break" : "continue");
		nd = mknode(P, tok_is_name(nm, "break") ? N_BREAK : N_CONTINUE, at);
		expect_bend(P);
	} else {
		static const char *const known[] = { "call", "with", "block", "extends", "include",
						     "import", "from", "autoescape", "do", NULL };
		for (size_t i = 0; known[i]; i++)
			if (tok_is_name(nm, known[i]))
				pfail(P, nm, "the '%s' tag is not supported", known[i]);
		pfail(P, nm, "unknown tag '%.*s'", (int)(nm->len > 60 ? 60 : nm->len), nm->s);
	}
	P->depth--;
	return nd;
}

/* ===================================================================== template object */

struct lynn_jinja {
	char *name;
	struct chunk *arena; /* tokens, AST, literals */
	struct nlist body;
};

/* ===================================================================== render state */

struct frame {
	struct frame *parent;
	size_t n, cap;
	const char **names;
	struct val *vals;
};

struct macro {
	const struct node *def;
	struct frame *closure;
};

enum fkind { FK_GLOBAL, FK_METHOD, FK_UNSAFE };

struct func {
	int kind;
	const char *name;
	struct val self;
};

struct loopst {
	struct jlist *items;
	size_t idx;
	int64_t cycle_dummy;
};

struct obuf {
	char *d;
	size_t n, cap;
};

struct rs {
	struct jx x;
	const struct lynn_jinja *t;
	struct jdict *ctx;
	unsigned max_depth, depth;
	uint64_t max_loop, loops;
	size_t max_output;
	time_t now;
	int ctl; /* 1 break, 2 continue */
};

static _Noreturn void rfail(struct rs *R, const struct node *nd, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static _Noreturn void rfail(struct rs *R, const struct node *nd, int code, const char *fmt, ...)
{
	char m[220];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	jfail(&R->x, code, nd ? nd->line : R->x.line, nd ? nd->col : R->x.col, "%s", m);
}

#define TFAIL(R, nd, ...) rfail(R, nd, -LYNN_EFORMAT, __VA_ARGS__)

static void ob_need(struct rs *R, struct obuf *o, size_t extra)
{
	if (o->n + extra + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 256;
		char *nd;
		while (cap < o->n + extra + 1)
			cap *= 2;
		if (o->n + extra > R->max_output)
			rfail(R, NULL, -LYNN_EUNSUPPORTED, "output limit of %zu bytes reached", R->max_output);
		nd = jalloc(&R->x, cap);
		if (o->n)
			memcpy(nd, o->d, o->n);
		o->d = nd;
		o->cap = cap;
	}
}

static void ob_put(struct rs *R, struct obuf *o, const char *s, size_t n)
{
	ob_need(R, o, n);
	memcpy(o->d + o->n, s, n);
	o->n += n;
	o->d[o->n] = 0;
}

static void ob_puts(struct rs *R, struct obuf *o, const char *s)
{
	ob_put(R, o, s, strlen(s));
}

static void ob_putc(struct rs *R, struct obuf *o, char c)
{
	ob_put(R, o, &c, 1);
}

static struct val ob_val(struct rs *R, struct obuf *o)
{
	return vstr(&R->x, o->d ? o->d : "", o->n);
}

/* ---- Python text forms ---- */

static bool py_printable(uint32_t c)
{
	if (c < 0x20 || c == 0x7f)
		return false;
	if (c < 0x7f)
		return true;
	switch (utf8proc_category((utf8proc_int32_t)c)) {
	case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
	case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
	case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
		return false;
	default:
		return true;
	}
}

static void repr_str(struct rs *R, struct obuf *o, const char *s, size_t n)
{
	char q = '\'';
	if (memchr(s, '\'', n) && !memchr(s, '"', n))
		q = '"';
	ob_putc(R, o, q);
	for (size_t i = 0; i < n;) {
		uint32_t c;
		size_t k = u8_decode((const unsigned char *)s + i, n - i, &c);
		char tmp[16];
		if (c == (uint32_t)q || c == '\\') {
			ob_putc(R, o, '\\');
			ob_putc(R, o, (char)c);
		} else if (c == '\t') {
			ob_puts(R, o, "\\t");
		} else if (c == '\n') {
			ob_puts(R, o, "\\n");
		} else if (c == '\r') {
			ob_puts(R, o, "\\r");
		} else if (!py_printable(c)) {
			if (c < 0x100)
				snprintf(tmp, sizeof tmp, "\\x%02x", c);
			else if (c < 0x10000)
				snprintf(tmp, sizeof tmp, "\\u%04x", c);
			else
				snprintf(tmp, sizeof tmp, "\\U%08x", c);
			ob_puts(R, o, tmp);
		} else {
			ob_put(R, o, s + i, k);
		}
		i += k;
	}
	ob_putc(R, o, q);
}

static void put_str(struct rs *R, struct obuf *o, const struct val *v, int depth);

static void put_repr(struct rs *R, struct obuf *o, const struct val *v, int depth)
{
	if (depth > VALUE_MAX_DEPTH)
		TFAIL(R, NULL, "value nested too deeply");
	switch (v->t) {
	case VT_STR:
		if (v->safe) {
			ob_puts(R, o, "Markup(");
			repr_str(R, o, v->u.s->d, v->u.s->len);
			ob_putc(R, o, ')');
		} else {
			repr_str(R, o, v->u.s->d, v->u.s->len);
		}
		return;
	case VT_LIST:
	case VT_TUPLE:
		if (v->t == VT_LIST && v->sub == LK_GEN) {
			ob_puts(R, o, "<generator object>");
			return;
		}
		if (v->t == VT_LIST && v->sub == LK_RANGE) {
			char tmp[64];
			const struct jlist *l = v->u.l;
			int64_t a = l->n ? l->v[0].u.i : 0, st = l->n > 1 ? l->v[1].u.i - a : 1;
			if (st == 1)
				snprintf(tmp, sizeof tmp, "range(%lld, %lld)", (long long)a, (long long)(a + (int64_t)l->n));
			else
				snprintf(tmp, sizeof tmp, "range(%lld, %lld, %lld)", (long long)a,
					 (long long)(a + (int64_t)l->n * st), (long long)st);
			ob_puts(R, o, tmp);
			return;
		}
		if (v->t == VT_LIST && v->sub != LK_LIST)
			ob_puts(R, o, v->sub == LK_ITEMS ? "dict_items(" : v->sub == LK_KEYS ? "dict_keys(" : "dict_values(");
		ob_putc(R, o, v->t == VT_LIST ? '[' : '(');
		for (size_t i = 0; i < v->u.l->n; i++) {
			if (i)
				ob_puts(R, o, ", ");
			put_repr(R, o, &v->u.l->v[i], depth + 1);
		}
		if (v->t == VT_TUPLE && v->u.l->n == 1)
			ob_putc(R, o, ',');
		ob_putc(R, o, v->t == VT_LIST ? ']' : ')');
		if (v->t == VT_LIST && v->sub != LK_LIST)
			ob_putc(R, o, ')');
		return;
	case VT_DICT:
		ob_putc(R, o, '{');
		for (size_t i = 0; i < v->u.d->n; i++) {
			if (i)
				ob_puts(R, o, ", ");
			put_repr(R, o, &v->u.d->k[i], depth + 1);
			ob_puts(R, o, ": ");
			put_repr(R, o, &v->u.d->v[i], depth + 1);
		}
		ob_putc(R, o, '}');
		return;
	default:
		put_str(R, o, v, depth);
	}
}

static void put_str(struct rs *R, struct obuf *o, const struct val *v, int depth)
{
	char tmp[64];
	switch (v->t) {
	case VT_UNDEF:
		return;
	case VT_NONE:
		ob_puts(R, o, "None");
		return;
	case VT_BOOL:
		ob_puts(R, o, v->u.b ? "True" : "False");
		return;
	case VT_INT:
		snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i);
		ob_puts(R, o, tmp);
		return;
	case VT_FLOAT:
		fmt_float(v->u.f, tmp, sizeof tmp);
		ob_puts(R, o, tmp);
		return;
	case VT_STR:
		ob_put(R, o, v->u.s->d, v->u.s->len);
		return;
	case VT_LIST:
	case VT_TUPLE:
	case VT_DICT:
		put_repr(R, o, v, depth);
		return;
	case VT_NS: {
		struct val d = vdict(v->u.d);
		ob_puts(R, o, "<Namespace ");
		put_repr(R, o, &d, depth + 1);
		ob_putc(R, o, '>');
		return;
	}
	case VT_MACRO:
		snprintf(tmp, sizeof tmp, "<Macro '%.40s'>", v->u.m->def->name);
		ob_puts(R, o, tmp);
		return;
	case VT_FUNC:
		snprintf(tmp, sizeof tmp, "<function %.40s>", v->u.fn->name);
		ob_puts(R, o, tmp);
		return;
	case VT_LOOP:
		ob_puts(R, o, "<LoopContext>");
		return;
	}
}

/* str(v) as a string value (the same string when v is one). */
static struct val to_str(struct rs *R, const struct val *v)
{
	struct obuf o = { 0 };
	if (v->t == VT_STR)
		return *v;
	put_str(R, &o, v, 0);
	return ob_val(R, &o);
}

/* ---- JSON (json.dumps) ---- */

struct jsonopt {
	const char *indent; /* NULL: none */
	const char *item_sep, *key_sep;
	bool sort_keys, ensure_ascii;
};

static void json_str(struct rs *R, struct obuf *o, const char *s, size_t n, bool ascii)
{
	ob_putc(R, o, '"');
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		char tmp[16];
		size_t b = i;
		/* copy a run of plain bytes at once */
		while (i < n && (c = (unsigned char)s[i]) >= 0x20 && c != '"' && c != '\\' && (!ascii || c < 0x7f))
			i++;
		if (i > b)
			ob_put(R, o, s + b, i - b);
		if (i >= n)
			break;
		switch (c) {
		case '"': ob_puts(R, o, "\\\""); i++; break;
		case '\\': ob_puts(R, o, "\\\\"); i++; break;
		case '\n': ob_puts(R, o, "\\n"); i++; break;
		case '\r': ob_puts(R, o, "\\r"); i++; break;
		case '\t': ob_puts(R, o, "\\t"); i++; break;
		case '\b': ob_puts(R, o, "\\b"); i++; break;
		case '\f': ob_puts(R, o, "\\f"); i++; break;
		default:
			if (c < 0x20) {
				snprintf(tmp, sizeof tmp, "\\u%04x", c);
				ob_puts(R, o, tmp);
				i++;
			} else { /* ensure_ascii and c >= 0x7f */
				uint32_t cp;
				i += u8_decode((const unsigned char *)s + i, n - i, &cp);
				if (cp >= 0x10000) {
					uint32_t v = cp - 0x10000;
					snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
				} else {
					snprintf(tmp, sizeof tmp, "\\u%04x", cp);
				}
				ob_puts(R, o, tmp);
			}
		}
	}
	ob_putc(R, o, '"');
}

static int val_cmp(struct rs *R, const struct node *nd, const struct val *a, const struct val *b);

static void json_newline(struct rs *R, struct obuf *o, const struct jsonopt *jo, int level)
{
	ob_putc(R, o, '\n');
	for (int i = 0; i < level; i++)
		ob_puts(R, o, jo->indent);
}

static void json_dump(struct rs *R, const struct node *nd, struct obuf *o, const struct val *v,
		      const struct jsonopt *jo, int level)
{
	char tmp[64];
	if (level > VALUE_MAX_DEPTH)
		TFAIL(R, nd, "tojson: value nested too deeply");
	switch (v->t) {
	case VT_NONE:
		ob_puts(R, o, "null");
		return;
	case VT_BOOL:
		ob_puts(R, o, v->u.b ? "true" : "false");
		return;
	case VT_INT:
		snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i);
		ob_puts(R, o, tmp);
		return;
	case VT_FLOAT:
		if (isnan(v->u.f))
			ob_puts(R, o, "NaN");
		else if (isinf(v->u.f))
			ob_puts(R, o, v->u.f < 0 ? "-Infinity" : "Infinity");
		else {
			fmt_float(v->u.f, tmp, sizeof tmp);
			ob_puts(R, o, tmp);
		}
		return;
	case VT_STR:
		json_str(R, o, v->u.s->d, v->u.s->len, jo->ensure_ascii);
		return;
	case VT_LIST:
	case VT_TUPLE:
		if (v->t == VT_LIST && v->sub != LK_LIST)
			TFAIL(R, nd, "tojson: Object of type %s is not JSON serializable", type_name(v));
		if (!v->u.l->n) {
			ob_puts(R, o, "[]");
			return;
		}
		ob_putc(R, o, '[');
		for (size_t i = 0; i < v->u.l->n; i++) {
			if (i)
				ob_puts(R, o, jo->item_sep);
			if (jo->indent)
				json_newline(R, o, jo, level + 1);
			json_dump(R, nd, o, &v->u.l->v[i], jo, level + 1);
		}
		if (jo->indent)
			json_newline(R, o, jo, level);
		ob_putc(R, o, ']');
		return;
	case VT_DICT: {
		const struct jdict *d = v->u.d;
		size_t *ord;
		if (!d->n) {
			ob_puts(R, o, "{}");
			return;
		}
		ord = jalloc(&R->x, d->n * sizeof *ord);
		for (size_t i = 0; i < d->n; i++)
			ord[i] = i;
		if (jo->sort_keys) /* insertion sort: stable, small */
			for (size_t i = 1; i < d->n; i++)
				for (size_t j = i; j > 0 && val_cmp(R, nd, &d->k[ord[j - 1]], &d->k[ord[j]]) > 0; j--) {
					size_t t = ord[j];
					ord[j] = ord[j - 1];
					ord[j - 1] = t;
				}
		ob_putc(R, o, '{');
		for (size_t q = 0; q < d->n; q++) {
			const struct val *k = &d->k[ord[q]];
			if (q)
				ob_puts(R, o, jo->item_sep);
			if (jo->indent)
				json_newline(R, o, jo, level + 1);
			if (k->t == VT_STR) {
				json_str(R, o, k->u.s->d, k->u.s->len, jo->ensure_ascii);
			} else if (k->t == VT_INT || k->t == VT_FLOAT || k->t == VT_BOOL || k->t == VT_NONE) {
				struct obuf kb = { 0 };
				json_dump(R, nd, &kb, k, jo, level + 1);
				json_str(R, o, kb.d, kb.n, false);
			} else {
				TFAIL(R, nd, "tojson: keys must be str, int, float, bool or None, not %s", type_name(k));
			}
			ob_puts(R, o, jo->key_sep);
			json_dump(R, nd, o, &d->v[ord[q]], jo, level + 1);
		}
		if (jo->indent)
			json_newline(R, o, jo, level);
		ob_putc(R, o, '}');
		return;
	}
	default:
		TFAIL(R, nd, "tojson: object of type %s is not JSON serializable", type_name(v));
	}
}

/* ---- truth, equality, ordering ---- */

static bool truthy(const struct val *v)
{
	switch (v->t) {
	case VT_UNDEF: case VT_NONE: return false;
	case VT_BOOL: return v->u.b;
	case VT_INT: return v->u.i != 0;
	case VT_FLOAT: return v->u.f != 0;
	case VT_STR: return v->u.s->len != 0;
	case VT_LIST: return v->sub == LK_GEN || v->u.l->n != 0;
	case VT_TUPLE: return v->u.l->n != 0;
	case VT_DICT: return v->u.d->n != 0;
	default: return true;
	}
}

static bool is_num(const struct val *v)
{
	return v->t == VT_INT || v->t == VT_FLOAT || v->t == VT_BOOL;
}

static double num_f(const struct val *v)
{
	return v->t == VT_FLOAT ? v->u.f : v->t == VT_INT ? (double)v->u.i : (double)v->u.b;
}

static int64_t num_i(const struct val *v)
{
	return v->t == VT_INT ? v->u.i : (int64_t)v->u.b;
}

static bool val_eq(const struct val *a, const struct val *b, int depth)
{
	if (depth > VALUE_MAX_DEPTH)
		return false;
	if (is_num(a) && is_num(b)) {
		if (a->t == VT_FLOAT || b->t == VT_FLOAT)
			return num_f(a) == num_f(b);
		return num_i(a) == num_i(b);
	}
	if (a->t != b->t)
		return false;
	if (a->t == VT_LIST && (a->sub != LK_LIST || b->sub != LK_LIST))
		return a->u.l == b->u.l && a->sub == b->sub;
	switch (a->t) {
	case VT_UNDEF: case VT_NONE: return true;
	case VT_STR: return a->u.s->len == b->u.s->len && !memcmp(a->u.s->d, b->u.s->d, a->u.s->len);
	case VT_LIST: case VT_TUPLE:
		if (a->u.l->n != b->u.l->n)
			return false;
		for (size_t i = 0; i < a->u.l->n; i++)
			if (!val_eq(&a->u.l->v[i], &b->u.l->v[i], depth + 1))
				return false;
		return true;
	case VT_DICT: case VT_NS:
		if (a->u.d->n != b->u.d->n)
			return false;
		for (size_t i = 0; i < a->u.d->n; i++) {
			size_t j;
			for (j = 0; j < b->u.d->n; j++)
				if (val_eq(&a->u.d->k[i], &b->u.d->k[j], depth + 1))
					break;
			if (j == b->u.d->n || !val_eq(&a->u.d->v[i], &b->u.d->v[j], depth + 1))
				return false;
		}
		return true;
	default:
		return a->u.m == b->u.m;
	}
}

/* Python ordering (<): numbers, strings (code point order = UTF-8 byte order), sequences. */
static int val_cmp(struct rs *R, const struct node *nd, const struct val *a, const struct val *b)
{
	if (is_num(a) && is_num(b)) {
		if (a->t == VT_FLOAT || b->t == VT_FLOAT) {
			double x = num_f(a), y = num_f(b);
			return x < y ? -1 : x > y;
		}
		return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b);
	}
	if (a->t == VT_STR && b->t == VT_STR) {
		size_t n = a->u.s->len < b->u.s->len ? a->u.s->len : b->u.s->len;
		int c = memcmp(a->u.s->d, b->u.s->d, n);
		if (c)
			return c < 0 ? -1 : 1;
		return a->u.s->len < b->u.s->len ? -1 : a->u.s->len > b->u.s->len;
	}
	if ((a->t == VT_LIST && b->t == VT_LIST) || (a->t == VT_TUPLE && b->t == VT_TUPLE)) {
		for (size_t i = 0; i < a->u.l->n && i < b->u.l->n; i++) {
			if (!val_eq(&a->u.l->v[i], &b->u.l->v[i], 0))
				return val_cmp(R, nd, &a->u.l->v[i], &b->u.l->v[i]);
		}
		return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
	}
	TFAIL(R, nd, "'<' not supported between instances of '%s' and '%s'", type_name(a), type_name(b));
}

static struct val *dict_find(const struct jdict *d, const struct val *k)
{
	if (k->t == VT_STR) {
		for (size_t i = 0; i < d->n; i++)
			if (d->k[i].t == VT_STR && d->k[i].u.s->len == k->u.s->len &&
			    !memcmp(d->k[i].u.s->d, k->u.s->d, k->u.s->len))
				return &d->v[i];
		return NULL;
	}
	for (size_t i = 0; i < d->n; i++)
		if (val_eq(&d->k[i], k, 0))
			return &d->v[i];
	return NULL;
}

static struct val *dict_find_c(const struct jdict *d, const char *k)
{
	size_t n = strlen(k);
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].t == VT_STR && d->k[i].u.s->len == n && !memcmp(d->k[i].u.s->d, k, n))
			return &d->v[i];
	return NULL;
}

static void dict_set(struct jx *x, struct jdict *d, struct val k, struct val v)
{
	struct val *p = dict_find(d, &k);
	if (p) {
		*p = v;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4;
		struct val *nk = jalloc(x, cap * sizeof *nk), *nv = jalloc(x, cap * sizeof *nv);
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof *nk);
			memcpy(nv, d->v, d->n * sizeof *nv);
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = k;
	d->v[d->n++] = v;
}

/* ===================================================================== scopes */

static struct frame *frame_new(struct rs *R, struct frame *parent)
{
	struct frame *f = jzalloc(&R->x, sizeof *f);
	f->parent = parent;
	return f;
}

static void frame_set(struct rs *R, struct frame *f, const char *name, struct val v)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->names[i], name)) {
			f->vals[i] = v;
			return;
		}
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 4;
		const char **nn = jalloc(&R->x, cap * sizeof *nn);
		struct val *nv = jalloc(&R->x, cap * sizeof *nv);
		if (f->n) {
			memcpy(nn, f->names, f->n * sizeof *nn);
			memcpy(nv, f->vals, f->n * sizeof *nv);
		}
		f->names = nn;
		f->vals = nv;
		f->cap = cap;
	}
	f->names[f->n] = name;
	f->vals[f->n++] = v;
}

static const char *const global_names[] = { "range", "namespace", "dict", "raise_exception",
					    "strftime_now", "joiner", "cycler", NULL };

static struct val mkfunc(struct rs *R, int kind, const char *name, struct val self)
{
	struct val v = { .t = VT_FUNC };
	v.u.fn = jalloc(&R->x, sizeof *v.u.fn);
	v.u.fn->kind = kind;
	v.u.fn->name = name;
	v.u.fn->self = self;
	return v;
}

static struct val lookup(struct rs *R, struct frame *f, const char *name)
{
	struct val *p;
	for (; f; f = f->parent)
		for (size_t i = f->n; i-- > 0;)
			if (f->names[i] == name || !strcmp(f->names[i], name))
				return f->vals[i];
	if ((p = dict_find_c(R->ctx, name)))
		return *p;
	for (size_t i = 0; global_names[i]; i++)
		if (!strcmp(global_names[i], name))
			return mkfunc(R, FK_GLOBAL, global_names[i], V_NONE);
	return vundef_msg(&R->x, "'%s' is undefined", name);
}

/* Raise the error an Undefined carries (used when an undefined value is operated on). */
static _Noreturn void undef_fail(struct rs *R, const struct node *nd, const struct val *v)
{
	TFAIL(R, nd, "%s", v->u.s ? v->u.s->d : "value is undefined");
}

/* ===================================================================== attribute and item access */

static const char *const str_methods[] = {
	"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "upper", "lower",
	"title", "capitalize", "replace", "format", "find", "rfind", "count", "join", "splitlines",
	"isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "removeprefix",
	"removesuffix", "index", "rindex", "swapcase", "casefold", "zfill", NULL };
static const char *const dict_methods[] = { "get", "items", "keys", "values", "copy", NULL };
static const char *const dict_unsafe[] = { "pop", "popitem", "update", "setdefault", "clear", NULL };
static const char *const list_methods[] = { "index", "count", "copy", NULL };
static const char *const list_unsafe[] = { "append", "extend", "insert", "pop", "remove", "clear",
					   "sort", "reverse", NULL };

static const char *in_names(const char *const *names, const char *name)
{
	for (size_t i = 0; names[i]; i++)
		if (!strcmp(names[i], name))
			return names[i];
	return NULL;
}

static struct val loop_attr(struct rs *R, const struct val *obj, const char *name, bool *found);

static struct val get_attr(struct rs *R, const struct node *nd, const struct val *obj,
			   const char *name)
{
	const char *m;
	struct val *p;
	switch (obj->t) {
	case VT_UNDEF:
		undef_fail(R, nd, obj);
	case VT_DICT:
		if ((m = in_names(dict_methods, name)))
			return mkfunc(R, FK_METHOD, m, *obj);
		if ((m = in_names(dict_unsafe, name)))
			return mkfunc(R, FK_UNSAFE, m, *obj);
		if ((p = dict_find_c(obj->u.d, name)))
			return *p;
		return vundef_msg(&R->x, "'dict object' has no attribute '%s'", name);
	case VT_NS:
		if ((p = dict_find_c(obj->u.d, name)))
			return *p;
		return vundef_msg(&R->x, "'Namespace object' has no attribute '%s'", name);
	case VT_STR:
		if ((m = in_names(str_methods, name)))
			return mkfunc(R, FK_METHOD, m, *obj);
		return vundef_msg(&R->x, "'str object' has no attribute '%s'", name);
	case VT_LIST:
	case VT_TUPLE:
		if ((m = in_names(list_methods, name)))
			return mkfunc(R, FK_METHOD, m, *obj);
		if (obj->t == VT_LIST && (m = in_names(list_unsafe, name)))
			return mkfunc(R, FK_UNSAFE, m, *obj);
		return vundef_msg(&R->x, "'%s object' has no attribute '%s'", type_name(obj), name);
	case VT_LOOP: {
		bool found;
		struct val v = loop_attr(R, obj, name, &found);
		if (found)
			return v;
		return vundef_msg(&R->x, "'LoopContext object' has no attribute '%s'", name);
	}
	default:
		return vundef_msg(&R->x, "'%s object' has no attribute '%s'", type_name(obj), name);
	}
}

/* Code-point index -> byte offset table for non-ASCII strings (NULL when ASCII). */
static size_t *cp_offsets(struct rs *R, const struct jstr *s, size_t *ncp)
{
	size_t n = cp_count(s->d, s->len), *off, j = 0;
	*ncp = n;
	if (n == s->len)
		return NULL;
	off = jalloc(&R->x, (n + 1) * sizeof *off);
	for (size_t i = 0; i < s->len; i++)
		if (((unsigned char)s->d[i] & 0xc0) != 0x80)
			off[j++] = i;
	off[n] = s->len;
	return off;
}

static struct val get_item(struct rs *R, const struct node *nd, const struct val *obj,
			   const struct val *key)
{
	struct val *p;
	switch (obj->t) {
	case VT_UNDEF:
		undef_fail(R, nd, obj);
	case VT_DICT:
	case VT_NS:
		if (obj->t == VT_DICT && (p = dict_find(obj->u.d, key)))
			return *p;
		break;
	case VT_LIST:
	case VT_TUPLE:
	case VT_STR:
		if (obj->t == VT_LIST && obj->sub != LK_LIST && obj->sub != LK_RANGE)
			return vundef_msg(&R->x, "'%s' object is not subscriptable", type_name(obj));
		if (key->t == VT_INT || key->t == VT_BOOL) {
			int64_t i = num_i(key), n;
			size_t ncp = 0, *off = NULL;
			if (obj->t == VT_STR) {
				off = cp_offsets(R, obj->u.s, &ncp);
				n = (int64_t)ncp;
			} else {
				n = (int64_t)obj->u.l->n;
			}
			if (i < 0)
				i += n;
			if (i < 0 || i >= n)
				return vundef_msg(&R->x, "%s index out of range", type_name(obj));
			if (obj->t != VT_STR)
				return obj->u.l->v[i];
			if (!off)
				return vstr(&R->x, obj->u.s->d + i, 1);
			return vstr(&R->x, obj->u.s->d + off[i], off[i + 1] - off[i]);
		}
		break;
	default:
		break;
	}
	if (key->t == VT_STR)
		return get_attr(R, nd, obj, key->u.s->d);
	return vundef_msg(&R->x, "'%s object' has no item", type_name(obj));
}

static bool opt_int(struct rs *R, struct frame *F, const struct node *e, int64_t *out);

/* Python slice indices (PySlice_AdjustIndices). */
static void slice_adjust(int64_t len, const int64_t *pstart, const int64_t *pstop, int64_t step,
			 int64_t *start, int64_t *stop)
{
	int64_t s, e;
	if (step > 0) {
		s = pstart ? *pstart : 0;
		e = pstop ? *pstop : len;
		if (s < 0) { s += len; if (s < 0) s = 0; } else if (s > len) s = len;
		if (e < 0) { e += len; if (e < 0) e = 0; } else if (e > len) e = len;
	} else {
		s = pstart ? *pstart : len - 1;
		e = pstop ? *pstop : -1;
		if (pstart) { if (s < 0) { s += len; if (s < 0) s = -1; } else if (s >= len) s = len - 1; }
		if (pstop) { if (e < 0) { e += len; if (e < 0) e = -1; } else if (e >= len) e = len - 1; }
	}
	*start = s;
	*stop = e;
}

static struct val eval(struct rs *R, struct frame *F, const struct node *e);

static struct val do_slice(struct rs *R, struct frame *F, const struct node *e, const struct val *obj)
{
	int64_t a, b, st = 1, start, stop, len;
	bool ha, hb;
	size_t ncp = 0, *off = NULL;
	ha = opt_int(R, F, e->b, &a);
	hb = opt_int(R, F, e->c, &b);
	if (opt_int(R, F, e->d, &st) && st == 0)
		TFAIL(R, e, "slice step cannot be zero");
	if (obj->t == VT_UNDEF)
		undef_fail(R, e, obj);
	if (obj->t == VT_STR) {
		off = cp_offsets(R, obj->u.s, &ncp);
		len = (int64_t)ncp;
	} else if ((obj->t == VT_LIST && (obj->sub == LK_LIST || obj->sub == LK_RANGE)) || obj->t == VT_TUPLE) {
		len = (int64_t)obj->u.l->n;
	} else {
		TFAIL(R, e, "'%s' object is not subscriptable", type_name(obj));
	}
	slice_adjust(len, ha ? &a : NULL, hb ? &b : NULL, st, &start, &stop);
	if (obj->t == VT_STR) {
		struct obuf o = { 0 };
		struct val r;
		if (st == 1 && !off) {
			if (stop < start)
				stop = start;
			return vstr(&R->x, obj->u.s->d + start, (size_t)(stop - start));
		}
		for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) {
			if (off)
				ob_put(R, &o, obj->u.s->d + off[i], off[i + 1] - off[i]);
			else
				ob_putc(R, &o, obj->u.s->d[i]);
		}
		r = ob_val(R, &o);
		r.safe = obj->safe;
		return r;
	} else {
		struct jlist *l = mklist(&R->x, 0);
		struct val r;
		for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st)
			list_push(&R->x, l, obj->u.l->v[i]);
		r.t = obj->t;
		r.safe = 0;
		r.sub = obj->sub;
		r.u.l = l;
		return r;
	}
}

static bool opt_int(struct rs *R, struct frame *F, const struct node *e, int64_t *out)
{
	struct val v;
	if (!e)
		return false;
	v = eval(R, F, e);
	if (v.t == VT_NONE)
		return false;
	if (v.t != VT_INT && v.t != VT_BOOL)
		TFAIL(R, e, "slice indices must be integers or None");
	*out = num_i(&v);
	return true;
}

/* Materialise an iterable's items (str: characters, dict: keys, undefined: none). */
static struct jlist *iter_items(struct rs *R, const struct node *nd, const struct val *v)
{
	struct jlist *l;
	switch (v->t) {
	case VT_UNDEF:
		return mklist(&R->x, 0);
	case VT_LIST:
	case VT_TUPLE:
		return v->u.l;
	case VT_DICT:
		l = mklist(&R->x, v->u.d->n);
		for (size_t i = 0; i < v->u.d->n; i++)
			list_push(&R->x, l, v->u.d->k[i]);
		return l;
	case VT_STR: {
		const struct jstr *s = v->u.s;
		l = mklist(&R->x, s->len);
		for (size_t i = 0; i < s->len;) {
			uint32_t c;
			size_t k = u8_decode((const unsigned char *)s->d + i, s->len - i, &c);
			list_push(&R->x, l, vstr(&R->x, s->d + i, k));
			i += k;
		}
		return l;
	}
	default:
		TFAIL(R, nd, "'%s' object is not iterable", type_name(v));
	}
}

static int64_t val_len(struct rs *R, const struct node *nd, const struct val *v)
{
	switch (v->t) {
	case VT_UNDEF: return 0;
	case VT_STR: return (int64_t)cp_count(v->u.s->d, v->u.s->len);
	case VT_LIST:
		if (v->sub == LK_GEN)
			TFAIL(R, nd, "object of type 'generator' has no len()");
		return (int64_t)v->u.l->n;
	case VT_TUPLE: return (int64_t)v->u.l->n;
	case VT_DICT: return (int64_t)v->u.d->n;
	default: TFAIL(R, nd, "object of type '%s' has no len()", type_name(v));
	}
}

/* ===================================================================== operators */

static struct val html_escape(struct rs *R, const struct val *v)
{
	struct val s = to_str(R, v), r;
	struct obuf o = { 0 };
	if (v->t == VT_STR && v->safe)
		return *v;
	for (size_t i = 0; i < s.u.s->len; i++) {
		char c = s.u.s->d[i];
		switch (c) {
		case '&': ob_puts(R, &o, "&amp;"); break;
		case '<': ob_puts(R, &o, "&lt;"); break;
		case '>': ob_puts(R, &o, "&gt;"); break;
		case '"': ob_puts(R, &o, "&#34;"); break;
		case '\'': ob_puts(R, &o, "&#39;"); break;
		default: ob_putc(R, &o, c);
		}
	}
	r = ob_val(R, &o);
	r.safe = 1;
	return r;
}

static struct val concat2(struct rs *R, const struct val *a, const struct val *b, bool safe)
{
	struct obuf o = { 0 };
	struct val r;
	ob_need(R, &o, a->u.s->len + b->u.s->len);
	ob_put(R, &o, a->u.s->d, a->u.s->len);
	ob_put(R, &o, b->u.s->d, b->u.s->len);
	r = ob_val(R, &o);
	r.safe = safe;
	return r;
}

static struct val arith(struct rs *R, const struct node *nd, int op, struct val a, struct val b)
{
	static const char *const names[] = { "+", "-", "*", "/", "//", "%", "**" };
	if (a.t == VT_UNDEF)
		undef_fail(R, nd, &a);
	if (b.t == VT_UNDEF)
		undef_fail(R, nd, &b);
	if (is_num(&a) && is_num(&b)) {
		if (op == OP_DIV) {
			if (num_f(&b) == 0)
				TFAIL(R, nd, "division by zero");
			return vfloat(num_f(&a) / num_f(&b));
		}
		if (a.t != VT_FLOAT && b.t != VT_FLOAT) {
			int64_t x = num_i(&a), y = num_i(&b), r;
			switch (op) {
			case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto ovf; return vint(r);
			case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto ovf; return vint(r);
			case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto ovf; return vint(r);
			case OP_FDIV:
			case OP_MOD: {
				int64_t q, m;
				if (y == 0)
					TFAIL(R, nd, "integer division or modulo by zero");
				if (x == INT64_MIN && y == -1)
					goto ovf;
				q = x / y;
				m = x % y;
				if (m != 0 && ((m < 0) != (y < 0))) {
					q--;
					m += y;
				}
				return vint(op == OP_FDIV ? q : m);
			}
			case OP_POW:
				if (y < 0) {
					if (x == 0)
						TFAIL(R, nd, "0.0 cannot be raised to a negative power");
					return vfloat(pow((double)x, (double)y));
				}
				r = 1;
				for (int64_t i = 0; i < y; i++) {
					if (__builtin_mul_overflow(r, x, &r))
						goto ovf;
					if (r == 0 || r == 1)
						break;
				}
				if (r == -1 && x == -1)
					r = (y % 2) ? -1 : 1;
				return vint(r);
			}
		} else {
			double x = num_f(&a), y = num_f(&b);
			switch (op) {
			case OP_ADD: return vfloat(x + y);
			case OP_SUB: return vfloat(x - y);
			case OP_MUL: return vfloat(x * y);
			case OP_FDIV:
			case OP_MOD: {
				double m, div, fl;
				if (y == 0)
					TFAIL(R, nd, "float division by zero");
				m = fmod(x, y);
				div = (x - m) / y;
				if (m != 0 && ((y < 0) != (m < 0))) {
					m += y;
					div -= 1.0;
				}
				if (op == OP_MOD)
					return vfloat(m != 0 ? m : copysign(0.0, y));
				if (div == 0)
					return vfloat(copysign(0.0, x / y));
				fl = floor(div);
				if (div - fl > 0.5)
					fl += 1.0;
				return vfloat(fl);
			}
			case OP_POW:
				if (x == 0 && y < 0)
					TFAIL(R, nd, "0.0 cannot be raised to a negative power");
				return vfloat(pow(x, y));
			}
		}
	}
	if (op == OP_ADD && a.t == VT_STR && b.t == VT_STR) {
		if (a.safe && !b.safe) {
			struct val e = html_escape(R, &b);
			return concat2(R, &a, &e, true);
		}
		if (b.safe && !a.safe) {
			struct val e = html_escape(R, &a);
			return concat2(R, &e, &b, true);
		}
		return concat2(R, &a, &b, a.safe);
	}
	if (op == OP_ADD && ((a.t == VT_LIST && b.t == VT_LIST && !a.sub && !b.sub) || (a.t == VT_TUPLE && b.t == VT_TUPLE))) {
		struct jlist *l = mklist(&R->x, a.u.l->n + b.u.l->n);
		struct val r = a;
		for (size_t i = 0; i < a.u.l->n; i++)
			list_push(&R->x, l, a.u.l->v[i]);
		for (size_t i = 0; i < b.u.l->n; i++)
			list_push(&R->x, l, b.u.l->v[i]);
		r.u.l = l;
		return r;
	}
	if (op == OP_MUL && (((a.t == VT_INT || a.t == VT_BOOL) && (b.t == VT_STR || (b.t == VT_LIST && !b.sub))) ||
			     ((b.t == VT_INT || b.t == VT_BOOL) && (a.t == VT_STR || (a.t == VT_LIST && !a.sub))))) {
		bool a_num = a.t == VT_INT || a.t == VT_BOOL;
		struct val s = a_num ? b : a;
		int64_t k = a_num ? num_i(&a) : num_i(&b);
		if (k < 0)
			k = 0;
		if (s.t == VT_STR) {
			struct obuf o = { 0 };
			if ((uint64_t)k * s.u.s->len > R->max_output)
				rfail(R, nd, -LYNN_EUNSUPPORTED, "string repetition exceeds the output limit");
			for (int64_t i = 0; i < k; i++)
				ob_put(R, &o, s.u.s->d, s.u.s->len);
			return ob_val(R, &o);
		} else {
			struct jlist *l;
			if ((uint64_t)k * s.u.l->n > R->max_loop)
				rfail(R, nd, -LYNN_EUNSUPPORTED, "list repetition exceeds the loop limit");
			l = mklist(&R->x, (size_t)k * s.u.l->n);
			for (int64_t i = 0; i < k; i++)
				for (size_t j = 0; j < s.u.l->n; j++)
					list_push(&R->x, l, s.u.l->v[j]);
			return vlist(l);
		}
	}
	if (op == OP_MOD && a.t == VT_STR)
		TFAIL(R, nd, "printf-style string formatting ('%%') is not supported");
	TFAIL(R, nd, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], type_name(&a),
	      type_name(&b));
ovf:
	TFAIL(R, nd, "integer overflow");
}

static bool contains(struct rs *R, const struct node *nd, const struct val *item, const struct val *seq)
{
	switch (seq->t) {
	case VT_UNDEF:
		return false;
	case VT_STR:
		if (item->t != VT_STR)
			TFAIL(R, nd, "'in <string>' requires string as left operand, not %s", type_name(item));
		if (!item->u.s->len)
			return true;
		return memmem(seq->u.s->d, seq->u.s->len, item->u.s->d, item->u.s->len) != NULL;
	case VT_LIST:
	case VT_TUPLE:
		for (size_t i = 0; i < seq->u.l->n; i++)
			if (val_eq(item, &seq->u.l->v[i], 0))
				return true;
		return false;
	case VT_DICT:
		return dict_find(seq->u.d, item) != NULL;
	default:
		TFAIL(R, nd, "argument of type '%s' is not iterable", type_name(seq));
	}
}

/* ===================================================================== calls */

struct args {
	struct val *pos;
	size_t npos;
	const char *const *kn;
	struct val *kv;
	size_t nkw;
};

/* Argument `pos` (positional index) or keyword `name`; NULL when absent. */
static const struct val *arg_get(const struct args *a, size_t pos, const char *name)
{
	if (pos < a->npos)
		return &a->pos[pos];
	for (size_t i = 0; name && i < a->nkw; i++)
		if (!strcmp(a->kn[i], name))
			return &a->kv[i];
	return NULL;
}

static void eval_args(struct rs *R, struct frame *F, const struct node *call, struct args *a)
{
	a->npos = call->kids.n;
	a->nkw = call->kids2.n;
	a->pos = a->npos ? jalloc(&R->x, a->npos * sizeof *a->pos) : NULL;
	a->kv = a->nkw ? jalloc(&R->x, a->nkw * sizeof *a->kv) : NULL;
	a->kn = call->knames;
	for (size_t i = 0; i < a->npos; i++)
		a->pos[i] = eval(R, F, call->kids.v[i]);
	for (size_t i = 0; i < a->nkw; i++)
		a->kv[i] = eval(R, F, call->kids2.v[i]);
}

static const struct jstr *need_str(struct rs *R, const struct node *nd, const struct val *v,
				   const char *what)
{
	if (!v || v->t != VT_STR) {
		if (v && v->t == VT_UNDEF)
			undef_fail(R, nd, v);
		TFAIL(R, nd, "%s must be a string, not %s", what, v ? type_name(v) : "missing");
	}
	return v->u.s;
}

static int64_t need_int(struct rs *R, const struct node *nd, const struct val *v, const char *what)
{
	if (!v || (v->t != VT_INT && v->t != VT_BOOL))
		TFAIL(R, nd, "%s must be an integer, not %s", what, v ? type_name(v) : "missing");
	return num_i(v);
}

/* ---- case conversion (utf8proc) ---- */

enum casemode { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAP, CASE_SWAP };

static bool cp_cased(uint32_t c)
{
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
	return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static struct val str_case(struct rs *R, const struct val *v, int mode)
{
	const struct jstr *s = v->u.s;
	struct obuf o = { 0 };
	bool prev_cased = false, first = true;
	struct val r;
	ob_need(R, &o, s->len);
	for (size_t i = 0; i < s->len;) {
		uint32_t c, d;
		char enc[4];
		i += u8_decode((const unsigned char *)s->d + i, s->len - i, &c);
		switch (mode) {
		case CASE_UPPER: d = (uint32_t)utf8proc_toupper((utf8proc_int32_t)c); break;
		case CASE_LOWER: d = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c); break;
		case CASE_CAP:
			d = first ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)c)
				  : (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
			break;
		case CASE_SWAP:
			d = utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_LU
				    ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)c)
				    : (uint32_t)utf8proc_toupper((utf8proc_int32_t)c);
			break;
		default:
			d = prev_cased ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)c)
				       : (uint32_t)utf8proc_totitle((utf8proc_int32_t)c);
			prev_cased = cp_cased(c);
		}
		first = false;
		ob_put(R, &o, enc, u8_encode(d, enc));
	}
	r = ob_val(R, &o);
	r.safe = v->safe;
	return r;
}

static bool str_class(const struct jstr *s, int what)
{
	/* what: 0 digit, 1 alpha, 2 alnum, 3 space, 4 lower, 5 upper */
	bool any_cased = false;
	if (!s->len)
		return false;
	for (size_t i = 0; i < s->len;) {
		uint32_t c;
		utf8proc_category_t k;
		i += u8_decode((const unsigned char *)s->d + i, s->len - i, &c);
		k = utf8proc_category((utf8proc_int32_t)c);
		bool L = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
		bool N = k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
		switch (what) {
		case 0: if (k != UTF8PROC_CATEGORY_ND) return false; break;
		case 1: if (!L) return false; break;
		case 2: if (!L && !N) return false; break;
		case 3: if (!py_space(c)) return false; break;
		case 4:
			if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) return false;
			if (k == UTF8PROC_CATEGORY_LL) any_cased = true;
			break;
		case 5:
			if (k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT) return false;
			if (k == UTF8PROC_CATEGORY_LU) any_cased = true;
			break;
		}
	}
	return what < 4 || any_cased;
}

static struct val str_strip(struct rs *R, const struct node *nd, const struct val *v,
			    const struct val *chars, int mode)
{
	size_t b, e;
	struct val r;
	const struct jstr *s = v->u.s;
	if (chars && chars->t != VT_NONE) {
		const struct jstr *c = need_str(R, nd, chars, "strip characters");
		py_strip(s->d, s->len, c->d, c->len, mode, &b, &e);
	} else {
		py_strip(s->d, s->len, NULL, 0, mode, &b, &e);
	}
	if (b == 0 && e == s->len)
		return *v;
	r = vstr(&R->x, s->d + b, e - b);
	r.safe = v->safe;
	return r;
}

/* str.split / rsplit (sep NULL: runs of whitespace). */
static struct val str_split(struct rs *R, const struct node *nd, const struct jstr *s,
			    const struct val *sepv, int64_t maxsplit, bool right)
{
	struct jlist *l = mklist(&R->x, 0);
	if (sepv && sepv->t != VT_NONE) {
		const struct jstr *sep = need_str(R, nd, sepv, "separator");
		if (!sep->len)
			TFAIL(R, nd, "empty separator");
		if (!right) {
			size_t i = 0;
			for (;;) {
				const char *p = maxsplit == 0 ? NULL
					: memmem(s->d + i, s->len - i, sep->d, sep->len);
				if (!p) {
					list_push(&R->x, l, vstr(&R->x, s->d + i, s->len - i));
					break;
				}
				list_push(&R->x, l, vstr(&R->x, s->d + i, (size_t)(p - s->d) - i));
				i = (size_t)(p - s->d) + sep->len;
				if (maxsplit > 0)
					maxsplit--;
			}
		} else {
			size_t e = s->len;
			struct jlist *rev = mklist(&R->x, 0);
			for (;;) {
				size_t q;
				bool found = false;
				if (maxsplit != 0 && e >= sep->len)
					for (q = e - sep->len + 1; q-- > 0;)
						if (!memcmp(s->d + q, sep->d, sep->len)) {
							found = true;
							break;
						}
				if (!found) {
					list_push(&R->x, rev, vstr(&R->x, s->d, e));
					break;
				}
				list_push(&R->x, rev, vstr(&R->x, s->d + q + sep->len, e - q - sep->len));
				e = q;
				if (maxsplit > 0)
					maxsplit--;
			}
			for (size_t i = rev->n; i-- > 0;)
				list_push(&R->x, l, rev->v[i]);
		}
		return vlist(l);
	}
	/* whitespace split */
	if (!right) {
		size_t i = 0, w;
		for (;;) {
			while (i < s->len && (w = ws_at(s->d + i, s->len - i)))
				i += w;
			if (i >= s->len)
				break;
			if (maxsplit == 0) {
				size_t b, e;
				py_strip(s->d + i, s->len - i, NULL, 0, 2, &b, &e);
				list_push(&R->x, l, vstr(&R->x, s->d + i, e));
				break;
			}
			size_t st = i;
			while (i < s->len && !ws_at(s->d + i, s->len - i))
				i += u8_decode((const unsigned char *)s->d + i, s->len - i, &(uint32_t){ 0 });
			list_push(&R->x, l, vstr(&R->x, s->d + st, i - st));
			if (maxsplit > 0)
				maxsplit--;
		}
	} else {
		struct jlist *rev = mklist(&R->x, 0);
		size_t e = s->len;
		for (;;) {
			while (e > 0) {
				size_t p = u8_prev(s->d, e);
				if (!ws_at(s->d + p, e - p))
					break;
				e = p;
			}
			if (e == 0)
				break;
			if (maxsplit == 0) {
				size_t b, ee;
				py_strip(s->d, e, NULL, 0, 1, &b, &ee);
				list_push(&R->x, rev, vstr(&R->x, s->d + b, e - b));
				break;
			}
			size_t en = e;
			while (e > 0) {
				size_t p = u8_prev(s->d, e);
				if (ws_at(s->d + p, e - p))
					break;
				e = p;
			}
			list_push(&R->x, rev, vstr(&R->x, s->d + e, en - e));
			if (maxsplit > 0)
				maxsplit--;
		}
		for (size_t i = rev->n; i-- > 0;)
			list_push(&R->x, l, rev->v[i]);
	}
	return vlist(l);
}

static struct val str_replace(struct rs *R, const struct node *nd, const struct val *v,
			      const struct val *oldv, const struct val *newv, int64_t count)
{
	const struct jstr *s = v->u.s, *old = need_str(R, nd, oldv, "replace: old"), *nw;
	struct obuf o = { 0 };
	struct val r;
	if (newv && newv->t == VT_STR)
		nw = newv->u.s;
	else
		nw = to_str(R, newv ? newv : &V_NONE).u.s;
	if (!old->len) {
		/* insert `new` before every code point and at the end */
		size_t i = 0;
		while (i <= s->len && count != 0) {
			uint32_t c;
			ob_put(R, &o, nw->d, nw->len);
			if (count > 0)
				count--;
			if (i == s->len) {
				i++;
				break;
			}
			size_t k = u8_decode((const unsigned char *)s->d + i, s->len - i, &c);
			ob_put(R, &o, s->d + i, k);
			i += k;
		}
		if (i <= s->len)
			ob_put(R, &o, s->d + i, s->len - i);
	} else {
		size_t i = 0;
		for (;;) {
			const char *p = count == 0 ? NULL : memmem(s->d + i, s->len - i, old->d, old->len);
			if (!p) {
				ob_put(R, &o, s->d + i, s->len - i);
				break;
			}
			ob_put(R, &o, s->d + i, (size_t)(p - s->d) - i);
			ob_put(R, &o, nw->d, nw->len);
			i = (size_t)(p - s->d) + old->len;
			if (count > 0)
				count--;
		}
	}
	r = ob_val(R, &o);
	r.safe = v->safe;
	return r;
}

/* str.format with {} {0} {name} fields (no format specs beyond empty). */
static struct val str_format(struct rs *R, const struct node *nd, const struct jstr *s,
			     const struct args *a)
{
	struct obuf o = { 0 };
	size_t auto_i = 0;
	int numbering = 0; /* 1 automatic, 2 manual: Python refuses to mix them */
	for (size_t i = 0; i < s->len; i++) {
		char c = s->d[i];
		if (c == '{' && i + 1 < s->len && s->d[i + 1] == '{') {
			ob_putc(R, &o, '{');
			i++;
		} else if (c == '}' && i + 1 < s->len && s->d[i + 1] == '}') {
			ob_putc(R, &o, '}');
			i++;
		} else if (c == '{') {
			size_t e = i + 1;
			const struct val *v = NULL;
			bool rep = false;
			while (e < s->len && s->d[e] != '}')
				e++;
			if (e >= s->len)
				TFAIL(R, nd, "format: single '{' encountered in format string");
			size_t fe = e;
			const char *bang = memchr(s->d + i + 1, '!', e - i - 1);
			const char *colon = memchr(s->d + i + 1, ':', e - i - 1);
			if (colon && (!bang || colon < bang)) {
				if ((size_t)(colon - s->d) + 1 != e)
					TFAIL(R, nd, "format: format specs are not supported");
				fe = (size_t)(colon - s->d);
			}
			if (bang && (size_t)(bang - s->d) < fe) {
				rep = bang[1] == 'r';
				fe = (size_t)(bang - s->d);
			}
			if (fe == i + 1) {
				if (numbering == 2)
					TFAIL(R, nd, "format: cannot switch from manual field specification to automatic field numbering");
				numbering = 1;
				v = arg_get(a, auto_i++, NULL);
			} else if (isdigit((unsigned char)s->d[i + 1])) {
				if (numbering == 1)
					TFAIL(R, nd, "format: cannot switch from automatic field numbering to manual field specification");
				numbering = 2;
				v = arg_get(a, (size_t)strtoul(s->d + i + 1, NULL, 10), NULL);
			} else {
				char key[64];
				snprintf(key, sizeof key, "%.*s", (int)(fe - i - 1), s->d + i + 1);
				v = arg_get(a, (size_t)-1, key);
			}
			if (!v)
				TFAIL(R, nd, "format: replacement field '%.*s' has no argument", (int)(e - i - 1), s->d + i + 1);
			if (rep)
				put_repr(R, &o, v, 0);
			else
				put_str(R, &o, v, 0);
			i = e;
		} else if (c == '}') {
			TFAIL(R, nd, "format: single '}' encountered in format string");
		} else {
			ob_putc(R, &o, c);
		}
	}
	return ob_val(R, &o);
}

static struct val call_str_method(struct rs *R, const struct node *nd, const struct val *self,
				  const char *m, const struct args *a)
{
	const struct jstr *s = self->u.s;
	const struct val *a0 = arg_get(a, 0, NULL), *a1 = arg_get(a, 1, NULL);
	if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
		bool ends = m[0] == 'e';
		struct val pre = a0 ? *a0 : V_NONE;
		size_t nalt = 1;
		const struct val *alts = &pre;
		if (pre.t == VT_TUPLE) {
			nalt = pre.u.l->n;
			alts = pre.u.l->v;
		}
		for (size_t i = 0; i < nalt; i++) {
			const struct jstr *p = need_str(R, nd, &alts[i], m);
			if (p->len <= s->len &&
			    !memcmp(ends ? s->d + s->len - p->len : s->d, p->d, p->len))
				return vbool(true);
		}
		return vbool(false);
	}
	if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
		const struct val *mx = arg_get(a, 1, "maxsplit");
		return str_split(R, nd, s, arg_get(a, 0, "sep"), mx ? need_int(R, nd, mx, "maxsplit") : -1,
				 m[0] == 'r');
	}
	if (!strcmp(m, "strip"))
		return str_strip(R, nd, self, a0, 3);
	if (!strcmp(m, "lstrip"))
		return str_strip(R, nd, self, a0, 1);
	if (!strcmp(m, "rstrip"))
		return str_strip(R, nd, self, a0, 2);
	if (!strcmp(m, "upper"))
		return str_case(R, self, CASE_UPPER);
	if (!strcmp(m, "lower") || !strcmp(m, "casefold"))
		return str_case(R, self, CASE_LOWER);
	if (!strcmp(m, "title"))
		return str_case(R, self, CASE_TITLE);
	if (!strcmp(m, "capitalize"))
		return str_case(R, self, CASE_CAP);
	if (!strcmp(m, "swapcase"))
		return str_case(R, self, CASE_SWAP);
	if (!strcmp(m, "replace")) {
		const struct val *c = arg_get(a, 2, "count");
		return str_replace(R, nd, self, a0, a1, c ? need_int(R, nd, c, "count") : -1);
	}
	if (!strcmp(m, "format"))
		return str_format(R, nd, s, a);
	if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex")) {
		const struct jstr *sub = need_str(R, nd, a0, m);
		int64_t pos = -1;
		if (m[0] != 'r') {
			const char *p = sub->len ? memmem(s->d, s->len, sub->d, sub->len) : s->d;
			if (p)
				pos = (int64_t)cp_count(s->d, (size_t)(p - s->d));
		} else if (sub->len <= s->len) {
			for (size_t q = s->len - sub->len + 1; q-- > 0;)
				if (!memcmp(s->d + q, sub->d, sub->len)) {
					pos = (int64_t)cp_count(s->d, q);
					break;
				}
		}
		if (pos < 0 && (!strcmp(m, "index") || !strcmp(m, "rindex")))
			TFAIL(R, nd, "substring not found");
		return vint(pos);
	}
	if (!strcmp(m, "count")) {
		const struct jstr *sub = need_str(R, nd, a0, m);
		int64_t c = 0;
		if (!sub->len)
			return vint((int64_t)cp_count(s->d, s->len) + 1);
		for (const char *p = s->d; (p = memmem(p, s->len - (size_t)(p - s->d), sub->d, sub->len)); p += sub->len)
			c++;
		return vint(c);
	}
	if (!strcmp(m, "join")) {
		struct jlist *it;
		struct obuf o = { 0 };
		if (!a0)
			TFAIL(R, nd, "join() takes exactly one argument");
		it = iter_items(R, nd, a0);
		for (size_t i = 0; i < it->n; i++) {
			if (i)
				ob_put(R, &o, s->d, s->len);
			need_str(R, nd, &it->v[i], "join item");
			ob_put(R, &o, it->v[i].u.s->d, it->v[i].u.s->len);
		}
		return ob_val(R, &o);
	}
	if (!strcmp(m, "splitlines")) {
		struct jlist *l = mklist(&R->x, 0);
		bool keep = a0 && truthy(a0);
		size_t i = 0, st = 0;
		while (i < s->len) {
			uint32_t c;
			size_t k = u8_decode((const unsigned char *)s->d + i, s->len - i, &c);
			if (py_linebreak(c)) {
				size_t e = i + k;
				if (c == '\r' && e < s->len && s->d[e] == '\n')
					e++;
				list_push(&R->x, l, vstr(&R->x, s->d + st, (keep ? e : i) - st));
				i = st = e;
			} else {
				i += k;
			}
		}
		if (st < s->len)
			list_push(&R->x, l, vstr(&R->x, s->d + st, s->len - st));
		return vlist(l);
	}
	if (!strcmp(m, "isdigit")) return vbool(str_class(s, 0));
	if (!strcmp(m, "isalpha")) return vbool(str_class(s, 1));
	if (!strcmp(m, "isalnum")) return vbool(str_class(s, 2));
	if (!strcmp(m, "isspace")) return vbool(str_class(s, 3));
	if (!strcmp(m, "islower")) return vbool(str_class(s, 4));
	if (!strcmp(m, "isupper")) return vbool(str_class(s, 5));
	if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
		const struct jstr *p = need_str(R, nd, a0, m);
		if (p->len <= s->len) {
			if (m[6] == 'p' && !memcmp(s->d, p->d, p->len))
				return vstr(&R->x, s->d + p->len, s->len - p->len);
			if (m[6] == 's' && !memcmp(s->d + s->len - p->len, p->d, p->len))
				return vstr(&R->x, s->d, s->len - p->len);
		}
		return *self;
	}
	if (!strcmp(m, "zfill")) {
		int64_t w = need_int(R, nd, a0, "width"), n = (int64_t)cp_count(s->d, s->len);
		struct obuf o = { 0 };
		size_t st = 0;
		if (w <= n)
			return *self;
		if (s->len && (s->d[0] == '-' || s->d[0] == '+')) {
			ob_putc(R, &o, s->d[0]);
			st = 1;
		}
		for (int64_t i = n; i < w; i++)
			ob_putc(R, &o, '0');
		ob_put(R, &o, s->d + st, s->len - st);
		return ob_val(R, &o);
	}
	TFAIL(R, nd, "str.%s is not supported", m);
}

static struct val call_method(struct rs *R, const struct node *nd, const struct func *fn,
			      const struct args *a)
{
	const struct val *self = &fn->self;
	const char *m = fn->name;
	const struct val *a0 = arg_get(a, 0, NULL);
	if (self->t == VT_STR)
		return call_str_method(R, nd, self, m, a);
	if (self->t == VT_DICT) {
		const struct jdict *d = self->u.d;
		if (!strcmp(m, "get")) {
			struct val *p;
			const struct val *dv = arg_get(a, 1, "default");
			if (!a0)
				TFAIL(R, nd, "get expected at least 1 argument, got 0");
			p = dict_find(d, a0);
			return p ? *p : dv ? *dv : V_NONE;
		}
		if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
			struct jlist *l = mklist(&R->x, d->n);
			for (size_t i = 0; i < d->n; i++) {
				if (m[0] == 'i') {
					struct jlist *t = mklist(&R->x, 2);
					list_push(&R->x, t, d->k[i]);
					list_push(&R->x, t, d->v[i]);
					list_push(&R->x, l, vtuple(t));
				} else {
					list_push(&R->x, l, m[0] == 'k' ? d->k[i] : d->v[i]);
				}
			}
			return vlist_k(l, m[0] == 'i' ? LK_ITEMS : m[0] == 'k' ? LK_KEYS : LK_VALUES);
		}
		if (!strcmp(m, "copy")) {
			struct jdict *c = mkdict(&R->x);
			for (size_t i = 0; i < d->n; i++)
				dict_set(&R->x, c, d->k[i], d->v[i]);
			return vdict(c);
		}
	}
	if (self->t == VT_LIST || self->t == VT_TUPLE) {
		const struct jlist *l = self->u.l;
		if (!strcmp(m, "index") || !strcmp(m, "count")) {
			int64_t c = 0;
			if (!a0)
				TFAIL(R, nd, "%s() takes exactly one argument", m);
			for (size_t i = 0; i < l->n; i++)
				if (val_eq(&l->v[i], a0, 0)) {
					if (m[0] == 'i')
						return vint((int64_t)i);
					c++;
				}
			if (m[0] == 'i')
				TFAIL(R, nd, "list.index(x): x not in list");
			return vint(c);
		}
		if (!strcmp(m, "copy")) {
			struct jlist *c = mklist(&R->x, l->n);
			for (size_t i = 0; i < l->n; i++)
				list_push(&R->x, c, l->v[i]);
			return vlist(c);
		}
	}
	if (self->t == VT_LOOP && !strcmp(m, "cycle")) {
		if (!a->npos)
			TFAIL(R, nd, "no items for cycling given");
		return a->pos[self->u.lp->idx % a->npos];
	}
	TFAIL(R, nd, "%s.%s is not supported", type_name(self), m);
}

static struct val loop_attr(struct rs *R, const struct val *obj, const char *name, bool *found)
{
	const struct loopst *lp = obj->u.lp;
	int64_t i = (int64_t)lp->idx, n = (int64_t)lp->items->n;
	*found = true;
	if (!strcmp(name, "index"))
		return vint(i + 1);
	if (!strcmp(name, "index0"))
		return vint(i);
	if (!strcmp(name, "revindex"))
		return vint(n - i);
	if (!strcmp(name, "revindex0"))
		return vint(n - i - 1);
	if (!strcmp(name, "first"))
		return vbool(i == 0);
	if (!strcmp(name, "last"))
		return vbool(i == n - 1);
	if (!strcmp(name, "length"))
		return vint(n);
	if (!strcmp(name, "depth"))
		return vint(1);
	if (!strcmp(name, "depth0"))
		return vint(0);
	if (!strcmp(name, "previtem"))
		return i > 0 ? lp->items->v[i - 1] : vundef_msg(&R->x, "there is no previous item");
	if (!strcmp(name, "nextitem"))
		return i + 1 < n ? lp->items->v[i + 1] : vundef_msg(&R->x, "there is no next item");
	if (!strcmp(name, "cycle"))
		return mkfunc(R, FK_METHOD, "cycle", *obj);
	*found = false;
	return V_UNDEF;
}

static void exec_body(struct rs *R, struct frame *F, const struct nlist *body, struct obuf *o);

static struct val call_macro(struct rs *R, const struct node *nd, const struct macro *mc,
			     const struct args *a)
{
	const struct node *def = mc->def;
	struct frame *f;
	struct obuf o = { 0 };
	size_t np = def->kids.n;
	if (a->npos > np)
		TFAIL(R, nd, "macro '%s' takes not more than %zu argument(s)", def->name, np);
	for (size_t i = 0; i < a->nkw; i++) {
		size_t j;
		for (j = 0; j < np; j++)
			if (!strcmp(def->kids.v[j]->name, a->kn[i]))
				break;
		if (j == np)
			TFAIL(R, nd, "macro '%s' takes no keyword argument '%s'", def->name, a->kn[i]);
		if (j < a->npos)
			TFAIL(R, nd, "macro '%s' got multiple values for argument '%s'", def->name, a->kn[i]);
	}
	if (++R->depth > R->max_depth)
		rfail(R, nd, -LYNN_EUNSUPPORTED, "call depth limit of %u reached (recursive macro?)",
		      R->max_depth);
	f = frame_new(R, mc->closure);
	for (size_t i = 0; i < np; i++) {
		const char *pn = def->kids.v[i]->name;
		const struct val *v = i < a->npos ? &a->pos[i] : NULL;
		if (!v)
			for (size_t k = 0; k < a->nkw; k++)
				if (!strcmp(a->kn[k], pn))
					v = &a->kv[k];
		if (v)
			frame_set(R, f, pn, *v);
		else if (def->kids2.v[i])
			frame_set(R, f, pn, eval(R, f, def->kids2.v[i]));
		else
			frame_set(R, f, pn, vundef_msg(&R->x, "parameter '%s' was not provided", pn));
	}
	exec_body(R, f, &def->a->kids, &o);
	R->depth--;
	return ob_val(R, &o);
}

static struct val call_global(struct rs *R, const struct node *nd, const char *name,
			      const struct args *a)
{
	if (!strcmp(name, "range")) {
		int64_t start = 0, stop, step = 1, n;
		struct jlist *l;
		if (a->npos == 1) {
			stop = need_int(R, nd, &a->pos[0], "range() argument");
		} else if (a->npos == 2 || a->npos == 3) {
			start = need_int(R, nd, &a->pos[0], "range() argument");
			stop = need_int(R, nd, &a->pos[1], "range() argument");
			if (a->npos == 3)
				step = need_int(R, nd, &a->pos[2], "range() argument");
		} else {
			TFAIL(R, nd, "range expected 1 to 3 arguments, got %zu", a->npos);
		}
		if (step == 0)
			TFAIL(R, nd, "range() arg 3 must not be zero");
		if (step > 0)
			n = stop > start ? (stop - start + step - 1) / step : 0;
		else
			n = start > stop ? (start - stop - step - 1) / (-step) : 0;
		if (n > RANGE_MAX)
			TFAIL(R, nd, "range too big: the sandbox blocks ranges larger than %d", RANGE_MAX);
		l = mklist(&R->x, (size_t)n);
		for (int64_t i = 0; i < n; i++)
			list_push(&R->x, l, vint(start + i * step));
		return vlist_k(l, LK_RANGE);
	}
	if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
		struct jdict *d = mkdict(&R->x);
		struct val v;
		if (a->npos > 1)
			TFAIL(R, nd, "%s expected at most 1 positional argument", name);
		if (a->npos == 1) {
			if (a->pos[0].t != VT_DICT && a->pos[0].t != VT_NS)
				TFAIL(R, nd, "%s: the positional argument must be a mapping", name);
			for (size_t i = 0; i < a->pos[0].u.d->n; i++)
				dict_set(&R->x, d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i]);
		}
		for (size_t i = 0; i < a->nkw; i++)
			dict_set(&R->x, d, vcstr(&R->x, a->kn[i]), a->kv[i]);
		v = vdict(d);
		if (name[0] == 'n')
			v.t = VT_NS;
		return v;
	}
	if (!strcmp(name, "raise_exception")) {
		struct val m = a->npos ? to_str(R, &a->pos[0]) : vcstr(&R->x, "");
		rfail(R, nd, -LYNN_EINVAL, "raise_exception: %s", m.u.s->d);
	}
	if (!strcmp(name, "strftime_now")) {
		const struct jstr *f = need_str(R, nd, arg_get(a, 0, "format"), "strftime_now format");
		struct tm tm;
		char buf[512];
		size_t n;
		localtime_r(&R->now, &tm);
		n = f->len ? strftime(buf, sizeof buf, f->d, &tm) : 0;
		if (f->len && !n)
			TFAIL(R, nd, "strftime_now: format result too long or empty");
		return vstr(&R->x, buf, n);
	}
	TFAIL(R, nd, "the global '%s' is not supported", name);
}

static struct val call_value(struct rs *R, const struct node *nd, const struct val *fnv,
			     const struct args *a)
{
	switch (fnv->t) {
	case VT_MACRO:
		return call_macro(R, nd, fnv->u.m, a);
	case VT_FUNC:
		if (fnv->u.fn->kind == FK_GLOBAL)
			return call_global(R, nd, fnv->u.fn->name, a);
		if (fnv->u.fn->kind == FK_UNSAFE)
			TFAIL(R, nd, "access to attribute '%s' of '%s' object is unsafe", fnv->u.fn->name,
			      type_name(&fnv->u.fn->self));
		return call_method(R, nd, fnv->u.fn, a);
	case VT_UNDEF:
		undef_fail(R, nd, fnv);
	default:
		TFAIL(R, nd, "'%s' object is not callable", type_name(fnv));
	}
}

/* ===================================================================== filters and tests */

static struct val attr_path(struct rs *R, const struct node *nd, struct val v, const struct val *attr)
{
	/* make_attrgetter: "a.b.0" */
	if (attr->t == VT_INT)
		return get_item(R, nd, &v, attr);
	const struct jstr *s = need_str(R, nd, attr, "attribute");
	size_t i = 0;
	for (;;) {
		const char *dot = memchr(s->d + i, '.', s->len - i);
		size_t e = dot ? (size_t)(dot - s->d) : s->len;
		struct val key = vstr(&R->x, s->d + i, e - i);
		bool digits = e > i;
		for (size_t q = i; q < e; q++)
			digits = digits && isdigit((unsigned char)s->d[q]);
		if (digits)
			key = vint(strtoll(key.u.s->d, NULL, 10));
		v = get_item(R, nd, &v, &key);
		if (!dot)
			return v;
		i = e + 1;
	}
}

static bool run_test(struct rs *R, const struct node *nd, int id, const struct val *v,
		     const struct args *a);
static struct val run_filter(struct rs *R, const struct node *nd, int id, struct val v,
			     const struct args *a);

/* Sorting helper: stable merge sort on values with an optional key/case folding. */
struct sortctx {
	struct rs *R;
	const struct node *nd;
	bool fold;
	bool rev;
};

static struct val sort_key(struct rs *R, const struct val *v, bool fold)
{
	if (fold && v->t == VT_STR)
		return str_case(R, v, CASE_LOWER);
	return *v;
}

static void msort(struct sortctx *c, struct val *keys, struct val *vals, size_t n, struct val *tk,
		  struct val *tv)
{
	size_t m, i, j, k;
	if (n < 2)
		return;
	m = n / 2;
	msort(c, keys, vals, m, tk, tv);
	msort(c, keys + m, vals + m, n - m, tk, tv);
	for (i = 0, j = m, k = 0; i < m && j < n;) {
		int cmp = val_cmp(c->R, c->nd, &keys[j], &keys[i]);
		if (c->rev ? cmp > 0 : cmp < 0) {
			tk[k] = keys[j];
			tv[k++] = vals[j++];
		} else {
			tk[k] = keys[i];
			tv[k++] = vals[i++];
		}
	}
	while (i < m) {
		tk[k] = keys[i];
		tv[k++] = vals[i++];
	}
	while (j < n) {
		tk[k] = keys[j];
		tv[k++] = vals[j++];
	}
	memcpy(keys, tk, n * sizeof *keys);
	memcpy(vals, tv, n * sizeof *vals);
}

static struct jlist *sorted(struct rs *R, const struct node *nd, const struct jlist *in,
			    struct val *keys, bool rev)
{
	struct sortctx c = { R, nd, false, rev };
	struct jlist *out = mklist(&R->x, in->n);
	struct val *tk = jalloc(&R->x, (in->n + 1) * sizeof *tk), *tv = jalloc(&R->x, (in->n + 1) * sizeof *tv);
	for (size_t i = 0; i < in->n; i++)
		list_push(&R->x, out, in->v[i]);
	msort(&c, keys, out->v, out->n, tk, tv);
	return out;
}

static struct val indent_filter(struct rs *R, const struct node *nd, const struct val *v,
				const struct args *a)
{
	const struct val *w = arg_get(a, 0, "width"), *first = arg_get(a, 1, "first"),
			 *blank = arg_get(a, 2, "blank");
	struct obuf ind = { 0 }, o = { 0 };
	struct val s = to_str(R, v), lines;
	struct args none = { 0 };
	struct obuf sn = { 0 };
	(void)none;
	if (v->t != VT_STR)
		TFAIL(R, nd, "unsupported operand type(s) for +=: '%s' and 'str'", type_name(v));
	if (w && w->t == VT_STR)
		ob_put(R, &ind, w->u.s->d, w->u.s->len);
	else {
		int64_t n = w ? need_int(R, nd, w, "indent width") : 4;
		for (int64_t i = 0; i < n && i < 4096; i++)
			ob_putc(R, &ind, ' ');
	}
	if (!ind.d)
		ob_puts(R, &ind, "");
	ob_put(R, &sn, s.u.s->d, s.u.s->len);
	ob_putc(R, &sn, '\n');
	{
		struct val snv = ob_val(R, &sn);
		struct args sa = { 0 };
		lines = call_str_method(R, nd, &snv, "splitlines", &sa);
	}
	if (blank && truthy(blank)) {
		for (size_t i = 0; i < lines.u.l->n; i++) {
			if (i) {
				ob_putc(R, &o, '\n');
				ob_put(R, &o, ind.d, ind.n);
			}
			ob_put(R, &o, lines.u.l->v[i].u.s->d, lines.u.l->v[i].u.s->len);
		}
	} else {
		for (size_t i = 0; i < lines.u.l->n; i++) {
			const struct jstr *ln = lines.u.l->v[i].u.s;
			if (i) {
				ob_putc(R, &o, '\n');
				if (ln->len)
					ob_put(R, &o, ind.d, ind.n);
			}
			ob_put(R, &o, ln->d, ln->len);
		}
	}
	if (first && truthy(first)) {
		struct obuf o2 = { 0 };
		ob_put(R, &o2, ind.d, ind.n);
		if (o.n)
			ob_put(R, &o2, o.d, o.n);
		return ob_val(R, &o2);
	}
	return ob_val(R, &o);
}

/* select/reject/selectattr/rejectattr/map share the "filter or test by name" call. */
static struct args shift_args(const struct args *a, size_t k)
{
	struct args r = *a;
	r.pos = a->npos > k ? a->pos + k : NULL;
	r.npos = a->npos > k ? a->npos - k : 0;
	return r;
}

static struct val run_filter(struct rs *R, const struct node *nd, int id, struct val v,
			     const struct args *a)
{
	const struct val *a0 = arg_get(a, 0, NULL);
	switch (id) {
	case F_ABS:
		if (v.t == VT_INT)
			return vint(v.u.i < 0 ? -v.u.i : v.u.i);
		if (v.t == VT_FLOAT)
			return vfloat(fabs(v.u.f));
		if (v.t == VT_BOOL)
			return vint(v.u.b);
		TFAIL(R, nd, "bad operand type for abs(): '%s'", type_name(&v));
	case F_ATTR:
		return get_attr(R, nd, &v, need_str(R, nd, a0, "attr name")->d);
	case F_CAPITALIZE:
		v = to_str(R, &v);
		return str_case(R, &v, CASE_CAP);
	case F_TITLE: {
		/* Jinja2's do_title: split on runs of [-\s({\[<]; upper the first character of each
		 * piece, lower the rest (not str.title) */
		struct obuf o = { 0 };
		bool start = true;
		v = to_str(R, &v);
		for (size_t i = 0; i < v.u.s->len;) {
			uint32_t c, d;
			char enc[4];
			size_t k = u8_decode((const unsigned char *)v.u.s->d + i, v.u.s->len - i, &c);
			bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space(c);
			if (sep)
				d = c;
			else if (start)
				d = (uint32_t)utf8proc_toupper((utf8proc_int32_t)c);
			else
				d = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
			start = sep;
			ob_put(R, &o, enc, u8_encode(d, enc));
			i += k;
		}
		return ob_val(R, &o);
	}
	case F_LOWER:
		v = to_str(R, &v);
		return str_case(R, &v, CASE_LOWER);
	case F_UPPER:
		v = to_str(R, &v);
		return str_case(R, &v, CASE_UPPER);
	case F_CENTER: {
		const struct val *w = arg_get(a, 0, "width");
		int64_t width = w ? need_int(R, nd, w, "width") : 80, n, left, pad;
		struct obuf o = { 0 };
		v = to_str(R, &v);
		n = (int64_t)cp_count(v.u.s->d, v.u.s->len);
		if (width <= n)
			return v;
		pad = width - n;
		left = pad / 2 + (pad & width & 1);
		for (int64_t i = 0; i < left; i++)
			ob_putc(R, &o, ' ');
		ob_put(R, &o, v.u.s->d, v.u.s->len);
		for (int64_t i = 0; i < pad - left; i++)
			ob_putc(R, &o, ' ');
		return ob_val(R, &o);
	}
	case F_COUNT:
	case F_LENGTH:
		return vint(val_len(R, nd, &v));
	case F_DEFAULT: {
		const struct val *dv = arg_get(a, 0, "default_value"), *b = arg_get(a, 1, "boolean");
		if (v.t == VT_UNDEF || (b && truthy(b) && !truthy(&v)))
			return dv ? *dv : vcstr(&R->x, "");
		return v;
	}
	case F_DICTSORT: {
		const struct val *cs = arg_get(a, 0, "case_sensitive"), *by = arg_get(a, 1, "by"),
				 *rev = arg_get(a, 2, "reverse");
		bool by_value = by && by->t == VT_STR && !strcmp(by->u.s->d, "value");
		struct jlist *items, *keys_l;
		struct val *keys;
		if (v.t != VT_DICT)
			TFAIL(R, nd, "dictsort: expected a mapping, got %s", type_name(&v));
		if (by && !(by->t == VT_STR && (!strcmp(by->u.s->d, "key") || by_value)))
			TFAIL(R, nd, "You can only sort by either \"key\" or \"value\"");
		items = mklist(&R->x, v.u.d->n);
		keys_l = mklist(&R->x, v.u.d->n);
		for (size_t i = 0; i < v.u.d->n; i++) {
			struct jlist *t = mklist(&R->x, 2);
			list_push(&R->x, t, v.u.d->k[i]);
			list_push(&R->x, t, v.u.d->v[i]);
			list_push(&R->x, items, vtuple(t));
			list_push(&R->x, keys_l, sort_key(R, by_value ? &v.u.d->v[i] : &v.u.d->k[i],
							  !(cs && truthy(cs))));
		}
		keys = keys_l->v;
		return vlist(sorted(R, nd, items, keys, rev && truthy(rev)));
	}
	case F_ESCAPE:
		return html_escape(R, &v);
	case F_FORCEESCAPE:
		v = to_str(R, &v);
		v.safe = 0;
		return html_escape(R, &v);
	case F_FIRST:
	case F_LAST: {
		struct jlist *it;
		if (id == F_LAST && v.t == VT_LIST && v.sub == LK_GEN)
			TFAIL(R, nd, "'generator' object is not reversible");
		it = iter_items(R, nd, &v);
		if (!it->n)
			return vundef_msg(&R->x, "No %s item, sequence was empty.", id == F_FIRST ? "first" : "last");
		return it->v[id == F_FIRST ? 0 : it->n - 1];
	}
	case F_FLOAT: {
		const struct val *dv = arg_get(a, 0, "default");
		if (v.t == VT_UNDEF) /* float(Undefined) raises */
			undef_fail(R, nd, &v);
		if (v.t == VT_FLOAT)
			return v;
		if (v.t == VT_INT || v.t == VT_BOOL)
			return vfloat(num_f(&v));
		if (v.t == VT_STR) {
			char *end;
			size_t b, e;
			py_strip(v.u.s->d, v.u.s->len, NULL, 0, 3, &b, &e);
			if (e > b) {
				char *tmp = mkstr(&R->x, v.u.s->d + b, e - b)->d;
				double f = strtod(tmp, &end);
				if (!*end)
					return vfloat(f);
			}
		}
		return dv ? *dv : vfloat(0.0);
	}
	case F_INT: {
		const struct val *dv = arg_get(a, 0, "default"), *bs = arg_get(a, 1, "base");
		int base = bs ? (int)need_int(R, nd, bs, "base") : 10;
		if (v.t == VT_UNDEF) /* int(Undefined) raises */
			undef_fail(R, nd, &v);
		if (v.t == VT_INT)
			return v;
		if (v.t == VT_BOOL)
			return vint(v.u.b);
		if (v.t == VT_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18)
			return vint((int64_t)v.u.f);
		if (v.t == VT_STR) {
			size_t b, e;
			char *end;
			py_strip(v.u.s->d, v.u.s->len, NULL, 0, 3, &b, &e);
			if (e > b) {
				char *tmp = mkstr(&R->x, v.u.s->d + b, e - b)->d;
				long long iv;
				double f;
				errno = 0;
				iv = strtoll(tmp, &end, base);
				if (!*end && !errno)
					return vint(iv);
				f = strtod(tmp, &end);
				if (!*end && isfinite(f) && fabs(f) < 9.2e18)
					return vint((int64_t)f);
			}
		}
		return dv ? *dv : vint(0);
	}
	case F_ITEMS: {
		struct jlist *l;
		if (v.t == VT_UNDEF)
			return vlist_k(mklist(&R->x, 0), LK_GEN);
		if (v.t != VT_DICT)
			TFAIL(R, nd, "Can only get item pairs from a mapping.");
		l = mklist(&R->x, v.u.d->n);
		for (size_t i = 0; i < v.u.d->n; i++) {
			struct jlist *t = mklist(&R->x, 2);
			list_push(&R->x, t, v.u.d->k[i]);
			list_push(&R->x, t, v.u.d->v[i]);
			list_push(&R->x, l, vtuple(t));
		}
		return vlist_k(l, LK_GEN);
	}
	case F_JOIN: {
		const struct val *sep = arg_get(a, 0, "d"), *at = arg_get(a, 1, "attribute");
		struct jlist *it = iter_items(R, nd, &v);
		struct obuf o = { 0 };
		struct val sv = sep ? to_str(R, sep) : vcstr(&R->x, "");
		for (size_t i = 0; i < it->n; i++) {
			struct val item = at ? attr_path(R, nd, it->v[i], at) : it->v[i];
			if (i)
				ob_put(R, &o, sv.u.s->d, sv.u.s->len);
			put_str(R, &o, &item, 0);
		}
		return ob_val(R, &o);
	}
	case F_LIST:
		return vlist(iter_items(R, nd, &v));
	case F_REVERSE:
		if (v.t == VT_STR) {
			struct obuf o = { 0 };
			for (size_t e = v.u.s->len; e > 0;) {
				size_t p = u8_prev(v.u.s->d, e);
				ob_put(R, &o, v.u.s->d + p, e - p);
				e = p;
			}
			return ob_val(R, &o);
		} else {
			struct jlist *it = iter_items(R, nd, &v), *l = mklist(&R->x, it->n);
			for (size_t i = it->n; i-- > 0;)
				list_push(&R->x, l, it->v[i]);
			return vlist_k(l, LK_GEN);
		}
	case F_MAP: {
		struct jlist *it = truthy(&v) ? iter_items(R, nd, &v) : mklist(&R->x, 0), *l = mklist(&R->x, it->n);
		const struct val *at = arg_get(a, (size_t)-1, "attribute");
		if (at) {
			const struct val *dv = arg_get(a, (size_t)-1, "default");
			for (size_t i = 0; i < it->n; i++) {
				struct val r = attr_path(R, nd, it->v[i], at);
				list_push(&R->x, l, r.t == VT_UNDEF && dv ? *dv : r);
			}
		} else {
			const struct jstr *fname = need_str(R, nd, a0, "map filter name");
			int fid = find_filter(fname->d);
			struct args rest = shift_args(a, 1);
			if (fid < 0)
				TFAIL(R, nd, "No filter named '%s'.", fname->d);
			for (size_t i = 0; i < it->n; i++)
				list_push(&R->x, l, run_filter(R, nd, fid, it->v[i], &rest));
		}
		return vlist_k(l, LK_GEN);
	}
	case F_SELECT:
	case F_REJECT:
	case F_SELECTATTR:
	case F_REJECTATTR: {
		bool attr = id == F_SELECTATTR || id == F_REJECTATTR;
		bool want = id == F_SELECT || id == F_SELECTATTR;
		struct jlist *it = truthy(&v) ? iter_items(R, nd, &v) : mklist(&R->x, 0), *l = mklist(&R->x, 0);
		size_t ti = attr ? 1 : 0;
		const struct val *tn = arg_get(a, ti, NULL);
		int tid = -1;
		struct args rest = shift_args(a, ti + 1);
		if (attr && !a0)
			TFAIL(R, nd, "selectattr/rejectattr need an attribute name");
		if (tn) {
			tid = find_test(need_str(R, nd, tn, "test name")->d);
			if (tid < 0)
				TFAIL(R, nd, "No test named '%s'.", tn->u.s->d);
		}
		for (size_t i = 0; i < it->n; i++) {
			struct val item = attr ? attr_path(R, nd, it->v[i], a0) : it->v[i];
			bool ok = tid < 0 ? truthy(&item) : run_test(R, nd, tid, &item, &rest);
			if (ok == want)
				list_push(&R->x, l, it->v[i]);
		}
		return vlist_k(l, LK_GEN);
	}
	case F_MIN:
	case F_MAX: {
		const struct val *cs = arg_get(a, 0, "case_sensitive"), *at = arg_get(a, 1, "attribute");
		struct jlist *it = iter_items(R, nd, &v);
		size_t best = 0;
		struct val bk = V_UNDEF;
		if (!it->n)
			return vundef_msg(&R->x, "No aggregated item, sequence was empty.");
		for (size_t i = 0; i < it->n; i++) {
			struct val item = at ? attr_path(R, nd, it->v[i], at) : it->v[i];
			struct val k = sort_key(R, &item, !(cs && truthy(cs)));
			if (i == 0) {
				bk = k;
				continue;
			}
			int c = val_cmp(R, nd, &k, &bk);
			if (id == F_MIN ? c < 0 : c > 0) {
				bk = k;
				best = i;
			}
		}
		return it->v[best];
	}
	case F_REPLACE: {
		const struct val *c = arg_get(a, 2, "count");
		v = to_str(R, &v);
		return str_replace(R, nd, &v, arg_get(a, 0, "old"), arg_get(a, 1, "new"),
				   c && c->t != VT_NONE ? need_int(R, nd, c, "count") : -1);
	}
	case F_ROUND: {
		const struct val *pr = arg_get(a, 0, "precision"), *me = arg_get(a, 1, "method");
		int64_t p = pr ? need_int(R, nd, pr, "precision") : 0;
		const char *method = me ? need_str(R, nd, me, "method")->d : "common";
		double x;
		if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
			TFAIL(R, nd, "method must be common, ceil or floor");
		if (!is_num(&v))
			TFAIL(R, nd, "round: expected a number, got %s", type_name(&v));
		x = num_f(&v);
		if (!strcmp(method, "common")) {
			char buf[400];
			if (v.t != VT_FLOAT)
				return p >= 0 ? vint(num_i(&v)) : vint(num_i(&v)); /* round(int) stays int */
			if (!isfinite(x))
				return v;
			if (p < 0 || p > 300)
				TFAIL(R, nd, "round: precision %lld is not supported", (long long)p);
			snprintf(buf, sizeof buf, "%.*f", (int)p, x);
			return vfloat(strtod(buf, NULL));
		} else {
			double m = pow(10.0, (double)p);
			return vfloat((method[0] == 'c' ? ceil(x * m) : floor(x * m)) / m);
		}
	}
	case F_SAFE:
		v = to_str(R, &v);
		v.safe = 1;
		return v;
	case F_SORT:
	case F_UNIQUE: {
		const struct val *rev = NULL, *cs, *at;
		struct jlist *it = iter_items(R, nd, &v), *keys;
		if (id == F_SORT) {
			rev = arg_get(a, 0, "reverse");
			cs = arg_get(a, 1, "case_sensitive");
			at = arg_get(a, 2, "attribute");
		} else {
			cs = arg_get(a, 0, "case_sensitive");
			at = arg_get(a, 1, "attribute");
		}
		keys = mklist(&R->x, it->n);
		for (size_t i = 0; i < it->n; i++) {
			struct val item = at ? attr_path(R, nd, it->v[i], at) : it->v[i];
			list_push(&R->x, keys, sort_key(R, &item, !(cs && truthy(cs))));
		}
		if (id == F_SORT)
			return vlist(sorted(R, nd, it, keys->v, rev && truthy(rev)));
		{
			struct jlist *l = mklist(&R->x, 0), *seen = mklist(&R->x, 0);
			for (size_t i = 0; i < it->n; i++) {
				bool dup = false;
				for (size_t j = 0; j < seen->n && !dup; j++)
					dup = val_eq(&seen->v[j], &keys->v[i], 0);
				if (!dup) {
					list_push(&R->x, seen, keys->v[i]);
					list_push(&R->x, l, it->v[i]);
				}
			}
			return vlist_k(l, LK_GEN);
		}
	}
	case F_STRING:
		return to_str(R, &v);
	case F_SUM: {
		const struct val *at = arg_get(a, 0, "attribute"), *st = arg_get(a, 1, "start");
		struct jlist *it = iter_items(R, nd, &v);
		struct val acc = st ? *st : vint(0);
		for (size_t i = 0; i < it->n; i++)
			acc = arith(R, nd, OP_ADD, acc, at ? attr_path(R, nd, it->v[i], at) : it->v[i]);
		return acc;
	}
	case F_TOJSON: {
		const struct val *ea = arg_get(a, 0, "ensure_ascii"), *in = arg_get(a, 1, "indent"),
				 *sp = arg_get(a, 2, "separators"), *sk = arg_get(a, 3, "sort_keys");
		struct jsonopt jo = { NULL, ", ", ": ", sk && truthy(sk), ea && truthy(ea) };
		struct obuf o = { 0 };
		if (in && in->t != VT_NONE) {
			if (in->t == VT_STR) {
				jo.indent = in->u.s->d;
			} else {
				int64_t n = need_int(R, nd, in, "indent");
				char *s = jalloc(&R->x, (size_t)(n > 0 ? n : 0) + 1);
				memset(s, ' ', (size_t)(n > 0 ? n : 0));
				s[n > 0 ? n : 0] = 0;
				jo.indent = s;
			}
			jo.item_sep = ",";
		}
		if (sp && sp->t != VT_NONE) {
			if ((sp->t != VT_TUPLE && sp->t != VT_LIST) || sp->u.l->n != 2)
				TFAIL(R, nd, "tojson: separators must be a pair of strings");
			jo.item_sep = need_str(R, nd, &sp->u.l->v[0], "separator")->d;
			jo.key_sep = need_str(R, nd, &sp->u.l->v[1], "separator")->d;
		}
		json_dump(R, nd, &o, &v, &jo, 0);
		return ob_val(R, &o);
	}
	case F_TRIM: {
		v = to_str(R, &v);
		return str_strip(R, nd, &v, arg_get(a, 0, "chars"), 3);
	}
	case F_WORDCOUNT: {
		v = to_str(R, &v);
		int64_t c = 0;
		bool in = false;
		for (size_t i = 0; i < v.u.s->len; i++) {
			char ch = v.u.s->d[i];
			bool w = isalnum((unsigned char)ch) || ch == '_' || (unsigned char)ch >= 0x80;
			if (w && !in)
				c++;
			in = w;
		}
		return vint(c);
	}
	case F_INDENT:
		return indent_filter(R, nd, &v, a);
	case F_BATCH: {
		int64_t k = need_int(R, nd, arg_get(a, 0, "linecount"), "batch size");
		const struct val *fill = arg_get(a, 1, "fill_with");
		struct jlist *it = iter_items(R, nd, &v), *l = mklist(&R->x, 0), *cur = NULL;
		if (k <= 0)
			TFAIL(R, nd, "batch size must be positive");
		for (size_t i = 0; i < it->n; i++) {
			if (!cur || (int64_t)cur->n == k) {
				cur = mklist(&R->x, (size_t)k);
				list_push(&R->x, l, vlist(cur));
			}
			list_push(&R->x, cur, it->v[i]);
		}
		if (cur && fill && fill->t != VT_NONE)
			while ((int64_t)cur->n < k)
				list_push(&R->x, cur, *fill);
		return vlist_k(l, LK_GEN);
	}
	case F_FORMAT:
		TFAIL(R, nd, "the 'format' filter (printf-style) is not supported");
	case F_STRIPTAGS:
		TFAIL(R, nd, "the 'striptags' filter is not supported");
	}
	TFAIL(R, nd, "filter not implemented");
}

static bool run_test(struct rs *R, const struct node *nd, int id, const struct val *v,
		     const struct args *a)
{
	const struct val *a0 = arg_get(a, 0, NULL);
	switch (id) {
	case X_ODD:
	case X_EVEN: {
		/* value % 2 == 1 / == 0 with Python's % */
		struct val m;
		if (!is_num(v))
			TFAIL(R, nd, "unsupported operand type(s) for %%: '%s' and 'int'", type_name(v));
		m = arith(R, nd, OP_MOD, *v, vint(2));
		return val_eq(&m, &(struct val){ .t = VT_INT, .u.i = id == X_ODD ? 1 : 0 }, 0);
	}
	case X_DIVISIBLEBY: {
		struct val m;
		if (!a0)
			TFAIL(R, nd, "divisibleby needs an argument");
		m = arith(R, nd, OP_MOD, *v, *a0);
		return val_eq(&m, &(struct val){ .t = VT_INT, .u.i = 0 }, 0);
	}
	case X_DEFINED: return v->t != VT_UNDEF;
	case X_UNDEFINED: return v->t == VT_UNDEF;
	case X_NONE: return v->t == VT_NONE;
	case X_BOOLEAN: return v->t == VT_BOOL;
	case X_FALSE: return v->t == VT_BOOL && !v->u.b;
	case X_TRUE: return v->t == VT_BOOL && v->u.b;
	case X_INTEGER: return v->t == VT_INT;
	case X_FLOAT: return v->t == VT_FLOAT;
	case X_LOWER: { struct val s = to_str(R, v); return str_class(s.u.s, 4); }
	case X_UPPER: { struct val s = to_str(R, v); return str_class(s.u.s, 5); }
	case X_STRING: return v->t == VT_STR;
	case X_MAPPING: return v->t == VT_DICT;
	case X_NUMBER: return is_num(v);
	case X_SEQUENCE:
		if (v->t == VT_LIST)
			return v->sub == LK_LIST || v->sub == LK_RANGE;
		return v->t == VT_STR || v->t == VT_TUPLE || v->t == VT_DICT || v->t == VT_UNDEF;
	case X_ITERABLE:
		return v->t == VT_STR || v->t == VT_LIST || v->t == VT_TUPLE || v->t == VT_DICT || v->t == VT_UNDEF;
	case X_CALLABLE: return v->t == VT_MACRO || v->t == VT_FUNC;
	case X_SAMEAS:
		if (!a0)
			TFAIL(R, nd, "sameas needs an argument");
		if (v->t != a0->t)
			return false;
		switch (v->t) {
		case VT_NONE: case VT_UNDEF: return true;
		case VT_BOOL: return v->u.b == a0->u.b;
		case VT_INT: return v->u.i == a0->u.i && v->u.i >= -5 && v->u.i <= 256;
		default: return v->u.m == a0->u.m;
		}
	case X_ESCAPED: return v->t == VT_STR && v->safe;
	case X_IN:
		if (!a0)
			TFAIL(R, nd, "'in' test needs an argument");
		return contains(R, nd, v, a0);
	case X_EQ: case X_NE:
		if (!a0)
			TFAIL(R, nd, "comparison test needs an argument");
		return val_eq(v, a0, 0) == (id == X_EQ);
	case X_GT: case X_GE: case X_LT: case X_LE: {
		int c;
		if (!a0)
			TFAIL(R, nd, "comparison test needs an argument");
		c = val_cmp(R, nd, v, a0);
		return id == X_GT ? c > 0 : id == X_GE ? c >= 0 : id == X_LT ? c < 0 : c <= 0;
	}
	case X_FILTER: return v->t == VT_STR && find_filter(v->u.s->d) >= 0;
	case X_TEST: return v->t == VT_STR && find_test(v->u.s->d) >= 0;
	}
	return false;
}

/* ===================================================================== evaluation */

static struct val blockval_slot; /* never read: E_BLOCKVAL values travel through eval_filter_on */

static struct val eval_filter_on(struct rs *R, struct frame *F, const struct node *e, struct val base)
{
	/* Re-evaluate a filter chain whose innermost object is E_BLOCKVAL with `base`. */
	struct args a;
	struct val obj = e->a->k == E_BLOCKVAL ? base : eval_filter_on(R, F, e->a, base);
	if (e->fid < 0)
		TFAIL(R, e, "%s filter '%s'", e->fid == -1 ? "unknown" : "unsupported", e->name);
	eval_args(R, F, e, &a);
	return run_filter(R, e, e->fid, obj, &a);
}

static struct val eval(struct rs *R, struct frame *F, const struct node *e)
{
	struct val a, b;
	switch (e->k) {
	case E_CONST:
		return e->v;
	case E_NAME:
		return lookup(R, F, e->name);
	case E_ATTR:
		a = eval(R, F, e->a);
		return get_attr(R, e, &a, e->name);
	case E_ITEM:
		a = eval(R, F, e->a);
		b = eval(R, F, e->b);
		return get_item(R, e, &a, &b);
	case E_SLICE:
		a = eval(R, F, e->a);
		return do_slice(R, F, e, &a);
	case E_CALL: {
		struct args args;
		a = eval(R, F, e->a);
		eval_args(R, F, e, &args);
		return call_value(R, e, &a, &args);
	}
	case E_FILTER: {
		struct args args;
		if (e->fid < 0)
			TFAIL(R, e, "%s filter '%s'", e->fid == -1 ? "unknown" : "unsupported", e->name);
		a = eval(R, F, e->a);
		eval_args(R, F, e, &args);
		return run_filter(R, e, e->fid, a, &args);
	}
	case E_TEST: {
		struct args args;
		if (e->fid < 0)
			TFAIL(R, e, "unknown test '%s'", e->name);
		a = eval(R, F, e->a);
		eval_args(R, F, e, &args);
		return vbool(run_test(R, e, e->fid, &a, &args));
	}
	case E_BIN:
		a = eval(R, F, e->a);
		b = eval(R, F, e->b);
		return arith(R, e, e->op, a, b);
	case E_NEG:
	case E_POS:
		a = eval(R, F, e->a);
		if (a.t == VT_INT || a.t == VT_BOOL)
			return vint(e->k == E_NEG ? -num_i(&a) : num_i(&a));
		if (a.t == VT_FLOAT)
			return vfloat(e->k == E_NEG ? -a.u.f : a.u.f);
		if (a.t == VT_UNDEF)
			undef_fail(R, e, &a);
		TFAIL(R, e, "bad operand type for unary %c: '%s'", e->k == E_NEG ? '-' : '+', type_name(&a));
	case E_NOT:
		a = eval(R, F, e->a);
		return vbool(!truthy(&a));
	case E_AND:
		a = eval(R, F, e->a);
		return truthy(&a) ? eval(R, F, e->b) : a;
	case E_OR:
		a = eval(R, F, e->a);
		return truthy(&a) ? a : eval(R, F, e->b);
	case E_CMP: {
		a = eval(R, F, e->kids.v[0]);
		for (size_t i = 1; i < e->kids.n; i++) {
			bool r;
			int op = e->cmpops[i - 1];
			b = eval(R, F, e->kids.v[i]);
			switch (op) {
			case C_EQ: r = val_eq(&a, &b, 0); break;
			case C_NE: r = !val_eq(&a, &b, 0); break;
			case C_IN: r = contains(R, e, &a, &b); break;
			case C_NOTIN: r = !contains(R, e, &a, &b); break;
			default: {
				int c;
				if (a.t == VT_UNDEF)
					undef_fail(R, e, &a);
				if (b.t == VT_UNDEF)
					undef_fail(R, e, &b);
				c = val_cmp(R, e, &a, &b);
				r = op == C_LT ? c < 0 : op == C_LE ? c <= 0 : op == C_GT ? c > 0 : c >= 0;
			}
			}
			if (!r)
				return vbool(false);
			a = b;
		}
		return vbool(true);
	}
	case E_COND:
		a = eval(R, F, e->b);
		if (truthy(&a))
			return eval(R, F, e->a);
		return e->c ? eval(R, F, e->c)
			    : vundef_msg(&R->x, "the inline if-expression evaluated to false and no else section was defined");
	case E_LIST:
	case E_TUPLE: {
		struct jlist *l = mklist(&R->x, e->kids.n);
		for (size_t i = 0; i < e->kids.n; i++)
			list_push(&R->x, l, eval(R, F, e->kids.v[i]));
		return e->k == E_LIST ? vlist(l) : vtuple(l);
	}
	case E_DICT: {
		struct jdict *d = mkdict(&R->x);
		for (size_t i = 0; i < e->kids.n; i++) {
			struct val k = eval(R, F, e->kids.v[i]);
			if (k.t != VT_STR && k.t != VT_INT && k.t != VT_FLOAT && k.t != VT_BOOL &&
			    k.t != VT_NONE && k.t != VT_TUPLE)
				TFAIL(R, e, "unhashable type: '%s'", type_name(&k));
			dict_set(&R->x, d, k, eval(R, F, e->kids2.v[i]));
		}
		return vdict(d);
	}
	case E_CONCAT: {
		struct obuf o = { 0 };
		for (size_t i = 0; i < e->kids.n; i++) {
			a = eval(R, F, e->kids.v[i]);
			put_str(R, &o, &a, 0);
		}
		return ob_val(R, &o);
	}
	case E_BLOCKVAL:
		return blockval_slot;
	}
	TFAIL(R, e, "bad expression node");
}

static void assign(struct rs *R, struct frame *F, const struct node *t, struct val v)
{
	if (t->k == E_NAME) {
		frame_set(R, F, t->name, v);
	} else if (t->k == E_ATTR) {
		struct val ns = eval(R, F, t->a);
		if (ns.t != VT_NS)
			TFAIL(R, t, "cannot assign attribute on non-namespace object");
		dict_set(&R->x, ns.u.d, vcstr(&R->x, t->name), v);
	} else {
		struct jlist *items;
		if (v.t == VT_UNDEF)
			undef_fail(R, t, &v);
		items = iter_items(R, t, &v);
		if (items->n != t->kids.n)
			TFAIL(R, t, "%s values to unpack (expected %zu, got %zu)",
			      items->n < t->kids.n ? "not enough" : "too many", t->kids.n, items->n);
		for (size_t i = 0; i < items->n; i++)
			assign(R, F, t->kids.v[i], items->v[i]);
	}
}

static void exec_for(struct rs *R, struct frame *F, const struct node *s, struct obuf *o)
{
	struct val it = eval(R, F, s->b);
	struct jlist *items = iter_items(R, s->b, &it);
	struct loopst *lp = jzalloc(&R->x, sizeof *lp);
	struct val lv = { .t = VT_LOOP };
	if (s->c) { /* {% for x in xs if cond %}: filter first (loop.length counts kept items) */
		struct jlist *kept = mklist(&R->x, items->n);
		for (size_t i = 0; i < items->n; i++) {
			struct frame *tf = frame_new(R, F);
			struct val cv;
			if (++R->loops > R->max_loop)
				rfail(R, s, -LYNN_EUNSUPPORTED, "loop iteration limit of %llu reached",
				      (unsigned long long)R->max_loop);
			assign(R, tf, s->a, items->v[i]);
			cv = eval(R, tf, s->c);
			if (truthy(&cv))
				list_push(&R->x, kept, items->v[i]);
		}
		items = kept;
	}
	lp->items = items;
	lv.u.lp = lp;
	for (size_t i = 0; i < items->n; i++) {
		struct frame *f = frame_new(R, F);
		if (++R->loops > R->max_loop)
			rfail(R, s, -LYNN_EUNSUPPORTED, "loop iteration limit of %llu reached",
			      (unsigned long long)R->max_loop);
		lp->idx = i;
		frame_set(R, f, "loop", lv);
		assign(R, f, s->a, items->v[i]);
		exec_body(R, f, &s->kids, o);
		if (R->ctl == 1) {
			R->ctl = 0;
			break;
		}
		R->ctl = 0;
	}
	if (!items->n && s->kids2.n)
		exec_body(R, frame_new(R, F), &s->kids2, o);
}

static void exec_body(struct rs *R, struct frame *F, const struct nlist *body, struct obuf *o)
{
	for (size_t i = 0; i < body->n && !R->ctl; i++) {
		const struct node *s = body->v[i];
		R->x.line = s->line;
		R->x.col = s->col;
		switch (s->k) {
		case N_DATA:
			ob_put(R, o, s->v.u.s->d, s->v.u.s->len);
			break;
		case N_OUT: {
			struct val v = eval(R, F, s->a);
			put_str(R, o, &v, 0);
			break;
		}
		case N_IF: {
			struct val c = eval(R, F, s->a);
			exec_body(R, F, truthy(&c) ? &s->kids : &s->kids2, o);
			break;
		}
		case N_FOR:
			exec_for(R, F, s, o);
			break;
		case N_SET:
			assign(R, F, s->a, eval(R, F, s->b));
			break;
		case N_SETBLOCK: {
			struct obuf b = { 0 };
			struct val v;
			exec_body(R, frame_new(R, F), &s->kids, &b); /* the block is its own scope */
			v = ob_val(R, &b);
			if (s->c)
				v = eval_filter_on(R, F, s->c, v);
			assign(R, F, s->a, v);
			break;
		}
		case N_FILTERBLOCK: {
			struct obuf b = { 0 };
			struct val v;
			exec_body(R, frame_new(R, F), &s->kids, &b);
			v = eval_filter_on(R, F, s->c, ob_val(R, &b));
			put_str(R, o, &v, 0);
			break;
		}
		case N_MACRO: {
			struct val m = { .t = VT_MACRO };
			m.u.m = jalloc(&R->x, sizeof *m.u.m);
			m.u.m->def = s;
			m.u.m->closure = F;
			frame_set(R, F, s->name, m);
			break;
		}
		case N_BREAK:
			R->ctl = 1;
			break;
		case N_CONTINUE:
			R->ctl = 2;
			break;
		default:
			TFAIL(R, s, "bad statement node");
		}
	}
}

/* ===================================================================== JSON context (ints stay ints) */

struct jp {
	struct jx *x;
	const char *s;
	size_t n, i;
	int depth;
};

static _Noreturn void jp_fail(struct jp *p, const char *what)
{
	jfail(p->x, -LYNN_EFORMAT, 0, 0, "context JSON: %s at byte %zu", what, p->i);
}

static void jp_ws(struct jp *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
		p->i++;
}

static unsigned jp_hex4(struct jp *p)
{
	unsigned v = 0;
	if (p->i + 4 > p->n)
		jp_fail(p, "truncated \\u escape");
	for (int k = 0; k < 4; k++) {
		char h = p->s[p->i++];
		if (!isxdigit((unsigned char)h))
			jp_fail(p, "bad \\u escape");
		v = v * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : tolower(h) - 'a' + 10);
	}
	return v;
}

/* Arena-backed byte buffer for the JSON reader (a longjmp may leave it at any time). */
struct abuf {
	char *d;
	size_t n, cap;
};

static void ab_put(struct jx *x, struct abuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		char *nd;
		while (cap < b->n + n + 1)
			cap *= 2;
		nd = jalloc(x, cap);
		if (b->n)
			memcpy(nd, b->d, b->n);
		b->d = nd;
		b->cap = cap;
	}
	memcpy(b->d + b->n, s, n);
	b->n += n;
}

static struct val jp_string(struct jp *p)
{
	struct abuf b = { 0 };
	struct val v = { .t = VT_STR };
	size_t start;
	p->i++;
	for (;;) {
		start = p->i;
		while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' && (unsigned char)p->s[p->i] >= 0x20)
			p->i++;
		ab_put(p->x, &b, p->s + start, p->i - start);
		if (p->i >= p->n || (unsigned char)p->s[p->i] < 0x20)
			jp_fail(p, p->i >= p->n ? "unterminated string" : "control character in string");
		if (p->s[p->i] == '"') {
			p->i++;
			break;
		}
		p->i++;
		if (p->i >= p->n)
			jp_fail(p, "unterminated string");
		char c = p->s[p->i++], enc[4];
		switch (c) {
		case '"': case '\\': case '/': ab_put(p->x, &b, &c, 1); break;
		case 'b': ab_put(p->x, &b, "\b", 1); break;
		case 'f': ab_put(p->x, &b, "\f", 1); break;
		case 'n': ab_put(p->x, &b, "\n", 1); break;
		case 'r': ab_put(p->x, &b, "\r", 1); break;
		case 't': ab_put(p->x, &b, "\t", 1); break;
		case 'u': {
			unsigned cp = jp_hex4(p);
			if (cp >= 0xd800 && cp < 0xdc00 && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
				size_t save = p->i;
				unsigned lo;
				p->i += 2;
				lo = jp_hex4(p);
				if (lo >= 0xdc00 && lo < 0xe000)
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				else
					p->i = save;
			}
			ab_put(p->x, &b, enc, u8_encode(cp, enc));
			break;
		}
		default:
			jp_fail(p, "bad escape in string");
		}
	}
	v.u.s = mkstr(p->x, b.d ? b.d : "", b.n);
	return v;
}

/* At a container's start: skip white space, then consume `close` if it is next (empty). */
static bool jp_close(struct jp *p, char close)
{
	jp_ws(p);
	if (p->i < p->n && p->s[p->i] == close) {
		p->i++;
		return true;
	}
	return false;
}

/* After an item: ',' (true: another item follows) or `close` (false); anything else fails with `what`. */
static bool jp_next(struct jp *p, char close, const char *what)
{
	jp_ws(p);
	if (p->i < p->n && p->s[p->i] == ',') {
		p->i++;
		return true;
	}
	if (jp_close(p, close))
		return false;
	jp_fail(p, what);
}

static struct val jp_value(struct jp *p)
{
	jp_ws(p);
	if (p->i >= p->n)
		jp_fail(p, "unexpected end");
	char c = p->s[p->i];
	if (c == '{' || c == '[') {
		if (++p->depth > VALUE_MAX_DEPTH)
			jp_fail(p, "nested too deeply");
		p->i++;
		if (c == '{') {
			struct jdict *d = mkdict(p->x);
			if (!jp_close(p, '}')) {
				do {
					struct val k, v;
					jp_ws(p);
					if (p->i >= p->n || p->s[p->i] != '"')
						jp_fail(p, "expected a string key");
					k = jp_string(p);
					jp_ws(p);
					if (p->i >= p->n || p->s[p->i] != ':')
						jp_fail(p, "expected ':'");
					p->i++;
					v = jp_value(p);
					dict_set(p->x, d, k, v);
				} while (jp_next(p, '}', "expected ',' or '}'"));
			}
			p->depth--;
			return vdict(d);
		} else {
			struct jlist *l = mklist(p->x, 0);
			if (!jp_close(p, ']')) {
				do
					list_push(p->x, l, jp_value(p));
				while (jp_next(p, ']', "expected ',' or ']'"));
			}
			p->depth--;
			return vlist(l);
		}
	}
	if (c == '"')
		return jp_string(p);
	if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "true", 4)) {
		p->i += 4;
		return vbool(true);
	}
	if (p->n - p->i >= 5 && !memcmp(p->s + p->i, "false", 5)) {
		p->i += 5;
		return vbool(false);
	}
	if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "null", 4)) {
		p->i += 4;
		return V_NONE;
	}
	if (c == '-' || isdigit((unsigned char)c)) {
		size_t st = p->i;
		bool flt = false;
		char buf[64];
		if (p->s[p->i] == '-')
			p->i++;
		if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i]))
			jp_fail(p, "bad number");
		if (p->s[p->i] == '0')
			p->i++;
		else
			while (p->i < p->n && isdigit((unsigned char)p->s[p->i]))
				p->i++;
		if (p->i < p->n && p->s[p->i] == '.') {
			flt = true;
			p->i++;
			if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i]))
				jp_fail(p, "bad number");
			while (p->i < p->n && isdigit((unsigned char)p->s[p->i]))
				p->i++;
		}
		if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
			flt = true;
			p->i++;
			if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
				p->i++;
			if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i]))
				jp_fail(p, "bad number");
			while (p->i < p->n && isdigit((unsigned char)p->s[p->i]))
				p->i++;
		}
		if (p->i - st >= sizeof buf)
			jp_fail(p, "number too long");
		memcpy(buf, p->s + st, p->i - st);
		buf[p->i - st] = 0;
		if (!flt) {
			long long v;
			errno = 0;
			v = strtoll(buf, NULL, 10);
			if (!errno)
				return vint(v);
		}
		return vfloat(strtod(buf, NULL));
	}
	jp_fail(p, "unexpected character");
}

static struct val from_cjson(struct jx *x, const cJSON *j, int depth)
{
	if (depth > VALUE_MAX_DEPTH)
		jfail(x, -LYNN_EFORMAT, 0, 0, "context JSON nested too deeply");
	if (cJSON_IsNull(j))
		return V_NONE;
	if (cJSON_IsBool(j))
		return vbool(cJSON_IsTrue(j));
	if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		if (d == floor(d) && fabs(d) <= 9007199254740992.0)
			return vint((int64_t)d);
		return vfloat(d);
	}
	if (cJSON_IsString(j))
		return vcstr(x, j->valuestring ? j->valuestring : "");
	if (cJSON_IsArray(j)) {
		struct jlist *l = mklist(x, 0);
		for (const cJSON *c = j->child; c; c = c->next)
			list_push(x, l, from_cjson(x, c, depth + 1));
		return vlist(l);
	}
	if (cJSON_IsObject(j)) {
		struct jdict *d = mkdict(x);
		for (const cJSON *c = j->child; c; c = c->next)
			dict_set(x, d, vcstr(x, c->string ? c->string : ""), from_cjson(x, c, depth + 1));
		return vdict(d);
	}
	return V_NONE;
}

/* ===================================================================== public API */

static void do_parse(struct jx *x, struct lynn_jinja *t, const char *src, size_t len)
{
	struct lexer L = { 0 };
	struct parser P = { 0 };
	char *norm;
	size_t n = 0, nl = 1;
	/* newlines: \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False) */
	norm = jalloc(x, len + 1);
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			norm[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			norm[n++] = src[i];
		}
	}
	if (n && norm[n - 1] == '\n')
		n--;
	norm[n] = 0;
	L.x = x;
	L.src = norm;
	L.n = n;
	for (size_t i = 0; i < n; i++)
		nl += norm[i] == '\n';
	L.line_start = jalloc(x, nl * sizeof *L.line_start);
	L.line_start[0] = 0;
	L.nlines = 1;
	for (size_t i = 0; i < n; i++)
		if (norm[i] == '\n')
			L.line_start[L.nlines++] = i + 1;
	lex(&L);
	P.x = x;
	P.t = L.toks;
	P.n = L.ntok;
	parse_body(&P, &t->body, NULL, NULL, NULL);
	for (size_t i = 0; i < P.unknown.n; i++) {
		const struct node *u = P.unknown.v[i];
		if (!u->flag)
			jfail(x, -LYNN_EFORMAT, u->line, u->col, "unknown %s '%s'",
			      u->k == E_FILTER ? "filter" : "test", u->name);
	}
}

struct lynn_jinja *lynn_jinja_parse(const char *name, const char *src, size_t len,
				    struct lynn_err *err)
{
	struct lynn_jinja *volatile t = calloc(1, sizeof(struct lynn_jinja));
	struct jx x = { 0 };
	if (!t || !(t->name = strdup(name ? name : "template"))) {
		free(t);
		lynn_errf(err, -LYNN_ENOMEM, "jinja: out of memory");
		return NULL;
	}
	x.err = err;
	x.name = t->name;
	x.mem_limit = (size_t)1 << 30;
	if (setjmp(x.jb)) {
		jx_free_arena(x.arena);
		free(t->name);
		free(t);
		return NULL;
	}
	do_parse(&x, t, src ? src : "", src ? len : 0);
	t->arena = x.arena;
	return t;
}

void lynn_jinja_free(struct lynn_jinja *t)
{
	if (!t)
		return;
	jx_free_arena(t->arena);
	free(t->name);
	free(t);
}

static int render_common(const struct lynn_jinja *t, const char *json, size_t len, const cJSON *cj,
			 const struct lynn_jinja_opts *opts, char **out, size_t *out_len,
			 struct lynn_err *err)
{
	struct rs R;
	struct obuf o = { 0 };
	struct val ctx;
	volatile int rc = 0;
	memset(&R, 0, sizeof R);
	*out = NULL;
	if (out_len)
		*out_len = 0;
	R.x.err = err;
	R.x.name = t->name;
	R.t = t;
	R.max_depth = opts && opts->max_depth ? opts->max_depth : LYNN_JINJA_MAX_DEPTH;
	R.max_loop = opts && opts->max_loop ? opts->max_loop : LYNN_JINJA_MAX_LOOP;
	R.max_output = opts && opts->max_output ? opts->max_output : LYNN_JINJA_MAX_OUTPUT;
	R.x.mem_limit = opts && opts->max_memory ? opts->max_memory : LYNN_JINJA_MAX_MEMORY;
	R.now = opts && opts->now ? opts->now : time(NULL);
	if (setjmp(R.x.jb)) {
		rc = err && err->code ? err->code : -LYNN_EFORMAT;
		goto out;
	}
	if (cj) {
		ctx = from_cjson(&R.x, cj, 0);
	} else {
		struct jp p = { &R.x, json ? json : "{}", 0, 0, 0 };
		p.n = json ? (len == SIZE_MAX ? strlen(json) : len) : 2;
		ctx = jp_value(&p);
		jp_ws(&p);
		if (p.i != p.n)
			jp_fail(&p, "trailing characters");
	}
	if (ctx.t != VT_DICT)
		jfail(&R.x, -LYNN_EFORMAT, 0, 0, "the context must be a JSON object");
	R.ctx = ctx.u.d;
	exec_body(&R, frame_new(&R, NULL), &t->body, &o);
	*out = malloc(o.n + 1);
	if (!*out) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "jinja: out of memory");
		goto out;
	}
	if (o.n)
		memcpy(*out, o.d, o.n);
	(*out)[o.n] = 0;
	if (out_len)
		*out_len = o.n;
out:
	jx_free_arena(R.x.arena);
	return rc;
}

int lynn_jinja_render(const struct lynn_jinja *t, const char *ctx_json, size_t len,
		      const struct lynn_jinja_opts *opts, char **out, size_t *out_len,
		      struct lynn_err *err)
{
	return render_common(t, ctx_json, len, NULL, opts, out, out_len, err);
}

int lynn_jinja_render_cjson(const struct lynn_jinja *t, const cJSON *ctx,
			    const struct lynn_jinja_opts *opts, char **out, size_t *out_len,
			    struct lynn_err *err)
{
	if (!ctx)
		return render_common(t, "{}", 2, NULL, opts, out, out_len, err);
	return render_common(t, NULL, 0, ctx, opts, out, out_len, err);
}
