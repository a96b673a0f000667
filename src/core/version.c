/* version.c - build feature flags (include/lynn/version.h). */
#include "lynn/version.h"

#if __has_include("githash.h")
#include "githash.h" /* written by the Makefile: #define LYNN_GIT_HASH "…" */
#endif
#ifndef LYNN_GIT_HASH
#define LYNN_GIT_HASH "unknown"
#endif

const char *lynn_git_hash(void) { return LYNN_GIT_HASH; }

const char *lynn_build_cuda(void)
{
#ifdef LYNN_CUDA
	return "on (sm_90; sm_100a/sm_120a FP4 path compiled)";
#else
	return "off";
#endif
}

const char *lynn_build_simd(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "avx2+fma";
#endif
	return "portable";
}
