/*
 * utf8.h - UTF-8 decoding, encoding and strict validation, and the Unicode
 * character classes the modules share (Python's str.isspace / \d, letters,
 * Script=Latin). Plain functions over caller memory; nothing allocates.
 */
#ifndef LYNN_UTF8_H
#define LYNN_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode one code point at s[*i] (i < len), advancing *i. A malformed
 * sequence (its maximal valid prefix) decodes to one U+FFFD. */
uint32_t lynn_utf8_next(const unsigned char *s, size_t len, size_t *i);
/* Decode all of s into cps (capacity >= len). Returns the count. */
size_t lynn_utf8_decode(const char *s, size_t len, uint32_t *cps);
/* Encode one code point; returns bytes written (1..4) to out[4]. */
int lynn_utf8_put(uint32_t cp, char *out);
/* Offset of the first byte that breaks strict UTF-8 (overlongs, surrogates
 * and code points above U+10FFFF rejected), or len when valid. */
size_t lynn_utf8_check(const uint8_t *s, size_t len);

/* Python str.isspace() (Unicode 14): bidi WS/B/S or category Zs. */
bool lynn_uc_isspace_nonascii(uint32_t cp);
static inline bool lynn_uc_isspace(uint32_t c)
{
	if (c < 0x80)
		return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
	return lynn_uc_isspace_nonascii(c);
}
/* Python re \d (str pattern): Unicode category Nd. */
bool lynn_uc_isdecimal(uint32_t cp);
/* Unicode general category L* (letters). */
bool lynn_uc_is_letter(uint32_t cp);
/* Script=Latin (Unicode 14 Scripts.txt). */
bool lynn_uc_is_latin(uint32_t cp);

#endif
