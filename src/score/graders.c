/*
 * graders.c - the g2 graders of SPEC §5: tool calls (v8), gold string_match
 * and regex checks (v9), and the daily-mix gold grader (lynn eval --suite).
 *
 * The tool-call and gold graders follow the original four_gate_eval.py
 * (score_tool_call, extract_tool_calls, score_string_match): the same
 * patterns, run through PCRE2 in UTF + Unicode-property mode, and JSON read
 * with cJSON under Python json.loads's rules where they matter (the whole
 * match must be one value; with duplicate keys the last one counts). The
 * Qwen3.5 XML call form is lynn's addition (SPEC §5). The daily-mix grader
 * is lynn's own definition, written down in docs/grading.md.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/score.h"
#include "score/score_internal.h"

static inline bool is_digit_ascii(char c) { return c >= '0' && c <= '9'; }

/* ===== PCRE2 helpers ===== */

static pcre2_code *re_compile(const char *pat, size_t len, uint32_t extra, struct lynn_err *err,
			      const char *what)
{
	int ec;
	PCRE2_SIZE eo;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len,
				       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | extra, &ec,
				       &eo, NULL);
	if (!re) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(ec, msg, sizeof msg);
		lynn_errf(err, -LYNN_EFORMAT, "grade: %s pattern '%.60s' does not compile at offset %zu: %s",
			  what, pat, (size_t)eo, (const char *)msg);
	}
	return re;
}

/* ===== tool calls ===== */

/* Python's \s (str.isspace), which PCRE2's \s does not quite match */
#define PYS "[\\t-\\r\\x{1c}-\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}]"

static const char TOOL_CALL_BLOCK[] = "<tool_call>" PYS "*(\\{.*?\\})" PYS "*</tool_call>";
static const char TOOL_CALL_JSON_INLINE[] =
	"\\{" PYS "*\"name\"" PYS "*:" PYS "*\"[^\"]+\"" PYS "*," PYS "*\"arguments\"" PYS "*:" PYS
	"*\\{[^{}]*\\}" PYS "*\\}";
static const char TOOL_CALL_XML[] =
	"<tool_call>" PYS "*<function=([^>\\n]*)>(.*?)</function>" PYS "*</tool_call>";
static const char XML_PARAM[] = "<parameter=([^>\\n]*)>(.*?)</parameter>";

/* The last member named `key` (Python dicts keep the last duplicate). */
static cJSON *last_item(const cJSON *obj, const char *key)
{
	cJSON *it, *found = NULL;
	cJSON_ArrayForEach(it, obj)
		if (it->string && !strcmp(it->string, key))
			found = it;
	return found;
}

/* Python truthiness of a JSON value. */
static bool truthy(const cJSON *v)
{
	if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v))
		return false;
	if (cJSON_IsString(v))
		return v->valuestring && v->valuestring[0];
	if (cJSON_IsNumber(v))
		return v->valuedouble != 0.0;
	if (cJSON_IsArray(v) || cJSON_IsObject(v))
		return v->child != NULL;
	return true;
}

/* ===== Python json.loads acceptance =====
 *
 * The original parses each candidate with json.loads; cJSON accepts and
 * refuses different texts (raw control characters in strings, leading zeros,
 * NaN, lone surrogate escapes), so acceptance is decided here by CPython's
 * grammar (Modules/_json.c scanner, strict=True), and cJSON only builds the
 * object. The last top-level "name" member is tracked (Python dicts keep the
 * last duplicate). */

struct pyj {
	const char *s;
	size_t n, i;
	int depth;
	/* the root object's last "name" member */
	bool has_name, name_truthy, name_is_str;
	struct lynn_buf name; /* decoded UTF-8 when name_is_str */
};

static void pj_ws(struct pyj *p)
{
	while (p->i < p->n && strchr(" \t\n\r", p->s[p->i]) && p->s[p->i])
		p->i++;
}

static int hexv(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
		return (c | 0x20) - 'a' + 10;
	return -1;
}

/* A string at p->i ('"'); decoded into out when non-NULL. */
static bool pj_string(struct pyj *p, struct lynn_buf *out, bool *nonempty)
{
	size_t start;
	p->i++;
	start = p->i;
	while (p->i < p->n) {
		unsigned char c = (unsigned char)p->s[p->i];
		if (c == '"') {
			if (nonempty)
				*nonempty = p->i > start;
			p->i++;
			return true;
		}
		if (c < 0x20)
			return false; /* strict: no raw control characters */
		if (c == '\\') {
			char e;
			if (++p->i >= p->n)
				return false;
			e = p->s[p->i];
			if (e == 'u') {
				uint32_t cp = 0;
				if (p->i + 4 >= p->n)
					return false;
				for (int k = 1; k <= 4; k++) {
					int h = hexv(p->s[p->i + (size_t)k]);
					if (h < 0)
						return false;
					cp = cp << 4 | (uint32_t)h;
				}
				p->i += 5;
				if (cp >= 0xD800 && cp <= 0xDBFF && p->i + 5 < p->n && p->s[p->i] == '\\' &&
				    p->s[p->i + 1] == 'u') {
					uint32_t lo = 0;
					bool ok = true;
					for (int k = 2; k <= 5; k++) {
						int h = hexv(p->s[p->i + (size_t)k]);
						if (h < 0)
							ok = false;
						lo = lo << 4 | (uint32_t)(h < 0 ? 0 : h);
					}
					if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
						p->i += 6;
					}
				}
				if (out) {
					char u[4];
					/* a lone surrogate has no UTF-8 form: U+FFFD stands in */
					if (cp >= 0xD800 && cp <= 0xDFFF)
						cp = 0xFFFD;
					if (lynn_buf_append(out, u, (size_t)utf8_put(cp, u)))
						return false;
				}
				continue;
			}
			if (!strchr("\"\\/bfnrt", e) || !e)
				return false;
			if (out) {
				static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
				if (lynn_buf_putc(out, to[strchr(from, e) - from]))
					return false;
			}
			p->i++;
			continue;
		}
		if (out && lynn_buf_putc(out, (char)c))
			return false;
		p->i++;
	}
	return false;
}

static bool lit(struct pyj *p, const char *w)
{
	size_t l = strlen(w);
	if (p->i + l > p->n || memcmp(p->s + p->i, w, l))
		return false;
	p->i += l;
	return true;
}

enum pj_kind { PJ_FALSY, PJ_TRUTHY, PJ_STRING };

static bool pj_value(struct pyj *p, enum pj_kind *kind, struct lynn_buf *str);

static bool pj_number(struct pyj *p, enum pj_kind *kind)
{
	size_t st = p->i;
	bool nonzero = false;
	if (p->s[p->i] == '-') {
		p->i++;
		if (lit(p, "Infinity")) {
			*kind = PJ_TRUTHY;
			return true;
		}
	}
	if (p->i >= p->n || !is_digit_ascii(p->s[p->i]))
		return false;
	if (p->s[p->i] == '0') {
		p->i++;
	} else {
		while (p->i < p->n && is_digit_ascii(p->s[p->i]))
			nonzero |= p->s[p->i++] != '0';
	}
	if (p->i + 1 < p->n && p->s[p->i] == '.' && is_digit_ascii(p->s[p->i + 1])) {
		p->i++;
		while (p->i < p->n && is_digit_ascii(p->s[p->i]))
			nonzero |= p->s[p->i++] != '0';
	}
	if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		size_t save = p->i++;
		if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (p->i < p->n && is_digit_ascii(p->s[p->i])) {
			while (p->i < p->n && is_digit_ascii(p->s[p->i]))
				p->i++;
		} else {
			p->i = save; /* "1e" is the number 1 followed by garbage */
		}
	}
	(void)st;
	*kind = nonzero ? PJ_TRUTHY : PJ_FALSY; /* 1e-999 is 0.0 in Python: rare */
	return true;
}

static bool pj_value(struct pyj *p, enum pj_kind *kind, struct lynn_buf *str)
{
	char c;
	if (p->i >= p->n)
		return false;
	c = p->s[p->i];
	if (c == '"') {
		bool ne = false;
		if (!pj_string(p, str, &ne))
			return false;
		*kind = str ? PJ_STRING : (ne ? PJ_TRUTHY : PJ_FALSY);
		if (str && !ne)
			*kind = PJ_FALSY;
		return true;
	}
	if (c == '{' || c == '[') {
		bool root = p->depth == 0, first = true, any = false;
		char close = c == '{' ? '}' : ']';
		if (++p->depth > 200)
			return false;
		p->i++;
		pj_ws(p);
		if (p->i < p->n && p->s[p->i] == close) {
			p->i++;
			p->depth--;
			*kind = PJ_FALSY;
			return true;
		}
		for (;;) {
			enum pj_kind vk;
			bool is_name = false;
			if (!first) {
				pj_ws(p);
				if (p->i < p->n && p->s[p->i] == close)
					break;
				if (p->i >= p->n || p->s[p->i] != ',')
					return false;
				p->i++;
				pj_ws(p);
			}
			first = false;
			if (c == '{') {
				struct lynn_buf key = LYNN_BUF_INIT;
				bool ok;
				if (p->i >= p->n || p->s[p->i] != '"')
					return false;
				ok = pj_string(p, root ? &key : NULL, NULL);
				is_name = ok && root && key.data && !strcmp(key.data, "name") &&
					  key.len == 4;
				lynn_buf_release(&key);
				if (!ok)
					return false;
				pj_ws(p);
				if (p->i >= p->n || p->s[p->i] != ':')
					return false;
				p->i++;
				pj_ws(p);
			}
			if (is_name) {
				lynn_buf_reset(&p->name);
				lynn_buf_puts(&p->name, "");
				if (!pj_value(p, &vk, &p->name))
					return false;
				p->has_name = true;
				p->name_is_str = vk == PJ_STRING;
				p->name_truthy = vk != PJ_FALSY;
			} else if (!pj_value(p, &vk, NULL)) {
				return false;
			}
			any = true;
		}
		p->i++;
		p->depth--;
		*kind = any ? PJ_TRUTHY : PJ_FALSY;
		return true;
	}
	if (lit(p, "true") || lit(p, "NaN") || lit(p, "Infinity")) {
		*kind = PJ_TRUTHY;
		return true;
	}
	if (lit(p, "false") || lit(p, "null")) {
		*kind = PJ_FALSY;
		return true;
	}
	if (c == '-' || is_digit_ascii(c))
		return pj_number(p, kind);
	return false;
}

/* json.loads(s[0..len)) as a tool call: NULL unless Python would return a
 * dict with a truthy "name". The object comes from cJSON when cJSON can read
 * it, else it is {"name": <the name>, "arguments": {}}. */
static cJSON *parse_call(const char *s, size_t len)
{
	struct pyj p = { s, len, 0, 0, false, false, false, LYNN_BUF_INIT };
	enum pj_kind k;
	cJSON *obj = NULL;
	const char *end = NULL;

	pj_ws(&p);
	if (p.i >= p.n || s[p.i] != '{' || !pj_value(&p, &k, NULL))
		goto out;
	pj_ws(&p);
	if (p.i != p.n || !p.has_name || !p.name_truthy)
		goto out;
	obj = cJSON_ParseWithLengthOpts(s, len, &end, false);
	if (!obj || !cJSON_IsObject(obj)) {
		cJSON_Delete(obj);
		obj = cJSON_CreateObject();
		if (!obj)
			goto out;
		if (p.name_is_str)
			cJSON_AddStringToObject(obj, "name", p.name.data ? p.name.data : "");
		else
			cJSON_AddTrueToObject(obj, "name");
		cJSON_AddItemToObject(obj, "arguments", cJSON_CreateObject());
	} else if (p.name_is_str) {
		/* the decoded last "name" decides, whatever cJSON made of it */
		cJSON_DeleteItemFromObjectCaseSensitive(obj, "name");
		while (cJSON_GetObjectItemCaseSensitive(obj, "name"))
			cJSON_DeleteItemFromObjectCaseSensitive(obj, "name");
		cJSON_AddStringToObject(obj, "name", p.name.data ? p.name.data : "");
	}
out:
	lynn_buf_release(&p.name);
	return obj;
}

/* Append calls matched by `pat` (whole match or group 1 as JSON). */
static int json_calls(const char *out, size_t len, const char *pat, int group, cJSON *calls,
		      struct lynn_err *err)
{
	pcre2_code *re = re_compile(pat, PCRE2_ZERO_TERMINATED, PCRE2_DOTALL, err, "tool-call");
	pcre2_match_data *md;
	PCRE2_SIZE start = 0;
	if (!re)
		return -LYNN_ENOMEM;
	md = pcre2_match_data_create_from_pattern(re, NULL);
	if (!md) {
		pcre2_code_free(re);
		return lynn_errf(err, -LYNN_ENOMEM, "grade: out of memory");
	}
	while (start <= len) {
		int rc = pcre2_match(re, (PCRE2_SPTR)out, len, start, 0, md, NULL);
		PCRE2_SIZE *ov;
		cJSON *obj;
		if (rc < 0)
			break;
		ov = pcre2_get_ovector_pointer(md);
		obj = parse_call(out + ov[2 * group], ov[2 * group + 1] - ov[2 * group]);
		if (obj)
			cJSON_AddItemToArray(calls, obj);
		start = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
	}
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	return 0;
}

static char *trim_dup(const char *s, size_t n)
{
	while (n && strchr(" \t\r\n", s[0]) && s[0]) {
		s++;
		n--;
	}
	while (n && strchr(" \t\r\n", s[n - 1]) && s[n - 1])
		n--;
	return strndup(s, n);
}

static int xml_calls(const char *out, size_t len, cJSON *calls, struct lynn_err *err)
{
	pcre2_code *re = re_compile(TOOL_CALL_XML, PCRE2_ZERO_TERMINATED, PCRE2_DOTALL, err, "xml");
	pcre2_code *rp = re_compile(XML_PARAM, PCRE2_ZERO_TERMINATED, PCRE2_DOTALL, err, "xml");
	pcre2_match_data *md = NULL, *mp = NULL;
	PCRE2_SIZE start = 0;
	int ret = 0;
	if (!re || !rp || !(md = pcre2_match_data_create_from_pattern(re, NULL)) ||
	    !(mp = pcre2_match_data_create_from_pattern(rp, NULL))) {
		ret = lynn_errf(err, -LYNN_ENOMEM, "grade: out of memory");
		goto out;
	}
	while (start <= len) {
		int rc = pcre2_match(re, (PCRE2_SPTR)out, len, start, 0, md, NULL);
		PCRE2_SIZE *ov, ps;
		cJSON *call, *args;
		char *name;
		if (rc < 0)
			break;
		ov = pcre2_get_ovector_pointer(md);
		name = trim_dup(out + ov[2], ov[3] - ov[2]);
		call = cJSON_CreateObject();
		args = cJSON_CreateObject();
		if (!name || !call || !args) {
			free(name);
			cJSON_Delete(call);
			cJSON_Delete(args);
			ret = lynn_errf(err, -LYNN_ENOMEM, "grade: out of memory");
			goto out;
		}
		cJSON_AddStringToObject(call, "name", name);
		free(name);
		ps = ov[4];
		while (ps < ov[5]) {
			PCRE2_SIZE *pv;
			char *k, *v;
			if (pcre2_match(rp, (PCRE2_SPTR)out, ov[5], ps, 0, mp, NULL) < 0)
				break;
			pv = pcre2_get_ovector_pointer(mp);
			k = trim_dup(out + pv[2], pv[3] - pv[2]);
			v = trim_dup(out + pv[4], pv[5] - pv[4]);
			if (k && v)
				cJSON_AddStringToObject(args, k, v);
			free(k);
			free(v);
			ps = pv[1] > ps ? pv[1] : ps + 1;
		}
		cJSON_AddItemToObject(call, "arguments", args);
		if (cJSON_GetObjectItem(call, "name")->valuestring[0])
			cJSON_AddItemToArray(calls, call);
		else
			cJSON_Delete(call);
		start = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
	}
out:
	pcre2_match_data_free(md);
	pcre2_match_data_free(mp);
	pcre2_code_free(re);
	pcre2_code_free(rp);
	return ret;
}

cJSON *lynn_tool_calls_extract(const char *output, size_t len, struct lynn_err *err)
{
	cJSON *calls = cJSON_CreateArray();
	if (!calls) {
		lynn_errf(err, -LYNN_ENOMEM, "grade: out of memory");
		return NULL;
	}
	if (json_calls(output, len, TOOL_CALL_BLOCK, 1, calls, err) ||
	    xml_calls(output, len, calls, err) ||
	    (!calls->child && json_calls(output, len, TOOL_CALL_JSON_INLINE, 0, calls, err))) {
		cJSON_Delete(calls);
		return NULL;
	}
	return calls;
}

const char *lynn_tool_via_name(enum lynn_tool_via via)
{
	switch (via) {
	case LYNN_TOOL_VIA_STRUCTURED: return "structured";
	case LYNN_TOOL_VIA_STRUCTURED_MISMATCH: return "structured_mismatch";
	case LYNN_TOOL_VIA_SUBSTRING: return "substring_fallback";
	}
	return "?";
}

static bool has_sub(const char *h, size_t hl, const char *n, size_t nl)
{
	return nl == 0 || memmem(h, hl, n, nl) != NULL;
}

int lynn_grade_tool_call(const char *output, size_t len, const char *expected_name,
			 const cJSON *param_hints, struct lynn_tool_result *out,
			 struct lynn_err *err)
{
	cJSON *calls, *c;
	const char *en = expected_name ? expected_name : "";

	memset(out, 0, sizeof *out);
	if (param_hints && !cJSON_IsNull(param_hints) && !cJSON_IsObject(param_hints))
		return lynn_errf(err, -LYNN_EFORMAT, "grade: expected.param_hints must be an object");
	calls = lynn_tool_calls_extract(output, len, err);
	if (!calls)
		return -LYNN_ENOMEM;
	out->n_calls = cJSON_GetArraySize(calls);
	if (out->n_calls) {
		out->via = LYNN_TOOL_VIA_STRUCTURED_MISMATCH;
		cJSON_ArrayForEach(c, calls) {
			const cJSON *name = last_item(c, "name");
			if (cJSON_IsString(name) && !strcmp(name->valuestring, en)) {
				out->via = LYNN_TOOL_VIA_STRUCTURED;
				out->pass = true;
				break;
			}
		}
		cJSON_Delete(calls);
		return 0;
	}
	cJSON_Delete(calls);
	out->via = LYNN_TOOL_VIA_SUBSTRING;
	out->has_name = has_sub(output, len, en, strlen(en));
	if (param_hints && truthy(param_hints)) {
		const cJSON *key;
		cJSON_ArrayForEach(key, param_hints) {
			const cJSON *h;
			if (cJSON_IsString(key)) {
				/* a string iterates as its characters in Python */
				const unsigned char *s = (const unsigned char *)key->valuestring;
				size_t sl = strlen(key->valuestring), i = 0;
				while (i < sl && !out->has_param) {
					size_t st = i;
					utf8_next(s, sl, &i);
					out->has_param = has_sub(output, len, key->valuestring + st, i - st);
				}
			} else if (cJSON_IsArray(key)) {
				cJSON_ArrayForEach(h, key) {
					if (!cJSON_IsString(h))
						return lynn_errf(err, -LYNN_EFORMAT,
								 "grade: expected.param_hints.%s must hold strings",
								 key->string ? key->string : "?");
					if (has_sub(output, len, h->valuestring, strlen(h->valuestring))) {
						out->has_param = true;
						break;
					}
				}
			} else {
				return lynn_errf(err, -LYNN_EFORMAT,
						 "grade: expected.param_hints.%s must be a list of strings",
						 key->string ? key->string : "?");
			}
			if (out->has_param)
				break;
		}
	} else {
		out->has_param = true;
	}
	out->pass = out->has_name && out->has_param;
	return 0;
}

/* ===== gold answers ===== */

int lynn_grade_gold(const char *output, size_t len, const char *gold, const char *verifier,
		    bool *pass, struct lynn_err *err)
{
	*pass = false;
	if (!gold)
		return lynn_errf(err, -LYNN_EINVAL, "grade: no gold answer");
	if (verifier && !strcmp(verifier, "regex")) {
		pcre2_code *re = re_compile(gold, strlen(gold), 0, err, "gold regex");
		pcre2_match_data *md;
		int rc;
		if (!re)
			return -LYNN_EFORMAT;
		md = pcre2_match_data_create_from_pattern(re, NULL);
		if (!md) {
			pcre2_code_free(re);
			return lynn_errf(err, -LYNN_ENOMEM, "grade: out of memory");
		}
		rc = pcre2_match(re, (PCRE2_SPTR)output, len, 0, 0, md, NULL);
		*pass = rc >= 0;
		pcre2_match_data_free(md);
		pcre2_code_free(re);
		return 0;
	}
	{
		/* str(gold).strip() in output */
		const unsigned char *g = (const unsigned char *)gold;
		size_t gl = strlen(gold), s = 0, e = gl, i;
		while (s < e) {
			i = s;
			if (!py_isspace(utf8_next(g, gl, &i)))
				break;
			s = i;
		}
		while (e > s) {
			size_t b = e - 1;
			while (b > s && (g[b] & 0xC0) == 0x80)
				b--;
			i = b;
			if (!py_isspace(utf8_next(g, gl, &i)))
				break;
			e = b;
		}
		*pass = has_sub(output, len, gold + s, e - s);
	}
	return 0;
}

/* ===== daily-mix grader ===== */

static bool is_adigit(int c) { return is_digit_ascii((char)c); }
static bool is_aalnum(int c) { return is_adigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Index just past the group that opens at s[i] == '{' (balanced), or 0. */
static size_t brace_end(const char *s, size_t n, size_t i)
{
	int depth = 0;
	for (size_t k = i; k < n; k++) {
		if (s[k] == '\\' && k + 1 < n) {
			k++;
			continue;
		}
		if (s[k] == '{')
			depth++;
		else if (s[k] == '}' && --depth == 0)
			return k + 1;
	}
	return 0;
}

static bool starts(const char *s, size_t n, size_t i, const char *w)
{
	size_t l = strlen(w);
	return i + l <= n && !memcmp(s + i, w, l);
}

/* Pass 1: LaTeX. Unwrap \boxed{x} \fbox{x} \text{x} \textbf{x} \mathrm{x}
 * \mathbf{x} \operatorname{x}; \frac{a}{b} \dfrac \tfrac → (a)/(b) without
 * parentheses; drop $, \( \) \[ \], \left, \right, \, \; \! \: "\ "; \% → %. */
static int latex(struct lynn_buf *b, const char *s, size_t n, int depth)
{
	static const char *const wraps[] = { "\\boxed", "\\fbox", "\\textbf", "\\text",
					     "\\mathrm", "\\mathbf", "\\operatorname" };
	static const char *const fracs[] = { "\\dfrac", "\\tfrac", "\\frac" };
	size_t i = 0;
	if (depth > 64)
		return lynn_buf_append(b, s, n);
	while (i < n) {
		bool done = false;
		if (s[i] == '\\') {
			for (size_t k = 0; k < sizeof wraps / sizeof *wraps && !done; k++) {
				size_t l = strlen(wraps[k]), e;
				if (!starts(s, n, i, wraps[k]) || i + l >= n || s[i + l] != '{')
					continue;
				e = brace_end(s, n, i + l);
				if (!e)
					continue;
				if (latex(b, s + i + l + 1, e - i - l - 2, depth + 1))
					return -LYNN_ENOMEM;
				i = e;
				done = true;
			}
			for (size_t k = 0; k < sizeof fracs / sizeof *fracs && !done; k++) {
				size_t l = strlen(fracs[k]), e1, e2;
				if (!starts(s, n, i, fracs[k]) || i + l >= n || s[i + l] != '{')
					continue;
				e1 = brace_end(s, n, i + l);
				if (!e1 || e1 >= n || s[e1] != '{')
					continue;
				e2 = brace_end(s, n, e1);
				if (!e2)
					continue;
				if (latex(b, s + i + l + 1, e1 - i - l - 2, depth + 1) ||
				    lynn_buf_putc(b, '/') || latex(b, s + e1 + 1, e2 - e1 - 2, depth + 1))
					return -LYNN_ENOMEM;
				i = e2;
				done = true;
			}
			if (!done) {
				static const char *const drops[] = { "\\left", "\\right", "\\(", "\\)",
								     "\\[", "\\]", "\\,", "\\;",
								     "\\!", "\\:", "\\ " };
				for (size_t k = 0; k < sizeof drops / sizeof *drops && !done; k++)
					if (starts(s, n, i, drops[k])) {
						i += strlen(drops[k]);
						if (k >= 2 && lynn_buf_putc(b, ' '))
							return -LYNN_ENOMEM;
						done = true;
					}
				if (!done && starts(s, n, i, "\\%")) {
					if (lynn_buf_putc(b, '%'))
						return -LYNN_ENOMEM;
					i += 2;
					done = true;
				}
			}
		} else if (s[i] == '$') {
			if (lynn_buf_putc(b, ' '))
				return -LYNN_ENOMEM;
			i++;
			done = true;
		}
		if (!done) {
			if (lynn_buf_putc(b, s[i]))
				return -LYNN_ENOMEM;
			i++;
		}
	}
	return 0;
}

char *lynn_daily_normalize(const char *text, size_t len, struct lynn_err *err)
{
	struct lynn_buf a = LYNN_BUF_INIT, b = LYNN_BUF_INIT;
	char *res = NULL;
	size_t i, n;

	if (lynn_buf_puts(&a, "") || latex(&a, text, len, 0))
		goto oom;
	/* Pass 2: thousands separators, trailing zeros, ASCII lowercase,
	 * whitespace runs → one space, trimmed. */
	if (lynn_buf_puts(&b, ""))
		goto oom;
	n = a.len;
	for (i = 0; i < n;) {
		const char *s = a.data;
		unsigned char c = (unsigned char)s[i];
		if (is_adigit(c) && (i == 0 || !(is_adigit(s[i - 1]) || s[i - 1] == '.'))) {
			/* a number: digits with ",ddd" groups, optional .digits */
			size_t j = i, q;
			while (j < n && is_adigit(s[j]))
				j++;
			while (j + 3 < n && s[j] == ',' && is_adigit(s[j + 1]) && is_adigit(s[j + 2]) &&
			       is_adigit(s[j + 3]) && (j + 4 >= n || !is_adigit(s[j + 4])))
				j += 4;
			for (q = i; q < j; q++)
				if (s[q] != ',' && lynn_buf_putc(&b, s[q]))
					goto oom;
			if (j < n && s[j] == '.' && j + 1 < n && is_adigit(s[j + 1])) {
				size_t f = j + 1, fe, last;
				while (f < n && is_adigit(s[f]))
					f++;
				fe = f;
				last = fe;
				while (last > j + 1 && s[last - 1] == '0')
					last--;
				if (last > j + 1) {
					if (lynn_buf_putc(&b, '.') ||
					    lynn_buf_append(&b, s + j + 1, last - j - 1))
						goto oom;
				}
				j = fe;
			}
			i = j;
			continue;
		}
		if (c < 0x80 && py_isspace(c)) {
			if (b.len && b.data[b.len - 1] != ' ' && lynn_buf_putc(&b, ' '))
				goto oom;
			i++;
			continue;
		}
		if (c >= 'A' && c <= 'Z')
			c = (unsigned char)(c + 32);
		if (lynn_buf_putc(&b, (char)c))
			goto oom;
		i++;
	}
	while (b.len && b.data[b.len - 1] == ' ')
		b.data[--b.len] = 0;
	res = lynn_buf_detach(&b);
	if (res && res[0] == ' ')
		memmove(res, res + 1, strlen(res));
	lynn_buf_release(&a);
	return res;
oom:
	lynn_buf_release(&a);
	lynn_buf_release(&b);
	lynn_errf(err, -LYNN_ENOMEM, "grade: out of memory");
	return NULL;
}

/* Tokens of a normalized text: runs of ASCII letters/digits (with '.' or '/'
 * kept between two digits), or one non-ASCII letter or digit. Spans into s. */
static size_t daily_tokens(const char *s, size_t n, size_t *off, size_t *len)
{
	size_t i = 0, k = 0;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		if (is_aalnum(c)) {
			size_t st = i;
			while (i < n && (is_aalnum(s[i]) ||
					 ((s[i] == '.' || s[i] == '/') && i > st && is_adigit(s[i - 1]) &&
					  i + 1 < n && is_adigit(s[i + 1]))))
				i++;
			off[k] = st;
			len[k++] = i - st;
		} else if (c >= 0x80) {
			size_t st = i;
			uint32_t cp = utf8_next((const unsigned char *)s, n, &i);
			if (uc_is_letter(cp) || py_isdecimal(cp)) {
				off[k] = st;
				len[k++] = i - st;
			}
		} else {
			i++;
		}
	}
	return k;
}

static bool found_bounded(const char *h, size_t hl, const char *g, size_t gl)
{
	const char *p = h, *end = h + hl;
	if (gl == 0)
		return false;
	while (p < end && (p = memmem(p, (size_t)(end - p), g, gl)) != NULL) {
		size_t at = (size_t)(p - h), after = at + gl;
		bool ok = true;
		if (is_aalnum((unsigned char)g[0]) && at > 0) {
			char b = h[at - 1];
			if (is_aalnum((unsigned char)b) ||
			    (is_adigit((unsigned char)g[0]) && b == '.' && at > 1 && is_adigit(h[at - 2])))
				ok = false;
		}
		if (ok && is_aalnum((unsigned char)g[gl - 1]) && after < hl) {
			char a = h[after];
			if (is_aalnum((unsigned char)a) ||
			    (is_adigit((unsigned char)g[gl - 1]) && a == '.' && after + 1 < hl &&
			     is_adigit(h[after + 1])))
				ok = false;
		}
		if (ok)
			return true;
		p++;
	}
	return false;
}

int lynn_grade_daily(const char *answer, size_t len, const char *gold,
		     struct lynn_daily_result *out, struct lynn_err *err)
{
	char *na = NULL, *ng = NULL;
	size_t *ga = NULL, *gl = NULL, *aa = NULL, *al = NULL, nga, naa, la, lg;
	int rc = -LYNN_ENOMEM;

	memset(out, 0, sizeof *out);
	if (!gold)
		return lynn_errf(err, -LYNN_EINVAL, "grade: no gold answer");
	na = lynn_daily_normalize(answer, len, err);
	ng = lynn_daily_normalize(gold, strlen(gold), err);
	if (!na || !ng)
		goto out;
	la = strlen(na);
	lg = strlen(ng);
	if (found_bounded(na, la, ng, lg)) {
		out->pass = true;
		out->via = LYNN_DAILY_EXACT;
	}
	ga = malloc((lg + 1) * sizeof *ga);
	gl = malloc((lg + 1) * sizeof *gl);
	aa = malloc((la + 1) * sizeof *aa);
	al = malloc((la + 1) * sizeof *al);
	if (!ga || !gl || !aa || !al) {
		lynn_errf(err, -LYNN_ENOMEM, "grade: out of memory");
		goto out;
	}
	nga = daily_tokens(ng, lg, ga, gl);
	naa = daily_tokens(na, la, aa, al);
	out->n_gold_tokens = (int)nga;
	out->n_needed = (int)(nga - nga / 4);
	for (size_t k = 0; k < nga; k++)
		for (size_t q = 0; q < naa; q++)
			if (gl[k] == al[q] && !memcmp(ng + ga[k], na + aa[q], gl[k])) {
				out->n_found++;
				break;
			}
	if (!out->pass && nga >= 2 && out->n_found >= out->n_needed) {
		out->pass = true;
		out->via = LYNN_DAILY_TOKENS;
	}
	rc = 0;
out:
	free(na);
	free(ng);
	free(ga);
	free(gl);
	free(aa);
	free(al);
	return rc;
}
