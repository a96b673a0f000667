/*
 * porter.c - the Porter stemmer as NLTK's PorterStemmer (mode
 * NLTK_EXTENSIONS, the default that rouge-score uses) computes it: Porter's
 * 1980 steps 1a-5b with NLTK's departures - the irregular-forms pool,
 * "ies"/"ied" on 4-letter words, the 2-letter *o condition, y→i only after a
 * consonant that is not the first letter, bli→ble, the "alli" recursion,
 * fulli→ful and logi→log. Words are lowercase ASCII ([a-z0-9]).
 *
 * Rule lists behave as NLTK's _apply_rule_list: the first rule whose suffix
 * matches decides, and a failed condition leaves the word unchanged.
 */
#include <stdbool.h>
#include <string.h>

#include "lynn/score.h"

#define PW 256

struct word {
	char s[PW + 8];
	int n;
};

static bool cons(const char *w, int i)
{
	char c = w[i];
	if (c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u')
		return false;
	if (c == 'y')
		return i == 0 ? true : !cons(w, i - 1);
	return true;
}

/* m of w[0..n): the number of "vc" in the c/v sequence */
static int measure(const char *w, int n)
{
	int m = 0;
	for (int i = 0; i + 1 < n; i++)
		if (!cons(w, i) && cons(w, i + 1))
			m++;
	return m;
}

static bool has_vowel(const char *w, int n)
{
	for (int i = 0; i < n; i++)
		if (!cons(w, i))
			return true;
	return false;
}

static bool ends_double(const char *w, int n)
{
	return n >= 2 && w[n - 1] == w[n - 2] && cons(w, n - 1);
}

static bool ends_cvc(const char *w, int n)
{
	if (n >= 3 && cons(w, n - 3) && !cons(w, n - 2) && cons(w, n - 1) && w[n - 1] != 'w' &&
	    w[n - 1] != 'x' && w[n - 1] != 'y')
		return true;
	return n == 2 && !cons(w, 0) && cons(w, 1);
}

static bool ends(const struct word *w, const char *suf)
{
	int k = (int)strlen(suf);
	return w->n >= k && !memcmp(w->s + w->n - k, suf, (size_t)k);
}

static void set_end(struct word *w, int stem_len, const char *rep)
{
	int k = (int)strlen(rep);
	memcpy(w->s + stem_len, rep, (size_t)k);
	w->n = stem_len + k;
	w->s[w->n] = 0;
}

enum cond { C_NONE, C_M0, C_M1, C_ION, C_LOGI };

struct rule {
	const char *suf, *rep;
	enum cond c;
};

/* Apply the first matching rule of a list; returns true if one matched. */
static bool apply(struct word *w, const struct rule *r, size_t nr)
{
	for (size_t k = 0; k < nr; k++) {
		int sl, stem;
		bool ok;
		if (!ends(w, r[k].suf))
			continue;
		sl = (int)strlen(r[k].suf);
		stem = w->n - sl;
		switch (r[k].c) {
		case C_NONE: ok = true; break;
		case C_M0: ok = measure(w->s, stem) > 0; break;
		case C_M1: ok = measure(w->s, stem) > 1; break;
		case C_ION:
			ok = measure(w->s, stem) > 1 && stem > 0 &&
			     (w->s[stem - 1] == 's' || w->s[stem - 1] == 't');
			break;
		case C_LOGI: ok = measure(w->s, w->n - 3) > 0; break;
		default: ok = false;
		}
		if (ok)
			set_end(w, stem, r[k].rep);
		return true;
	}
	return false;
}

static void step1a(struct word *w)
{
	static const struct rule r[] = {
		{ "sses", "ss", C_NONE }, { "ies", "i", C_NONE }, { "ss", "ss", C_NONE },
		{ "s", "", C_NONE },
	};
	if (ends(w, "ies") && w->n == 4) {
		set_end(w, 1, "ie");
		return;
	}
	apply(w, r, sizeof r / sizeof *r);
}

static void step1b(struct word *w)
{
	int stem;
	if (ends(w, "ied")) {
		set_end(w, w->n - 3, w->n == 4 ? "ie" : "i");
		return;
	}
	if (ends(w, "eed")) {
		if (measure(w->s, w->n - 3) > 0)
			set_end(w, w->n - 3, "ee");
		return;
	}
	if (ends(w, "ed") && has_vowel(w->s, w->n - 2))
		stem = w->n - 2;
	else if (ends(w, "ing") && has_vowel(w->s, w->n - 3))
		stem = w->n - 3;
	else
		return;
	w->n = stem; /* the intermediate stem */
	w->s[stem] = 0;
	if (ends(w, "at")) {
		set_end(w, w->n - 2, "ate");
	} else if (ends(w, "bl")) {
		set_end(w, w->n - 2, "ble");
	} else if (ends(w, "iz")) {
		set_end(w, w->n - 2, "ize");
	} else if (ends_double(w->s, w->n)) {
		char last = w->s[w->n - 1];
		if (last != 'l' && last != 's' && last != 'z') {
			w->n--;
			w->s[w->n] = 0;
		}
	} else if (measure(w->s, w->n) == 1 && ends_cvc(w->s, w->n)) {
		set_end(w, w->n, "e");
	}
}

static void step1c(struct word *w)
{
	if (ends(w, "y")) {
		int stem = w->n - 1;
		if (stem > 1 && cons(w->s, stem - 1))
			set_end(w, stem, "i");
	}
}

static void step2(struct word *w)
{
	static const struct rule r[] = {
		{ "ational", "ate", C_M0 }, { "tional", "tion", C_M0 }, { "enci", "ence", C_M0 },
		{ "anci", "ance", C_M0 },   { "izer", "ize", C_M0 },    { "bli", "ble", C_M0 },
		{ "alli", "al", C_M0 },     { "entli", "ent", C_M0 },   { "eli", "e", C_M0 },
		{ "ousli", "ous", C_M0 },   { "ization", "ize", C_M0 }, { "ation", "ate", C_M0 },
		{ "ator", "ate", C_M0 },    { "alism", "al", C_M0 },    { "iveness", "ive", C_M0 },
		{ "fulness", "ful", C_M0 }, { "ousness", "ous", C_M0 }, { "aliti", "al", C_M0 },
		{ "iviti", "ive", C_M0 },   { "biliti", "ble", C_M0 },  { "fulli", "ful", C_M0 },
		{ "logi", "log", C_LOGI },
	};
	while (ends(w, "alli") && measure(w->s, w->n - 4) > 0)
		set_end(w, w->n - 4, "al");
	apply(w, r, sizeof r / sizeof *r);
}

static void step3(struct word *w)
{
	static const struct rule r[] = {
		{ "icate", "ic", C_M0 }, { "ative", "", C_M0 }, { "alize", "al", C_M0 },
		{ "iciti", "ic", C_M0 }, { "ical", "ic", C_M0 }, { "ful", "", C_M0 },
		{ "ness", "", C_M0 },
	};
	apply(w, r, sizeof r / sizeof *r);
}

static void step4(struct word *w)
{
	static const struct rule r[] = {
		{ "al", "", C_M1 },   { "ance", "", C_M1 }, { "ence", "", C_M1 }, { "er", "", C_M1 },
		{ "ic", "", C_M1 },   { "able", "", C_M1 }, { "ible", "", C_M1 }, { "ant", "", C_M1 },
		{ "ement", "", C_M1 }, { "ment", "", C_M1 }, { "ent", "", C_M1 }, { "ion", "", C_ION },
		{ "ou", "", C_M1 },   { "ism", "", C_M1 },  { "ate", "", C_M1 },  { "iti", "", C_M1 },
		{ "ous", "", C_M1 },  { "ive", "", C_M1 },  { "ize", "", C_M1 },
	};
	apply(w, r, sizeof r / sizeof *r);
}

static void step5(struct word *w)
{
	if (ends(w, "e")) {
		int stem = w->n - 1, m = measure(w->s, stem);
		if (m > 1 || (m == 1 && !ends_cvc(w->s, stem))) {
			w->n = stem;
			w->s[stem] = 0;
		}
	}
	if (ends(w, "ll") && measure(w->s, w->n - 1) > 1) {
		w->n--;
		w->s[w->n] = 0;
	}
}

int lynn_porter_stem(const char *word, size_t len, char *out, size_t n_max)
{
	static const char *const pool[][2] = {
		{ "sky", "sky" },         { "skies", "sky" },      { "dying", "die" },
		{ "lying", "lie" },       { "tying", "tie" },      { "news", "news" },
		{ "innings", "inning" },  { "inning", "inning" },  { "outings", "outing" },
		{ "outing", "outing" },   { "cannings", "canning" }, { "canning", "canning" },
		{ "howe", "howe" },       { "proceed", "proceed" }, { "exceed", "exceed" },
		{ "succeed", "succeed" },
	};
	struct word w;

	if (len > PW || len + 1 > n_max) {
		if (len + 1 > n_max)
			return -LYNN_EINVAL;
		memcpy(out, word, len); /* too long to matter: left as is */
		out[len] = 0;
		return (int)len;
	}
	memcpy(w.s, word, len);
	w.n = (int)len;
	w.s[len] = 0;
	for (size_t k = 0; k < sizeof pool / sizeof *pool; k++)
		if (!strcmp(w.s, pool[k][0])) {
			size_t l = strlen(pool[k][1]);
			memcpy(out, pool[k][1], l + 1);
			return (int)l;
		}
	if (len > 2) {
		step1a(&w);
		step1b(&w);
		step1c(&w);
		step2(&w);
		step3(&w);
		step4(&w);
		step5(&w);
	}
	memcpy(out, w.s, (size_t)w.n + 1);
	return w.n;
}
