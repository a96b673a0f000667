/* sha256.c - streamed SHA-256 over OpenSSL EVP (see include/lynn/sha256.h). */
#include "lynn/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int lynn_sha256_init(struct lynn_sha256 *h, struct lynn_err *err)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	h->ctx = NULL;
	if (!ctx)
		return lynn_errf(err, -LYNN_ENOMEM, "sha256: out of memory");
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return lynn_errf(err, -LYNN_EIO, "sha256: EVP init failed");
	}
	h->ctx = ctx;
	return 0;
}

int lynn_sha256_update(struct lynn_sha256 *h, const void *data, size_t len,
		       struct lynn_err *err)
{
	if (EVP_DigestUpdate(h->ctx, data, len) != 1)
		return lynn_errf(err, -LYNN_EIO, "sha256: EVP update failed");
	return 0;
}

int lynn_sha256_final(struct lynn_sha256 *h, uint8_t out[32], struct lynn_err *err)
{
	unsigned int n = 0;
	int ok = EVP_DigestFinal_ex(h->ctx, out, &n);
	lynn_sha256_release(h);
	if (ok != 1 || n != 32)
		return lynn_errf(err, -LYNN_EIO, "sha256: EVP final failed");
	return 0;
}

void lynn_sha256_release(struct lynn_sha256 *h)
{
	if (h && h->ctx) {
		EVP_MD_CTX_free(h->ctx);
		h->ctx = NULL;
	}
}

int lynn_sha256_file(const char *path, uint8_t out[32], lynn_progress_fn progress,
		     void *ud, struct lynn_err *err)
{
	struct lynn_sha256 h = { 0 };
	struct stat st;
	uint8_t *buf = NULL;
	uint64_t done = 0;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return lynn_errf(err, errno == ENOENT ? -LYNN_ENOTFOUND : -LYNN_EIO,
				 "sha256: '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = lynn_errf(err, -LYNN_EIO, "sha256: '%s': %s", path, strerror(errno));
		goto out;
	}
#ifdef POSIX_FADV_SEQUENTIAL
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
	buf = malloc(1 << 20);
	if (!buf) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "sha256: out of memory");
		goto out;
	}
	rc = lynn_sha256_init(&h, err);
	if (rc)
		goto out;
	for (;;) {
		ssize_t n = read(fd, buf, 1 << 20);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = lynn_errf(err, -LYNN_EIO, "sha256: '%s': read: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		rc = lynn_sha256_update(&h, buf, (size_t)n, err);
		if (rc)
			goto out;
		done += (uint64_t)n;
		if (progress)
			progress(ud, done, (uint64_t)st.st_size);
	}
	rc = lynn_sha256_final(&h, out, err);
out:
	lynn_sha256_release(&h);
	free(buf);
	close(fd);
	return rc;
}

void lynn_sha256_hex(const uint8_t digest[32], char hex[65])
{
	static const char d[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		hex[2 * i] = d[digest[i] >> 4];
		hex[2 * i + 1] = d[digest[i] & 15];
	}
	hex[64] = '\0';
}
