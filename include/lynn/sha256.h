/*
 * sha256.h - streamed SHA-256 over OpenSSL EVP.
 */
#ifndef LYNN_SHA256_H
#define LYNN_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "lynn/err.h"
#include "lynn/progress.h"

struct lynn_sha256 {
	void *ctx; /* EVP_MD_CTX */
};

int lynn_sha256_init(struct lynn_sha256 *h, struct lynn_err *err);
int lynn_sha256_update(struct lynn_sha256 *h, const void *data, size_t len,
		       struct lynn_err *err);
/* Write the 32-byte digest and release the context. */
int lynn_sha256_final(struct lynn_sha256 *h, uint8_t out[32], struct lynn_err *err);
/* Release without a digest (accepts an uninitialised-to-zero struct). */
void lynn_sha256_release(struct lynn_sha256 *h);

/* Hash a whole file in 1 MiB reads. `progress` (may be NULL) is called with
 * the bytes done so far and the file size. */
int lynn_sha256_file(const char *path, uint8_t out[32], lynn_progress_fn progress,
		     void *ud, struct lynn_err *err);

/* Lowercase hex of a 32-byte digest into `hex` (65 bytes with the NUL). */
void lynn_sha256_hex(const uint8_t digest[32], char hex[65]);

#endif
