/*
 * dtype.c - safetensors dtype names and sizes, and conversions with correct
 * rounding (include/lynn/st.h).
 *
 * bf16: the top half of an IEEE binary32. f16: IEEE binary16. F8_E4M3 is the
 * "fn" variant of the OCP 8-bit FP spec (bias 7, no infinities, S.1111.111 is
 * NaN, max 448), as torch.float8_e4m3fn; F8_E5M2 is the top byte of an f16.
 * Every narrowing conversion rounds to nearest, ties to even, and keeps NaN
 * as a quiet NaN of the same sign. Data is read as little-endian (the only
 * host order lynn supports) with memcpy, so unaligned sources are fine.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lynn/st.h"

/* ===== names and sizes ===== */

static const struct {
	const char *name;
	size_t size;
} dtypes[LYNN_DTYPE_COUNT] = {
	[LYNN_DTYPE_BOOL] = { "BOOL", 1 },     [LYNN_DTYPE_U8] = { "U8", 1 },
	[LYNN_DTYPE_I8] = { "I8", 1 },         [LYNN_DTYPE_F8_E4M3] = { "F8_E4M3", 1 },
	[LYNN_DTYPE_F8_E5M2] = { "F8_E5M2", 1 }, [LYNN_DTYPE_I16] = { "I16", 2 },
	[LYNN_DTYPE_U16] = { "U16", 2 },       [LYNN_DTYPE_F16] = { "F16", 2 },
	[LYNN_DTYPE_BF16] = { "BF16", 2 },     [LYNN_DTYPE_I32] = { "I32", 4 },
	[LYNN_DTYPE_U32] = { "U32", 4 },       [LYNN_DTYPE_F32] = { "F32", 4 },
	[LYNN_DTYPE_I64] = { "I64", 8 },       [LYNN_DTYPE_U64] = { "U64", 8 },
	[LYNN_DTYPE_F64] = { "F64", 8 },
};

const char *lynn_dtype_name(enum lynn_dtype dt)
{
	if ((int)dt < 0 || dt >= LYNN_DTYPE_COUNT)
		return NULL;
	return dtypes[dt].name;
}

bool lynn_dtype_parse(const char *name, enum lynn_dtype *out)
{
	for (int i = 0; i < LYNN_DTYPE_COUNT; i++)
		if (!strcmp(name, dtypes[i].name)) {
			*out = (enum lynn_dtype)i;
			return true;
		}
	return false;
}

size_t lynn_dtype_size(enum lynn_dtype dt)
{
	if ((int)dt < 0 || dt >= LYNN_DTYPE_COUNT)
		return 0;
	return dtypes[dt].size;
}

/* ===== scalar conversions ===== */

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float lynn_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t lynn_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and payload top, force quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* RNE: add 0x7fff plus the lowest kept bit; overflow carries into inf */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float lynn_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f) /* inf / NaN (payload kept) */
		return bits_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		/* zero or subnormal: man * 2^-24, exact in f32 */
		float v = (float)man * 0x1p-24f;
		return sign ? -v : v;
	}
	return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t lynn_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t x = u & 0x7fffffffu;

	if (x >= 0x7f800000u) {
		if (x > 0x7f800000u) /* NaN: quiet, top payload bits kept */
			return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
		return (uint16_t)(sign | 0x7c00u);
	}
	/* 65520 = halfway between 65504 (max) and 2^16: ties-to-even goes up */
	if (x >= 0x477ff000u)
		return (uint16_t)(sign | 0x7c00u);
	if (x < 0x38800000u) {
		/* below 2^-14: an f16 subnormal, q = round(value * 2^24) */
		uint32_t e = x >> 23;
		uint32_t man = (x & 0x7fffffu) | 0x800000u;
		uint32_t shift, q, r, half;
		if (e < 102) /* value < 2^-25: rounds to zero */
			return sign;
		shift = 126 - e; /* 14..24 */
		q = man >> shift;
		r = man & ((1u << shift) - 1);
		half = 1u << (shift - 1);
		if (r > half || (r == half && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
	{
		uint32_t r = x - (112u << 23); /* rebias 127 -> 15 */
		uint32_t q = r >> 13, rem = r & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
}

float lynn_e4m3_to_f32(uint8_t b)
{
	int sign = b & 0x80;
	int exp = (b >> 3) & 0xf;
	int man = b & 7;
	float v;

	if (exp == 0xf && man == 7)
		return sign ? -NAN : NAN;
	if (exp == 0)
		v = (float)man * 0x1p-9f; /* subnormal: man/8 * 2^(1-7) */
	else
		v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
	return sign ? -v : v;
}

/* ===== bulk conversion ===== */

int lynn_convert_to_f32(enum lynn_dtype dt, const void *src, float *dst, size_t n,
			struct lynn_err *err)
{
	const uint8_t *s = src;

#define LOAD_LOOP(T, EXPR)                                  \
	for (size_t i = 0; i < n; i++) {                    \
		T v;                                        \
		memcpy(&v, s + i * sizeof(T), sizeof(T));   \
		dst[i] = (EXPR);                            \
	}
	switch (dt) {
	case LYNN_DTYPE_F32:
		memcpy(dst, src, n * 4);
		break;
	case LYNN_DTYPE_BF16:
		LOAD_LOOP(uint16_t, lynn_bf16_to_f32(v));
		break;
	case LYNN_DTYPE_F16:
		LOAD_LOOP(uint16_t, lynn_f16_to_f32(v));
		break;
	case LYNN_DTYPE_F64:
		LOAD_LOOP(double, (float)v);
		break;
	case LYNN_DTYPE_F8_E4M3:
		LOAD_LOOP(uint8_t, lynn_e4m3_to_f32(v));
		break;
	case LYNN_DTYPE_F8_E5M2:
		LOAD_LOOP(uint8_t, lynn_f16_to_f32((uint16_t)(v << 8)));
		break;
	case LYNN_DTYPE_BOOL:
		LOAD_LOOP(uint8_t, v ? 1.0f : 0.0f);
		break;
	case LYNN_DTYPE_U8:
		LOAD_LOOP(uint8_t, (float)v);
		break;
	case LYNN_DTYPE_I8:
		LOAD_LOOP(int8_t, (float)v);
		break;
	case LYNN_DTYPE_I16:
		LOAD_LOOP(int16_t, (float)v);
		break;
	case LYNN_DTYPE_U16:
		LOAD_LOOP(uint16_t, (float)v);
		break;
	case LYNN_DTYPE_I32:
		LOAD_LOOP(int32_t, (float)v);
		break;
	case LYNN_DTYPE_U32:
		LOAD_LOOP(uint32_t, (float)v);
		break;
	case LYNN_DTYPE_I64:
		LOAD_LOOP(int64_t, (float)v);
		break;
	case LYNN_DTYPE_U64:
		LOAD_LOOP(uint64_t, (float)v);
		break;
	default:
		return lynn_errf(err, -LYNN_EINVAL, "dtype: cannot convert dtype %d to F32", (int)dt);
	}
#undef LOAD_LOOP
	return 0;
}
