/* fuzz_util.h - shared by the libFuzzer targets (header only: each target
 * is built from its one .c file). */
#ifndef LYNN_FUZZ_UTIL_H
#define LYNN_FUZZ_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* Write the input to a fresh file from the mkstemp template `path` (edited
 * in place). Returns 0, or -1 with nothing left behind; the caller unlinks. */
static inline int fuzz_write_tmp(char *path, const uint8_t *data, size_t size)
{
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		unlink(path);
		return -1;
	}
	close(fd);
	return 0;
}

#endif
