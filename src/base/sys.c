/* sys.c - the replaceable system-call table and whole-file helpers
 * (layer: base). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "strata/base.h"

static int sys_open(const char *path, int flags, mode_t mode)
{
	return open(path, flags, mode);
}

static const strata_sys_table defaults = {
	.open = sys_open,
	.pread = pread,
	.write = write,
	.close = close,
	.fstat = fstat,
};

strata_sys_table strata_sys = {
	.open = sys_open,
	.pread = pread,
	.write = write,
	.close = close,
	.fstat = fstat,
};

/* ------------------------------------------------------------------------ */

void strata_sys_reset(void)
{
	strata_sys = defaults;
}

strata_status strata_pread_full(int fd, void *buf, size_t count, off_t offset,
				const char *path, strata_error *err)
{
	char *p = buf;
	size_t done = 0;
	while (done < count) {
		size_t want = count - done;
		if (want > (size_t)1 << 30)
			want = (size_t)1 << 30;
		ssize_t n = strata_sys.pread(fd, p + done, want,
					     offset + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return strata_fail(err, STRATA_E_IO,
					   "check the disk and the file's permissions",
					   "reading %zu bytes at offset %" PRIu64
					   " of '%s' failed: %s",
					   count, (uint64_t)offset, path,
					   strerror(errno));
		if (n == 0)
			return strata_fail(err, STRATA_E_IO,
					   "the file is shorter than it should be; re-download or regenerate it",
					   "'%s' ended after %" PRIu64
					   " bytes while reading %zu bytes at offset %" PRIu64,
					   path, (uint64_t)offset + done, count,
					   (uint64_t)offset);
		done += (size_t)n;
	}
	return STRATA_OK;
}

strata_status strata_file_read_all(const char *path, uint64_t max_bytes,
				   char **out, size_t *out_len,
				   strata_error *err)
{
	int fd = strata_sys.open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return strata_fail(err,
				   errno == ENOENT ? STRATA_E_NOT_FOUND : STRATA_E_IO,
				   "check the path", "cannot open '%s': %s", path,
				   strerror(errno));
	struct stat st;
	strata_status s = STRATA_OK;
	char *buf = NULL;
	if (strata_sys.fstat(fd, &st) != 0) {
		s = strata_fail(err, STRATA_E_IO, "check the path",
				"cannot stat '%s': %s", path, strerror(errno));
		goto done;
	}
	if (!S_ISREG(st.st_mode)) {
		s = strata_fail(err, STRATA_E_IO, "give a regular file",
				"'%s' is not a regular file", path);
		goto done;
	}
	if ((uint64_t)st.st_size > max_bytes) {
		s = strata_fail(err, STRATA_E_CKPT_LIMIT,
				"check the file is the one intended",
				"'%s' is %" PRIu64 " bytes, over the %" PRIu64
				"-byte limit for this kind of file",
				path, (uint64_t)st.st_size, max_bytes);
		goto done;
	}
	buf = strata_alloc_or_error((size_t)st.st_size + 1, path, err);
	if (!buf) {
		s = STRATA_E_NOMEM;
		goto done;
	}
	s = strata_pread_full(fd, buf, (size_t)st.st_size, 0, path, err);
	if (s != STRATA_OK) {
		strata_free(buf);
		goto done;
	}
	buf[st.st_size] = '\0';
	*out = buf;
	*out_len = (size_t)st.st_size;
done:
	strata_sys.close(fd);
	return s;
}

strata_status strata_file_write_atomic(const char *path, const void *data,
				       size_t len, strata_error *err)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >=
	    (int)sizeof tmp)
		return strata_fail(err, STRATA_E_INVALID_ARG, "use a shorter path",
				   "output path '%s' is too long", path);
	int fd = strata_sys.open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
				 0644);
	if (fd < 0)
		return strata_fail(err, STRATA_E_IO,
				   "check the folder exists and is writable",
				   "cannot create '%s': %s", tmp, strerror(errno));
	const char *p = data;
	size_t done = 0;
	while (done < len) {
		ssize_t n = strata_sys.write(fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			strata_sys.close(fd);
			unlink(tmp);
			return strata_fail(err, STRATA_E_IO,
					   "check free disk space",
					   "writing '%s' failed: %s", path,
					   strerror(e));
		}
		done += (size_t)n;
	}
	if (strata_sys.close(fd) != 0 || rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return strata_fail(err, STRATA_E_IO,
				   "check free disk space and permissions",
				   "cannot finish writing '%s': %s", path,
				   strerror(e));
	}
	return STRATA_OK;
}

uint64_t strata_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
