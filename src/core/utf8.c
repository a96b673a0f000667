/* utf8.c - UTF-8 decoding, encoding, validation and the Unicode character
 * classes shared by the modules (include/lynn/utf8.h). */
#include "lynn/utf8.h"

#include <utf8proc.h>

/* ===== decoding ===== */

uint32_t lynn_utf8_next(const unsigned char *s, size_t len, size_t *i)
{
	size_t p = *i;
	unsigned c = s[p];
	uint32_t cp;
	int need;
	unsigned lo = 0x80, hi = 0xBF;

	if (c < 0x80) {
		*i = p + 1;
		return c;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		cp = c & 0x0F;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		cp = c & 0x07;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*i = p + 1;
		return 0xFFFD;
	}
	p++;
	for (int k = 0; k < need; k++, p++) {
		unsigned d;
		if (p >= len) {
			*i = p;
			return 0xFFFD;
		}
		d = s[p];
		if (d < lo || d > hi) {
			*i = p; /* resume at the offending byte */
			return 0xFFFD;
		}
		lo = 0x80;
		hi = 0xBF;
		cp = (cp << 6) | (d & 0x3F);
	}
	*i = p;
	return cp;
}

size_t lynn_utf8_decode(const char *s, size_t len, uint32_t *cps)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, n = 0;
	while (i < len) {
		if (u[i] < 0x80)
			cps[n++] = u[i++];
		else
			cps[n++] = lynn_utf8_next(u, len, &i);
	}
	return n;
}

int lynn_utf8_put(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* ===== character classes ===== */

bool lynn_uc_isspace_nonascii(uint32_t c)
{
	switch (c) {
	case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F:
	case 0x205F: case 0x3000:
		return true;
	default:
		return c >= 0x2000 && c <= 0x200A;
	}
}

bool lynn_uc_isdecimal(uint32_t c)
{
	if (c < 0x80)
		return c >= '0' && c <= '9';
	if (c > 0x10FFFF)
		return false;
	return utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_ND;
}

bool lynn_uc_is_letter(uint32_t c)
{
	utf8proc_category_t k;
	if (c < 0x80)
		return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
	if (c > 0x10FFFF)
		return false;
	k = utf8proc_category((utf8proc_int32_t)c);
	return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

/* Script=Latin ranges, Unicode 14.0 Scripts.txt (inclusive). */
static const uint32_t latin_ranges[][2] = {
	{ 0x0041, 0x005A }, { 0x0061, 0x007A }, { 0x00AA, 0x00AA }, { 0x00BA, 0x00BA },
	{ 0x00C0, 0x00D6 }, { 0x00D8, 0x00F6 }, { 0x00F8, 0x02B8 }, { 0x02E0, 0x02E4 },
	{ 0x1D00, 0x1D25 }, { 0x1D2C, 0x1D5C }, { 0x1D62, 0x1D65 }, { 0x1D6B, 0x1D77 },
	{ 0x1D79, 0x1DBE }, { 0x1E00, 0x1EFF }, { 0x2071, 0x2071 }, { 0x207F, 0x207F },
	{ 0x2090, 0x209C }, { 0x212A, 0x212B }, { 0x2132, 0x2132 }, { 0x214E, 0x214E },
	{ 0x2160, 0x2188 }, { 0x2C60, 0x2C7F }, { 0xA722, 0xA787 }, { 0xA78B, 0xA7CA },
	{ 0xA7D0, 0xA7D1 }, { 0xA7D3, 0xA7D3 }, { 0xA7D5, 0xA7D9 }, { 0xA7F2, 0xA7FF },
	{ 0xAB30, 0xAB5A }, { 0xAB5C, 0xAB64 }, { 0xAB66, 0xAB69 }, { 0xFB00, 0xFB06 },
	{ 0xFF21, 0xFF3A }, { 0xFF41, 0xFF5A }, { 0x10780, 0x10785 }, { 0x10787, 0x107B0 },
	{ 0x107B2, 0x107BA }, { 0x1DF00, 0x1DF1E },
};

bool lynn_uc_is_latin(uint32_t c)
{
	size_t lo = 0, hi = sizeof latin_ranges / sizeof latin_ranges[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < latin_ranges[mid][0])
			hi = mid;
		else if (c > latin_ranges[mid][1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* ===== validation ===== */

size_t lynn_utf8_check(const uint8_t *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		uint8_t c = s[i];
		size_t n;
		uint32_t cp, min;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 1; cp = c & 0x1f; min = 0x80;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2; cp = c & 0x0f; min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3; cp = c & 0x07; min = 0x10000;
		} else {
			return i;
		}
		if (len - i <= n)
			return i;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return i;
		i += n + 1;
	}
	return len;
}
