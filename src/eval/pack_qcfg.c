/*
 * pack_qcfg.c - gate 3's cross-check of the weights against the
 * quantization config a loader reads (docs/reference weight-formats.md
 * §2.2, §2.7): compressed-tensors' config_groups targets and ignore list in
 * config.json, or ModelOpt's exclude_modules (config.json, else
 * hf_quant_config.json). They decide which linears a loader builds
 * quantized: a packed tensor it builds plain, or a plain one it builds
 * quantized (its packed weight and scales then missing: the
 * silently-random-init case), fails the gate even though each tensor on
 * its own is well formed.
 *
 * Matching follows compressed-tensors (utils/match.py): an entry is a
 * module name (equal), "re:" + a regular expression (Python's re.match:
 * anchored at the start only; lynn_re), or a module class name, of which
 * "Linear" (every linear layer) is known; ModelOpt's entries are fnmatch
 * wildcards. Another class name makes the plan undecidable for the modules
 * it might cover, which are then not cross-checked.
 */
#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/pack_internal.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/util.h"

enum qc_kind {
	QC_NONE,      /* no quantization config: every linear plain */
	QC_CT,        /* compressed-tensors nvfp4-pack-quantized */
	QC_MODELOPT,  /* ModelOpt NVFP4 */
	QC_UNCHECKED, /* another method or format: not cross-checked */
};

struct qc_entry {
	const char *s;     /* the entry as written (borrowed from the JSON) */
	struct lynn_re *re; /* "re:" entries */
	bool class_name; /* a class other than Linear */
};

/* a kind of mismatch: how many, and the first few modules */
#define QC_EXAMPLES 3
struct qc_tally {
	int64_t n;
	char ex[QC_EXAMPLES][192];
};

struct pack_qcfg {
	enum qc_kind kind;
	char source[48]; /* "config.json" or "hf_quant_config.json" */
	char why[160];   /* QC_UNCHECKED: why */
	cJSON *json;     /* the file the entries come from */
	struct qc_entry *targets, *ignore;
	int n_targets, n_ignore;
	int64_t n_checked, n_undecided;
	struct qc_tally plain_but_quant, quant_but_plain, other_convention;
};

static void tally(struct qc_tally *t, const char *module)
{
	if (t->n < QC_EXAMPLES)
		snprintf(t->ex[t->n], sizeof t->ex[0], "%s", module);
	t->n++;
}

/* entries of a JSON array of strings; false (with a reason) when it is not one or a
 * regular expression does not compile */
static bool load_entries(struct pack_qcfg *q, struct pack_gate *g, const cJSON *a, const char *field,
			 struct qc_entry **out, int *n_out)
{
	const cJSON *it;
	int n = 0;
	if (!a || cJSON_IsNull(a))
		return true;
	if (!cJSON_IsArray(a)) {
		pack_reason(g, "%s: '%s' is not a list of module names", q->source, field);
		return false;
	}
	if (!(*out = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof **out))) {
		pack_reason(g, "out of memory");
		return false;
	}
	cJSON_ArrayForEach(it, a) {
		struct qc_entry *e = &(*out)[n];
		if (!cJSON_IsString(it)) {
			pack_reason(g, "%s: '%s' has an entry that is not a string", q->source, field);
			*n_out = n;
			return false;
		}
		e->s = it->valuestring;
		if (!strncmp(e->s, "re:", 3)) {
			char msg[160];
			if (!(e->re = lynn_re_compile(e->s + 3, msg, sizeof msg))) {
				pack_reason(g, "%s: '%s' entry '%.80s': not a regular expression (%s)", q->source,
					    field, e->s, msg);
				*n_out = n;
				return false;
			}
		} else {
			/* compressed-tensors also matches module class names:
			 * CamelCase, where module names are lower case */
			e->class_name = q->kind == QC_CT && isupper((unsigned char)e->s[0]) && strcmp(e->s, "Linear");
		}
		n++;
	}
	*n_out = n;
	return true;
}

static const cJSON *obj(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsObject(v) ? v : NULL;
}

static const char *str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void unchecked(struct pack_qcfg *q, const char *fmt, const char *arg)
{
	q->kind = QC_UNCHECKED;
	snprintf(q->why, sizeof q->why, fmt, arg ? arg : "");
}

/* compressed-tensors: the NVFP4 format, the groups' targets, ignore */
static void load_ct(struct pack_qcfg *q, struct pack_gate *g, const cJSON *qc)
{
	const char *fmt = str(qc, "format");
	const cJSON *groups = obj(qc, "config_groups"), *grp;
	int n = 0;
	q->kind = QC_CT;
	cJSON_ArrayForEach(grp, groups) {
		const char *gf = str(grp, "format");
		if (!fmt)
			fmt = gf;
		if (gf && fmt && strcmp(gf, fmt)) {
			unchecked(q, "config groups of more than one format", NULL);
			return;
		}
		n += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(grp, "targets"));
	}
	if (!fmt || strcmp(fmt, "nvfp4-pack-quantized")) {
		unchecked(q, "compressed-tensors format '%s' (only nvfp4-pack-quantized is cross-checked)",
			  fmt ? fmt : "(none)");
		return;
	}
	if (!(q->targets = calloc((size_t)n + 1, sizeof *q->targets))) {
		pack_reason(g, "out of memory");
		unchecked(q, "out of memory", NULL);
		return;
	}
	cJSON_ArrayForEach(grp, groups) {
		struct qc_entry *e = NULL;
		int k = 0;
		if (!load_entries(q, g, cJSON_GetObjectItemCaseSensitive(grp, "targets"), "config_groups.*.targets", &e,
				  &k)) {
			for (int i = 0; e && i < k; i++)
				lynn_re_free(e[i].re);
			free(e);
			unchecked(q, "a bad targets list", NULL);
			return;
		}
		for (int i = 0; i < k; i++)
			q->targets[q->n_targets++] = e[i];
		free(e);
	}
	if (!load_entries(q, g, cJSON_GetObjectItemCaseSensitive(qc, "ignore"), "ignore", &q->ignore, &q->n_ignore))
		unchecked(q, "a bad ignore list", NULL);
}

static void load_modelopt(struct pack_qcfg *q, struct pack_gate *g, const cJSON *qc, const char *algo)
{
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(qc, "exclude_modules");
	q->kind = QC_MODELOPT;
	if (!algo || !strstr(algo, "FP4") || strstr(algo, "MIXED")) {
		unchecked(q, "ModelOpt quant_algo '%s' (only NVFP4 algorithms are cross-checked)", algo ? algo : "(none)");
		return;
	}
	if (!ex || cJSON_IsNull(ex))
		ex = cJSON_GetObjectItemCaseSensitive(qc, "ignore");
	if (!load_entries(q, g, ex, "exclude_modules", &q->ignore, &q->n_ignore))
		unchecked(q, "a bad exclude_modules list", NULL);
}

struct pack_qcfg *pack_qcfg_from(cJSON *config, cJSON *hf, struct pack_gate *g)
{
	struct pack_qcfg *q = calloc(1, sizeof *q);
	const cJSON *qc, *v = cJSON_GetObjectItemCaseSensitive(config, "quantization_config");
	if (!q) {
		pack_reason(g, "out of memory");
		cJSON_Delete(config);
		cJSON_Delete(hf);
		return NULL;
	}
	if ((qc = obj(config, "quantization_config"))) {
		const char *m = str(qc, "quant_method");
		q->json = config;
		cJSON_Delete(hf);
		snprintf(q->source, sizeof q->source, "config.json quantization_config");
		if (m && !strcmp(m, "compressed-tensors"))
			load_ct(q, g, qc);
		else if (m && !strcmp(m, "modelopt"))
			load_modelopt(q, g, qc, str(qc, "quant_algo"));
		else
			unchecked(q, "quant_method '%s'", m ? m : "(none)");
		return q;
	}
	cJSON_Delete(config);
	q->json = hf;
	snprintf(q->source, sizeof q->source, "hf_quant_config.json");
	if (v && !cJSON_IsNull(v)) {
		pack_reason(g, "config.json: 'quantization_config' is not an object");
		unchecked(q, "a bad quantization_config", NULL);
	} else if (hf) { /* ModelOpt's own file, which vLLM reads */
		if (!(qc = obj(hf, "quantization"))) {
			pack_reason(g, "hf_quant_config.json: no 'quantization' object");
			unchecked(q, "a bad hf_quant_config.json", NULL);
		} else {
			load_modelopt(q, g, qc, str(qc, "quant_algo"));
		}
	} else {
		q->kind = QC_NONE; /* (an unreadable config.json: gate 1 and the config load say why) */
	}
	return q;
}

struct pack_qcfg *pack_qcfg_load(const char *dir, struct pack_gate *g)
{
	char *cp = lynn_path_join(dir, "config.json"), *hp = lynn_path_join(dir, "hf_quant_config.json");
	struct lynn_err err = { 0 };
	cJSON *config = cp ? lynn_json_load(cp, LYNN_JSON_MAX_SIZE, &err) : NULL, *hf = NULL;
	if (hp && lynn_file_exists(hp) && !(hf = lynn_json_load(hp, LYNN_JSON_MAX_SIZE, &err)))
		pack_reason(g, "%s", err.msg);
	free(cp);
	free(hp);
	return pack_qcfg_from(config, hf, g);
}

/* entry e covers module (a linear layer when is_linear): 1 yes, 0 no, -1
 * cannot tell (a class name) */
static int covers(const struct pack_qcfg *q, const struct qc_entry *e, const char *module, bool is_linear)
{
	if (e->re)
		return lynn_re_match(e->re, module);
	if (q->kind == QC_MODELOPT)
		return fnmatch(e->s, module, 0) == 0;
	if (!strcmp(e->s, module) || (is_linear && !strcmp(e->s, "Linear")))
		return 1;
	return e->class_name ? -1 : 0;
}

/* 1: any entry covers it, 0: none, -1: none for sure but one cannot tell */
static int any_covers(const struct pack_qcfg *q, const struct qc_entry *es, int n, const char *module, bool is_linear)
{
	int r = 0;
	for (int i = 0; i < n; i++) {
		int c = covers(q, &es[i], module, is_linear);
		if (c == 1)
			return 1;
		if (c < 0)
			r = -1;
	}
	return r;
}

void pack_qcfg_linear(struct pack_qcfg *q, const char *module, bool is_linear, enum pack_qform actual)
{
	int quant; /* what the loader builds: 1 quantized, 0 plain, -1 cannot tell */
	if (!q || q->kind == QC_UNCHECKED)
		return;
	if (q->kind == QC_NONE) {
		quant = 0;
	} else if (q->kind == QC_MODELOPT) {
		quant = is_linear && !any_covers(q, q->ignore, q->n_ignore, module, is_linear);
	} else {
		const int ign = any_covers(q, q->ignore, q->n_ignore, module, is_linear);
		const int tgt = any_covers(q, q->targets, q->n_targets, module, is_linear);
		quant = ign == 1 ? 0 : tgt == 0 ? 0 : tgt < 0 || ign < 0 ? -1 : 1;
	}
	if (quant < 0) {
		q->n_undecided++;
		return;
	}
	q->n_checked++;
	const bool nv = actual == PACK_Q_NVFP4_CT || actual == PACK_Q_NVFP4_MODELOPT;
	if (quant && !nv)
		tally(&q->plain_but_quant, module);
	else if (!quant && actual != PACK_Q_PLAIN)
		tally(&q->quant_but_plain, module);
	else if (quant && actual != (q->kind == QC_CT ? PACK_Q_NVFP4_CT : PACK_Q_NVFP4_MODELOPT))
		tally(&q->other_convention, module);
}

static void examples(const struct qc_tally *t, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = 0;
	for (int i = 0; i < t->n && i < QC_EXAMPLES && o < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s'%s'", i ? ", " : "", t->ex[i]);
	if (t->n > QC_EXAMPLES && o < cap)
		snprintf(buf + o, cap - o, ", ... (%lld in all)", (long long)t->n);
}

void pack_qcfg_finish(struct pack_qcfg *q, struct pack_gate *g, cJSON *gate)
{
	char ex[800];
	if (!q)
		return;
	cJSON *o = cJSON_AddObjectToObject(gate, "quant_config");
	cJSON_AddStringToObject(o, "source", q->kind == QC_NONE ? "none" : q->source);
	cJSON_AddStringToObject(o, "kind", q->kind == QC_NONE	     ? "none"
					   : q->kind == QC_CT	     ? "compressed-tensors nvfp4"
					   : q->kind == QC_MODELOPT ? "modelopt nvfp4"
								    : "not cross-checked");
	if (q->kind == QC_UNCHECKED)
		cJSON_AddStringToObject(o, "why", q->why);
	cJSON_AddNumberToObject(o, "n_cross_checked", (double)q->n_checked);
	cJSON_AddNumberToObject(o, "n_undecided", (double)q->n_undecided);
	if (q->plain_but_quant.n) {
		examples(&q->plain_but_quant, ex, sizeof ex);
		pack_reason(g, "%s quantizes linears stored unquantized (%s): a loader builds them NVFP4 and finds no packed weight or scales to load (left uninitialised or refused)",
			    q->source, ex);
	}
	if (q->quant_but_plain.n) {
		examples(&q->quant_but_plain, ex, sizeof ex);
		if (q->kind == QC_NONE)
			pack_reason(g, "quantized linears (%s) but config.json has no quantization_config (and there is no hf_quant_config.json): a loader builds a plain model whose weights are not these tensors",
				    ex);
		else
			pack_reason(g, "%s leaves linears unquantized (%s: ignored, excluded or not targeted) but they are stored quantized: a loader builds them plain and finds no '.weight' of a float dtype",
				    q->source, ex);
	}
	if (q->other_convention.n) {
		examples(&q->other_convention, ex, sizeof ex);
		pack_reason(g, "%s is %s but these linears use the other producer's NVFP4 names (%s)", q->source,
			    q->kind == QC_CT ? "compressed-tensors" : "ModelOpt", ex);
	}
	for (int i = 0; i < q->n_targets; i++)
		lynn_re_free(q->targets[i].re);
	for (int i = 0; i < q->n_ignore; i++)
		lynn_re_free(q->ignore[i].re);
	free(q->targets);
	free(q->ignore);
	cJSON_Delete(q->json);
	free(q);
}
