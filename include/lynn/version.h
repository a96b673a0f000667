/*
 * version.h - version string and the build's feature flags.
 */
#ifndef LYNN_VERSION_H
#define LYNN_VERSION_H

#define LYNN_VERSION "0.1.0"

/* Short git hash of the build ("unknown" outside a checkout). */
const char *lynn_git_hash(void);

/* "on (sm_90)" when built with CUDA kernels, else "off". */
const char *lynn_build_cuda(void);
/* The CPU kernel level chosen at run time: "avx2+fma" or "portable". */
const char *lynn_build_simd(void);

#endif
