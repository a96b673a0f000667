/* fs.c - mmap, bounded reads, atomic files and folders (see include/lynn/fs.h). */
#include "lynn/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ===== Read-only mmap ===== */

int lynn_map_open(struct lynn_map *map, const char *path, struct lynn_err *err)
{
	struct stat st;

	memset(map, 0, sizeof *map);
	map->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (map->fd < 0)
		return lynn_errf(err, errno == ENOENT ? -LYNN_ENOTFOUND : -LYNN_EIO,
				 "fs: '%s': %s", path, strerror(errno));
	if (fstat(map->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(map->fd);
		map->fd = -1;
		return lynn_errf(err, -LYNN_EIO, "fs: '%s': not a regular file", path);
	}
	map->size = (size_t)st.st_size;
	if (map->size) {
		void *p = mmap(NULL, map->size, PROT_READ, MAP_PRIVATE, map->fd, 0);
		if (p == MAP_FAILED) {
			close(map->fd);
			map->fd = -1;
			return lynn_errf(err, -LYNN_EIO, "fs: '%s': mmap: %s", path, strerror(errno));
		}
		map->data = p;
	}
	return 0;
}

void lynn_map_close(struct lynn_map *map)
{
	if (!map)
		return;
	if (map->data)
		munmap((void *)map->data, map->size);
	if (map->fd > 0)
		close(map->fd);
	memset(map, 0, sizeof *map);
	map->fd = -1;
}

static void advise(const void *p, size_t len, int advice, bool inward)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, b = a + len;
	if (!p || !len)
		return;
	a = inward ? (a + pg - 1) / pg * pg : a / pg * pg;
	b = inward ? b / pg * pg : (b + pg - 1) / pg * pg;
	if (b > a)
		madvise((void *)a, b - a, advice);
}

void lynn_mem_sequential(const void *p, size_t len) { advise(p, len, MADV_SEQUENTIAL, false); }
void lynn_mem_drop(const void *p, size_t len) { advise(p, len, MADV_DONTNEED, true); }

int lynn_file_read(const char *path, size_t max_size, char **out, size_t *len,
		   struct lynn_err *err)
{
	int fd, rc = 0;
	struct stat st;
	char *buf = NULL;
	size_t got = 0;

	*out = NULL;
	if (len)
		*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return lynn_errf(err, errno == ENOENT ? -LYNN_ENOTFOUND : -LYNN_EIO,
				 "fs: '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = lynn_errf(err, -LYNN_EIO, "fs: '%s': not a regular file", path);
		goto out;
	}
	if ((uint64_t)st.st_size > max_size) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "fs: '%s': %lld bytes exceeds the limit of %zu",
			       path, (long long)st.st_size, max_size);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "fs: '%s': out of memory", path);
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = lynn_errf(err, -LYNN_EIO, "fs: '%s': short read", path);
			goto out;
		}
		got += (size_t)n;
	}
	buf[got] = '\0';
	*out = buf;
	buf = NULL;
	if (len)
		*len = got;
out:
	free(buf);
	close(fd);
	return rc;
}

bool lynn_file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool lynn_dir_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int64_t lynn_file_size(const char *path, struct lynn_err *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return lynn_errf(err, errno == ENOENT ? -LYNN_ENOTFOUND : -LYNN_EIO,
				 "fs: '%s': %s", path, strerror(errno));
	return st.st_size;
}

char *lynn_path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (!p)
		return NULL;
	memcpy(p, dir, a);
	if (a && dir[a - 1] != '/')
		p[a++] = '/';
	memcpy(p + a, name, b + 1);
	return p;
}

/* ===== Atomic file writes ===== */

static char *dir_of(const char *path)
{
	char *tmp = strdup(path), *d;
	if (!tmp)
		return NULL;
	d = strdup(dirname(tmp));
	free(tmp);
	return d;
}

static int fsync_dir(const char *path)
{
	char *d = dir_of(path);
	int fd, rc = 0;
	if (!d)
		return -1;
	fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(d);
	if (fd < 0)
		return -1;
	if (fsync(fd) < 0 && errno != EINVAL)
		rc = -1;
	close(fd);
	return rc;
}

int lynn_afile_open(struct lynn_afile *af, const char *path, struct lynn_err *err)
{
	char *dir = NULL, *base_tmp = NULL;
	int fd;

	memset(af, 0, sizeof *af);
	af->final_path = strdup(path);
	dir = dir_of(path);
	base_tmp = strdup(path);
	if (!af->final_path || !dir || !base_tmp)
		goto nomem;
	if (asprintf(&af->tmp_path, "%s/.%s.tmp-XXXXXX", dir, basename(base_tmp)) < 0) {
		af->tmp_path = NULL;
		goto nomem;
	}
	free(dir);
	free(base_tmp);
	fd = mkstemp(af->tmp_path);
	if (fd < 0) {
		int e = errno;
		free(af->tmp_path);
		free(af->final_path);
		memset(af, 0, sizeof *af);
		return lynn_errf(err, -LYNN_EIO, "fs: '%s': cannot create a temp file: %s",
				 path, strerror(e));
	}
	fchmod(fd, 0644);
	af->f = fdopen(fd, "wb");
	if (!af->f) {
		close(fd);
		lynn_afile_abort(af);
		return lynn_errf(err, -LYNN_EIO, "fs: '%s': fdopen failed", path);
	}
	return 0;
nomem:
	free(dir);
	free(base_tmp);
	free(af->final_path);
	memset(af, 0, sizeof *af);
	return lynn_errf(err, -LYNN_ENOMEM, "fs: '%s': out of memory", path);
}

int lynn_afile_commit(struct lynn_afile *af, struct lynn_err *err)
{
	int rc = 0;

	if (!af->f)
		return lynn_errf(err, -LYNN_EINVAL, "fs: commit of a closed file");
	if (fflush(af->f) != 0 || ferror(af->f) || fsync(fileno(af->f)) != 0) {
		rc = lynn_errf(err, -LYNN_EIO, "fs: '%s': write failed: %s",
			       af->final_path, strerror(errno));
		goto fail;
	}
	if (fclose(af->f) != 0) {
		af->f = NULL;
		rc = lynn_errf(err, -LYNN_EIO, "fs: '%s': close failed: %s",
			       af->final_path, strerror(errno));
		goto fail;
	}
	af->f = NULL;
	if (rename(af->tmp_path, af->final_path) != 0) {
		rc = lynn_errf(err, -LYNN_EIO, "fs: '%s': rename failed: %s",
			       af->final_path, strerror(errno));
		goto fail;
	}
	fsync_dir(af->final_path);
	free(af->tmp_path);
	free(af->final_path);
	memset(af, 0, sizeof *af);
	return 0;
fail:
	lynn_afile_abort(af);
	return rc;
}

void lynn_afile_abort(struct lynn_afile *af)
{
	if (!af)
		return;
	if (af->f)
		fclose(af->f);
	if (af->tmp_path)
		unlink(af->tmp_path);
	free(af->tmp_path);
	free(af->final_path);
	memset(af, 0, sizeof *af);
}

int lynn_write_atomic(const char *path, const void *data, size_t len, struct lynn_err *err)
{
	struct lynn_afile af;
	int rc = lynn_afile_open(&af, path, err);
	if (rc)
		return rc;
	if (len && fwrite(data, 1, len, af.f) != len) {
		lynn_afile_abort(&af);
		return lynn_errf(err, -LYNN_EIO, "fs: '%s': write failed", path);
	}
	return lynn_afile_commit(&af, err);
}

int lynn_file_copy(const char *src, const char *dst, struct lynn_err *err)
{
	struct lynn_afile af;
	char buf[1 << 16];
	FILE *in;
	size_t n;
	int rc;

	in = fopen(src, "rb");
	if (!in)
		return lynn_errf(err, errno == ENOENT ? -LYNN_ENOTFOUND : -LYNN_EIO,
				 "fs: '%s': %s", src, strerror(errno));
	rc = lynn_afile_open(&af, dst, err);
	if (rc) {
		fclose(in);
		return rc;
	}
	while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
		if (fwrite(buf, 1, n, af.f) != n) {
			fclose(in);
			lynn_afile_abort(&af);
			return lynn_errf(err, -LYNN_EIO, "fs: '%s': write failed", dst);
		}
	}
	if (ferror(in)) {
		fclose(in);
		lynn_afile_abort(&af);
		return lynn_errf(err, -LYNN_EIO, "fs: '%s': read failed", src);
	}
	fclose(in);
	return lynn_afile_commit(&af, err);
}

/* ===== Atomic output folders ===== */

bool lynn_dir_nonempty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	bool any = false;
	if (!d)
		return false;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			any = true;
			break;
		}
	}
	closedir(d);
	return any;
}

int lynn_rm_rf(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	if (!d)
		return unlink(path);
	while ((e = readdir(d))) {
		char *p;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		p = lynn_path_join(path, e->d_name);
		if (p) {
			struct stat st;
			if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
				lynn_rm_rf(p);
			else
				unlink(p);
			free(p);
		}
	}
	closedir(d);
	return rmdir(path);
}

int lynn_tmpdir_create(struct lynn_tmpdir *td, const char *final_path, bool force,
		       struct lynn_err *err)
{
	char *dir, *base;

	memset(td, 0, sizeof *td);
	if (lynn_dir_exists(final_path) && lynn_dir_nonempty(final_path) && !force)
		return lynn_errf(err, -LYNN_EINVAL,
				 "fs: '%s': output folder is not empty (use --force to replace it)",
				 final_path);
	if (lynn_file_exists(final_path))
		return lynn_errf(err, -LYNN_EINVAL, "fs: '%s': exists and is not a folder", final_path);
	dir = dir_of(final_path);
	base = strdup(final_path);
	td->final_path = strdup(final_path);
	if (!dir || !base || !td->final_path ||
	    asprintf(&td->path, "%s/.%s.tmp-XXXXXX", dir, basename(base)) < 0) {
		free(dir);
		free(base);
		free(td->final_path);
		memset(td, 0, sizeof *td);
		return lynn_errf(err, -LYNN_ENOMEM, "fs: out of memory");
	}
	free(dir);
	free(base);
	if (!mkdtemp(td->path)) {
		int e = errno;
		free(td->path);
		free(td->final_path);
		memset(td, 0, sizeof *td);
		return lynn_errf(err, -LYNN_EIO, "fs: '%s': cannot create a temp folder: %s",
				 final_path, strerror(e));
	}
	chmod(td->path, 0755);
	return 0;
}

static void fsync_tree(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d))) {
		char *p;
		int fd;
		if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		p = lynn_path_join(path, e->d_name);
		if (!p)
			continue;
		fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
		free(p);
	}
	closedir(d);
	{
		int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
}

int lynn_tmpdir_commit(struct lynn_tmpdir *td, struct lynn_err *err)
{
	char *old = NULL;
	int rc = 0;

	fsync_tree(td->path);
	if (lynn_dir_exists(td->final_path)) {
		/* Move the old folder aside first, so a failed rename keeps it. */
		if (asprintf(&old, "%s.old-%d", td->final_path, (int)getpid()) < 0) {
			old = NULL;
			rc = lynn_errf(err, -LYNN_ENOMEM, "fs: out of memory");
			goto out;
		}
		if (rename(td->final_path, old) != 0) {
			rc = lynn_errf(err, -LYNN_EIO, "fs: '%s': cannot replace: %s",
				       td->final_path, strerror(errno));
			goto out;
		}
	}
	if (rename(td->path, td->final_path) != 0) {
		rc = lynn_errf(err, -LYNN_EIO, "fs: '%s': rename failed: %s",
			       td->final_path, strerror(errno));
		if (old)
			rename(old, td->final_path);
		goto out;
	}
	if (old)
		lynn_rm_rf(old);
	fsync_dir(td->final_path);
	free(td->path);
	td->path = NULL;
out:
	free(old);
	if (rc)
		lynn_tmpdir_abort(td);
	free(td->final_path);
	memset(td, 0, sizeof *td);
	return rc;
}

void lynn_tmpdir_abort(struct lynn_tmpdir *td)
{
	if (!td)
		return;
	if (td->path)
		lynn_rm_rf(td->path);
	free(td->path);
	free(td->final_path);
	memset(td, 0, sizeof *td);
}
