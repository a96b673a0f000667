/*
 * quality.c - the per-output quality checks of quant-verify (SPEC §6, the
 * original toolkit's quant_verify.quality_check) and the built-in prompts.
 *
 * Texts are handled as code points, as Python's str: lengths, ratios and
 * the repetition search count characters, not bytes. Malformed UTF-8 bytes
 * count as U+FFFD each (an unexpected script).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "lynn/buf.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/qverify.h"
#include "lynn/score.h"

/* ===== the built-in prompts (lynn's own) ===== */

static char *a_moe[] = { "expert", "专家", "active", "激活", "参数", "parameter", "token" };
static char *a_fact[] = { "def", "factorial", "阶乘", "return", "递归" };
static char *a_kv[] = { "cache", "缓存", "attention", "注意力", "key", "memory", "内存" };
static char *a_umb[] = { "伞", "雨", "天气", "umbrella", "rain", "weather" };
static char *a_speed[] = { "80", "km", "公里", "速度", "speed" };
static char *a_sql[] = { "select", "orders", "where", "amount", "金额" };

static struct lynn_qv_prompt builtin[] = {
	{ "qv_1", "用一两句话说明 MoE 模型里的「激活参数」是什么意思。", "moe_active_params", a_moe, 7 },
	{ "qv_2", "Write a recursive factorial function in Python.", "python_factorial", a_fact, 5 },
	{ "qv_3", "为什么大模型推理需要 KV cache?简要说明。", "kv_cache", a_kv, 7 },
	{ "qv_4", "明天上海可能下雨,出门要带什么?", "shanghai_umbrella", a_umb, 6 },
	{ "qv_5", "A cyclist rides 200 km in 2.5 hours. What is the average speed in km/h?", "cyclist_speed", a_speed, 5 },
	{ "qv_6", "写一条 SQL:从 orders 表中查出金额大于 100 的订单。", "sql_orders", a_sql, 5 },
};

size_t lynn_qv_builtin_prompts(const struct lynn_qv_prompt **out)
{
	*out = builtin;
	return sizeof(builtin) / sizeof(*builtin);
}

/* ===== code points ===== */

/* Decode UTF-8 into code points; malformed bytes become U+FFFD each. */
static int32_t *decode(const char *s, size_t len, size_t *n)
{
	int32_t *cp = malloc((len + 1) * sizeof(*cp));
	size_t k = 0, i = 0;
	if (!cp)
		return NULL;
	while (i < len) {
		utf8proc_int32_t c;
		utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
		if (r < 1) {
			cp[k++] = 0xfffd;
			i++;
		} else {
			cp[k++] = c;
			i += (size_t)r;
		}
	}
	*n = k;
	return cp;
}

static bool py_space(int32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* str.lower() per code point (U+0130 → "i̇" as Python; the Greek final
 * sigma context rule is not applied). Writes 1 or 2 code points. */
static size_t lower_cp(int32_t c, int32_t out[2])
{
	if (c == 0x130) {
		out[0] = 'i';
		out[1] = 0x307;
		return 2;
	}
	out[0] = utf8proc_tolower(c);
	return 1;
}

static bool is_cjk(int32_t c) { return c >= 0x4e00 && c <= 0x9fff; }
static bool is_ascii_ok(int32_t c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == ' ';
}
static bool is_punct(int32_t c)
{
	static const int32_t set[] = { ',', 0x3002, '.', 0xff0c, 0x3001, ':', '!', '?', ';', '-', 0x2014,
				       '(', ')', '"', '\'', 0x300c, 0x300d, 0x300a, 0x300b, '<', '>', '[', ']' };
	for (size_t i = 0; i < sizeof(set) / sizeof(*set); i++)
		if (c == set[i])
			return true;
	return false;
}

/* (.{2,8})\1{2,} and (.)\1{5,} over the compact text. */
static bool repeated_ngram(const int32_t *s, size_t n)
{
	for (size_t L = 2; L <= 8; L++)
		for (size_t i = 0; i + 3 * L <= n; i++)
			if (!memcmp(s + i, s + i + L, L * sizeof(*s)) && !memcmp(s + i, s + i + 2 * L, L * sizeof(*s)))
				return true;
	return false;
}

static bool repeated_char(const int32_t *s, size_t n)
{
	size_t run = 1;
	for (size_t i = 1; i < n; i++) {
		run = s[i] == s[i - 1] ? run + 1 : 1;
		if (run >= 6)
			return true;
	}
	return false;
}

/* Encode code points back to UTF-8 (for substring tests on lowered text). */
static char *encode(const int32_t *s, size_t n)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	for (size_t i = 0; i < n; i++) {
		utf8proc_uint8_t u[4];
		utf8proc_ssize_t k = utf8proc_encode_char(s[i], u);
		lynn_buf_append(&b, u, (size_t)k);
	}
	lynn_buf_putc(&b, 0);
	b.len--;
	return lynn_buf_detach(&b);
}

static const char *gibberish[] = { "haltup", "depiwup", "luania", "iaup", "upupup", "printstats",
				   "matchcondition" };

cJSON *lynn_qv_quality(const char *text, const struct lynn_qv_prompt *p, bool *pass)
{
	size_t n = 0, nl = 0, nc = 0, total, stripped;
	int32_t *cp = decode(text, strlen(text), &n), *low = NULL, *compact = NULL;
	char *low_s = NULL, *compact_s = NULL;
	int cnt[8] = { 0 }; /* cjk, latin_digit_space, punct, arabic, kana, cyrillic, hangul, replacement */
	size_t ok = 0, a = 0, b;
	int weird;
	double readable, weird_ratio;
	bool min_len, script, readable_ok, rep_ng, rep_ch, sem = true;
	cJSON *q = NULL, *reasons, *sc, *rep, *frags, *se, *hits;
	char buf[160];

	*pass = false;
	if (!cp)
		return NULL;
	low = malloc((2 * n + 1) * sizeof(*low));
	compact = malloc((2 * n + 1) * sizeof(*compact));
	if (!low || !compact)
		goto out;
	for (size_t i = 0; i < n; i++) {
		int32_t c = cp[i], l[2];
		size_t k = lower_cp(c, l);
		cnt[0] += is_cjk(c);
		cnt[1] += is_ascii_ok(c);
		cnt[2] += is_punct(c);
		cnt[3] += c >= 0x600 && c <= 0x6ff;
		cnt[4] += c >= 0x3040 && c <= 0x30ff;
		cnt[5] += c >= 0x400 && c <= 0x4ff;
		cnt[6] += c >= 0xac00 && c <= 0xd7af;
		cnt[7] += c == 0xfffd;
		ok += is_cjk(c) || is_ascii_ok(c) || is_punct(c);
		for (size_t j = 0; j < k; j++) {
			low[nl++] = l[j];
			if (!py_space(l[j]))
				compact[nc++] = l[j];
		}
	}
	total = n ? n : 1;
	weird = cnt[3] + cnt[4] + cnt[5] + cnt[6] + cnt[7];
	weird_ratio = (double)weird / (double)total;
	readable = n ? (double)ok / (double)n : 0.0;
	while (a < n && py_space(cp[a]))
		a++;
	for (b = n; b > a && py_space(cp[b - 1]); b--)
		;
	stripped = b - a;
	min_len = stripped >= 8;
	script = weird <= 2 && weird_ratio <= 0.03;
	readable_ok = readable >= 0.65;
	rep_ng = repeated_ngram(compact, nc);
	rep_ch = repeated_char(compact, nc);
	low_s = encode(low, nl);
	compact_s = encode(compact, nc);
	if (!low_s || !compact_s)
		goto out;

	q = cJSON_CreateObject();
	reasons = cJSON_CreateArray();
	frags = cJSON_CreateArray();
	for (size_t i = 0; i < sizeof(gibberish) / sizeof(*gibberish); i++)
		if (strstr(compact_s, gibberish[i]))
			cJSON_AddItemToArray(frags, cJSON_CreateString(gibberish[i]));
	se = cJSON_CreateObject();
	hits = cJSON_CreateArray();
	if (p && p->n_anchors) {
		cJSON *an = cJSON_CreateArray();
		for (size_t i = 0; i < p->n_anchors; i++) {
			size_t m = 0, ml = 0;
			int32_t *acp = decode(p->anchors[i], strlen(p->anchors[i]), &m), *al;
			char *as;
			cJSON_AddItemToArray(an, cJSON_CreateString(p->anchors[i]));
			if (!acp)
				continue;
			al = malloc((2 * m + 1) * sizeof(*al));
			for (size_t j = 0; al && j < m; j++) {
				int32_t l[2];
				size_t k = lower_cp(acp[j], l);
				for (size_t t = 0; t < k; t++)
					al[ml++] = l[t];
			}
			as = al ? encode(al, ml) : NULL;
			if (as && strstr(low_s, as))
				cJSON_AddItemToArray(hits, cJSON_CreateString(p->anchors[i]));
			free(as);
			free(al);
			free(acp);
		}
		sem = cJSON_GetArraySize(hits) > 0;
		cJSON_AddStringToObject(se, "task", p->task ? p->task : (p->id ? p->id : ""));
		cJSON_AddItemToObject(se, "anchors", an);
	} else {
		cJSON_AddStringToObject(se, "task", p && p->task ? p->task : (p && p->id ? p->id : ""));
		cJSON_AddItemToObject(se, "anchors", cJSON_CreateArray());
	}
	cJSON_AddItemToObject(se, "hits", hits);
	cJSON_AddBoolToObject(se, "pass", sem);

	*pass = min_len && script && readable_ok && !rep_ng && !rep_ch && !cJSON_GetArraySize(frags) && sem;
	if (!min_len)
		cJSON_AddItemToArray(reasons, cJSON_CreateString("too_short"));
	if (!script) {
		snprintf(buf, sizeof(buf), "unexpected_script_mix:%d/%zu", weird, total);
		cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
	}
	if (!readable_ok) {
		snprintf(buf, sizeof(buf), "low_readable_ratio:%.2f", readable);
		cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
	}
	if (rep_ng || rep_ch || cJSON_GetArraySize(frags))
		cJSON_AddItemToArray(reasons, cJSON_CreateString("repetition_or_known_gibberish"));
	if (!sem) {
		snprintf(buf, sizeof(buf), "missing_semantic_anchor:%s", cJSON_GetStringValue(cJSON_GetObjectItem(se, "task")));
		cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
	}
	cJSON_AddBoolToObject(q, "pass", *pass);
	cJSON_AddItemToObject(q, "reasons", reasons);
	cJSON_AddNumberToObject(q, "readable_ratio", lynn_score_round(readable, 3));
	sc = cJSON_AddObjectToObject(q, "script_counts");
	{
		static const char *names[8] = { "cjk", "latin_digit_space", "punct", "arabic", "kana",
						"cyrillic", "hangul", "replacement" };
		for (int i = 0; i < 8; i++)
			cJSON_AddNumberToObject(sc, names[i], cnt[i]);
	}
	cJSON_AddNumberToObject(q, "weird_script_ratio", lynn_score_round(weird_ratio, 3));
	rep = cJSON_AddObjectToObject(q, "repetition");
	cJSON_AddBoolToObject(rep, "repeated_ngram", rep_ng);
	cJSON_AddBoolToObject(rep, "repeated_char", rep_ch);
	cJSON_AddBoolToObject(rep, "pass", !rep_ng && !rep_ch && !cJSON_GetArraySize(frags));
	cJSON_AddItemToObject(rep, "known_fragments", frags);
	cJSON_AddItemToObject(q, "semantic", se);
out:
	free(cp);
	free(low);
	free(compact);
	free(low_s);
	free(compact_s);
	return q;
}

/* ===== --prompts files ===== */

static void prompt_release(struct lynn_qv_prompt *p)
{
	free(p->id);
	free(p->prompt);
	free(p->task);
	for (size_t k = 0; k < p->n_anchors; k++)
		free(p->anchors[k]);
	free(p->anchors);
	memset(p, 0, sizeof(*p));
}

void lynn_qv_prompts_free(struct lynn_qv_prompt *p, size_t n)
{
	if (!p)
		return;
	for (size_t i = 0; i < n; i++)
		prompt_release(&p[i]);
	free(p);
}

int lynn_qv_prompts_load(const char *path, struct lynn_qv_prompt **out, size_t *n_out,
			 struct lynn_err *err)
{
	char *data = NULL, *p, *nl;
	size_t len = 0, line = 0, n = 0, cap = 0;
	struct lynn_qv_prompt *v = NULL;
	int rc;

	*out = NULL;
	*n_out = 0;
	if (!lynn_file_exists(path))
		return lynn_errf(err, -LYNN_ENOTFOUND, "quant-verify: prompt file '%s' not found", path);
	if ((rc = lynn_file_read(path, 64u << 20, &data, &len, err)))
		return rc;
	for (p = data; p < data + len; p = nl + 1) {
		char what[300];
		cJSON *o, *x;
		const char *t;
		struct lynn_qv_prompt q = { 0 };
		nl = memchr(p, '\n', (size_t)(data + len - p));
		if (!nl)
			nl = data + len;
		line++;
		if (p + strspn(p, " \t\r\f\v") >= nl)
			continue;
		snprintf(what, sizeof(what), "quant-verify: '%s' line %zu", path, line);
		o = lynn_json_parse(what, p, (size_t)(nl - p), err);
		if (!o) {
			rc = -LYNN_EFORMAT;
			if (err)
				err->code = rc;
			goto out;
		}
		t = cJSON_GetStringValue(cJSON_GetObjectItem(o, "prompt"));
		if (!t || !*t)
			t = cJSON_GetStringValue(cJSON_GetObjectItem(o, "user"));
		if (!t || !*t)
			t = cJSON_GetStringValue(cJSON_GetObjectItem(o, "problem"));
		if (!cJSON_IsObject(o) || !t || !*t) {
			cJSON_Delete(o);
			rc = lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: no 'prompt' text", path, line);
			goto out;
		}
		q.prompt = strdup(t);
		x = cJSON_GetObjectItem(o, "id");
		if (cJSON_IsString(x))
			q.id = strdup(x->valuestring);
		else {
			char idb[32];
			snprintf(idb, sizeof(idb), "p_%zu", n + 1);
			q.id = strdup(idb);
		}
		x = cJSON_GetObjectItem(o, "task");
		q.task = strdup(cJSON_IsString(x) ? x->valuestring : q.id ? q.id : "");
		x = cJSON_GetObjectItem(o, "anchors");
		if (x && !cJSON_IsNull(x)) {
			const cJSON *h;
			if (!cJSON_IsArray(x)) {
				cJSON_Delete(o);
				prompt_release(&q);
				rc = lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: field 'anchors' is not a list", path, line);
				goto out;
			}
			q.anchors = calloc((size_t)cJSON_GetArraySize(x) + 1, sizeof(char *));
			cJSON_ArrayForEach(h, x) {
				if (!cJSON_IsString(h)) {
					cJSON_Delete(o);
					prompt_release(&q);
					rc = lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: field 'anchors' holds a non-string", path, line);
					goto out;
				}
				q.anchors[q.n_anchors++] = strdup(h->valuestring);
			}
		}
		cJSON_Delete(o);
		if (n == cap) {
			struct lynn_qv_prompt *nv = realloc(v, (cap ? cap * 2 : 16) * sizeof(*nv));
			if (!nv) {
				prompt_release(&q);
				rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
				goto out;
			}
			v = nv;
			cap = cap ? cap * 2 : 16;
		}
		v[n++] = q;
	}
	if (!n)
		rc = lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s': no prompts", path);
out:
	free(data);
	if (rc) {
		lynn_qv_prompts_free(v, n);
		return rc;
	}
	*out = v;
	*n_out = n;
	return 0;
}
