/*
 * summary.c - the Markdown summary of a lynn-4gate-v1 report (written beside
 * the JSON), and the daily-mix comparison (--suite): grading and table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/eval.h"
#include "lynn/score.h"

static const cJSON *get(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static double num(const cJSON *o, const char *k)
{
	const cJSON *x = get(o, k);
	return cJSON_IsNumber(x) ? x->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *k)
{
	const cJSON *x = get(o, k);
	return cJSON_IsString(x) ? x->valuestring : "";
}

static const char *yn(const cJSON *o, const char *k)
{
	return cJSON_IsTrue(get(o, k)) ? "yes" : "no";
}

/* Table cells: no newlines or pipes. */
static void cell(struct lynn_buf *b, const char *s, size_t max)
{
	size_t n = 0;
	for (; *s && n < max; s++, n++) {
		if (*s == '|')
			lynn_buf_puts(b, "\\|");
		else if (*s == '\n' || *s == '\r')
			lynn_buf_putc(b, ' ');
		else
			lynn_buf_putc(b, *s);
	}
	/* finish a cut UTF-8 sequence */
	while (*s && ((unsigned char)*s & 0xc0) == 0x80)
		lynn_buf_putc(b, *s++);
	if (*s)
		lynn_buf_puts(b, "…");
}

char *lynn_eval_markdown(const cJSON *r)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	const cJSON *gates = get(r, "gates"), *g1 = get(gates, "g1_v4_style"),
		    *g2 = get(gates, "g2_regression"), *g3 = get(gates, "g3_base_parity"),
		    *th = get(r, "thresholds"), *x, *y;
	size_t i = 0;

	lynn_buf_printf(&b, "# lynn eval: %s — %s\n\n", str(r, "model_tag"), str(r, "verdict"));
	lynn_buf_printf(&b, "- created: %s, runner: %s, runtime: %.1f s\n", str(r, "created_at"),
			str(r, "runner"), num(r, "runtime_s"));
	lynn_buf_printf(&b, "- base: `%s`\n- adapter: `%s`\n", str(r, "base"),
			cJSON_IsString(get(r, "adapter")) ? str(r, "adapter") : "(none)");
	lynn_buf_printf(&b, "- sanity: %s (%s)\n- net_score: %.2f\n\n",
			cJSON_IsTrue(get(get(r, "sanity"), "pass")) ? "pass" : "FAIL",
			str(get(r, "sanity"), "source"), num(r, "net_score"));
	if (cJSON_GetArraySize(get(r, "hard_fail_reasons"))) {
		lynn_buf_puts(&b, "## Hard-fail reasons\n\n");
		cJSON_ArrayForEach(x, get(r, "hard_fail_reasons")) lynn_buf_printf(&b, "- %s\n", x->valuestring);
		lynn_buf_puts(&b, "\n");
	}
	lynn_buf_puts(&b, "## Gates\n\n| gate | value | threshold | result |\n|---|---|---|---|\n");
	lynn_buf_printf(&b, "| g1 avg_style | %.3f | ≥ %.1f | %s |\n", num(g1, "avg_style"),
			num(th, "min_avg_style"), str(g1, "verdict"));
	lynn_buf_printf(&b, "| g1 cliche_free_pct | %.2f | ≥ %.0f | %s |\n", num(g1, "cliche_free_pct"),
			num(th, "min_cliche_free_pct"), str(g1, "verdict"));
	lynn_buf_printf(&b, "| g2 v8 delta (pp) | %+.2f (%.2f%% vs %.2f%%) | ≥ %.0f | %s |\n",
			num(g2, "v8_delta_pp"), num(g2, "v8_adapter_pass_pct"), num(g2, "v8_base_pass_pct"),
			num(th, "max_regression_pp"), num(g2, "v8_delta_pp") >= num(th, "max_regression_pp") ? "PASS" : "FAIL");
	lynn_buf_printf(&b, "| g2 v9 delta (pp) | %+.2f (%.2f%% vs %.2f%%) | ≥ %.0f | %s |\n",
			num(g2, "v9_delta_pp"), num(g2, "v9_adapter_pass_pct"), num(g2, "v9_base_pass_pct"),
			num(th, "max_regression_pp"), num(g2, "v9_delta_pp") >= num(th, "max_regression_pp") ? "PASS" : "FAIL");
	lynn_buf_printf(&b, "| g3 net_score | %+.2f (win %d, loss %d, tie %d) | ≥ %.0f | %s |\n\n",
			num(g3, "net_score"), (int)num(g3, "adapter_win"), (int)num(g3, "base_win"),
			(int)(num(g3, "tie") + num(g3, "tie_both_pass") + num(g3, "tie_both_fail")),
			num(th, "min_net_score"), str(g3, "verdict"));

	lynn_buf_puts(&b, "## Style set (g1, g3)\n\n| # | id | category | len | rules | g1 | g3 bucket | cand ref | base ref |\n"
			  "|---|---|---|---|---|---|---|---|---|\n");
	y = get(g3, "items") ? get(g3, "items")->child : NULL;
	cJSON_ArrayForEach(x, get(g1, "items")) {
		lynn_buf_printf(&b, "| %d | ", (int)num(x, "idx"));
		cell(&b, str(x, "id"), 40);
		lynn_buf_puts(&b, " | ");
		cell(&b, str(x, "category"), 30);
		lynn_buf_printf(&b, " | %d | %d/5 | %s | %s | ", (int)num(x, "output_len"),
				(int)(num(x, "rule_pass_ratio") * 5 + 0.5),
				cJSON_IsTrue(get(x, "overall_pass")) ? "pass" : "FAIL", y ? str(y, "bucket") : "");
		if (y && get(y, "adapter_ref_score"))
			lynn_buf_printf(&b, "%.4f | %.4f |\n", num(y, "adapter_ref_score"), num(y, "base_ref_score"));
		else
			lynn_buf_puts(&b, "– | – |\n");
		y = y ? y->next : NULL;
	}
	lynn_buf_puts(&b, "\n## Regression sets (g2)\n\n| set | id | candidate | baseline | via (candidate) |\n|---|---|---|---|---|\n");
	for (int s = 0; s < 2; s++) {
		const cJSON *a = get(g2, s ? "v9_items_adapter" : "v8_items_adapter");
		const cJSON *bb = get(g2, s ? "v9_items_base" : "v8_items_base");
		const cJSON *z = bb ? bb->child : NULL;
		cJSON_ArrayForEach(x, a) {
			lynn_buf_printf(&b, "| %s | ", s ? "v9" : "v8");
			cell(&b, str(x, "id"), 40);
			lynn_buf_printf(&b, " | %s | %s | %s |\n", cJSON_IsTrue(get(x, "pass")) ? "pass" : "fail",
					z && cJSON_IsTrue(get(z, "pass")) ? "pass" : "fail", str(x, "via"));
			z = z ? z->next : NULL;
			i++;
		}
	}
	(void)yn;
	return lynn_buf_detach(&b);
}

/* ===== daily-mix ===== */

cJSON *lynn_eval_daily_model(const char *label, const char *model, const struct lynn_eval_set *v8,
			     const struct lynn_eval_output *v8_out, const struct lynn_eval_set *v9,
			     const struct lynn_eval_output *v9_out, struct lynn_err *err)
{
	cJSON *m = cJSON_CreateObject(), *suites = cJSON_CreateObject(), *items = cJSON_CreateArray();
	size_t tot_n = 0, tot_p = 0;

	cJSON_AddStringToObject(m, "label", label);
	cJSON_AddStringToObject(m, "model", model);
	cJSON_AddItemToObject(m, "suites", suites);
	for (int s = 0; s < 2; s++) {
		const struct lynn_eval_set *set = s ? v9 : v8;
		const struct lynn_eval_output *out = s ? v9_out : v8_out;
		size_t pass = 0;
		cJSON *so;
		if (!set)
			continue;
		for (size_t i = 0; i < set->n; i++) {
			const struct lynn_eval_item *it = &set->items[i];
			const char *t = out[i].text, *via = "";
			bool ok = false;
			cJSON *x;
			if (!s) {
				struct lynn_tool_result r;
				if (lynn_grade_tool_call(t, strlen(t), it->tool_name, it->param_hints, &r, err))
					goto fail;
				ok = r.pass;
				via = lynn_tool_via_name(r.via);
			} else if (it->answer || (it->gold && strcmp(it->verifier, "regex"))) {
				struct lynn_daily_result r;
				if (lynn_grade_daily(t, strlen(t), it->answer ? it->answer : it->gold, &r, err))
					goto fail;
				ok = r.pass;
				via = r.via == LYNN_DAILY_EXACT ? "normalized_match" : r.via == LYNN_DAILY_TOKENS ? "token_fallback" : "none";
			} else if (it->gold) {
				if (lynn_grade_gold(t, strlen(t), it->gold, it->verifier, &ok, err))
					goto fail;
				via = "regex";
			} else {
				via = "no_gold";
			}
			pass += ok;
			x = cJSON_CreateObject();
			cJSON_AddStringToObject(x, "suite", s ? "v9" : "v8");
			if (it->id)
				cJSON_AddStringToObject(x, "id", it->id);
			else
				cJSON_AddNullToObject(x, "id");
			cJSON_AddBoolToObject(x, "pass", ok);
			cJSON_AddStringToObject(x, "via", via);
			cJSON_AddItemToArray(items, x);
		}
		so = cJSON_AddObjectToObject(suites, s ? "v9" : "v8");
		cJSON_AddNumberToObject(so, "n", (double)set->n);
		cJSON_AddNumberToObject(so, "pass", (double)pass);
		cJSON_AddNumberToObject(so, "pass_pct",
					lynn_score_round(set->n ? (double)pass / (double)set->n * 100 : 0, 2));
		tot_n += set->n;
		tot_p += pass;
	}
	{
		cJSON *t = cJSON_AddObjectToObject(m, "total");
		cJSON_AddNumberToObject(t, "n", (double)tot_n);
		cJSON_AddNumberToObject(t, "pass", (double)tot_p);
		cJSON_AddNumberToObject(t, "pass_pct",
					lynn_score_round(tot_n ? (double)tot_p / (double)tot_n * 100 : 0, 2));
	}
	cJSON_AddItemToObject(m, "items", items);
	return m;
fail:
	cJSON_Delete(items);
	cJSON_Delete(m);
	return NULL;
}

char *lynn_eval_daily_markdown(const cJSON *report)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	const cJSON *models = get(report, "models"), *m;
	static const char *rows[] = { "v8", "v9", "total" };

	lynn_buf_puts(&b, "| suite |");
	cJSON_ArrayForEach(m, models) {
		lynn_buf_putc(&b, ' ');
		cell(&b, str(m, "label"), 40);
		lynn_buf_puts(&b, " |");
	}
	lynn_buf_puts(&b, "\n|---|");
	cJSON_ArrayForEach(m, models) lynn_buf_puts(&b, "---|");
	lynn_buf_putc(&b, '\n');
	for (size_t r = 0; r < 3; r++) {
		bool any = false;
		cJSON_ArrayForEach(m, models) any |= r == 2 || get(get(m, "suites"), rows[r]) != NULL;
		if (!any)
			continue;
		lynn_buf_printf(&b, "| %s |", rows[r]);
		cJSON_ArrayForEach(m, models) {
			const cJSON *s = r == 2 ? get(m, "total") : get(get(m, "suites"), rows[r]);
			if (s)
				lynn_buf_printf(&b, " %d/%d (%.1f%%) |", (int)num(s, "pass"), (int)num(s, "n"),
						num(s, "pass_pct"));
			else
				lynn_buf_puts(&b, " – |");
		}
		lynn_buf_putc(&b, '\n');
	}
	return lynn_buf_detach(&b);
}
