/* sys.c - the replaceable system-call table and whole-file helpers
 * (layer: base). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
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
	.preadv = preadv,
	.write = write,
	.close = close,
	.fstat = fstat,
};

strata_sys_table strata_sys = {
	.open = sys_open,
	.pread = pread,
	.preadv = preadv,
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

/* Scatter read in the table's preadv, or, when a test replaced pread and
 * left preadv as it was, through that pread one buffer at a time, so one
 * hook sees every read. */
static ssize_t scatter(int fd, const struct iovec *iov, int n, off_t offset)
{
	if (!(strata_sys.preadv == preadv && strata_sys.pread != pread))
		return strata_sys.preadv(fd, iov, n, offset);
	return strata_sys.pread(fd, iov[0].iov_base, iov[0].iov_len, offset);
}

strata_status strata_preadv_full(int fd, const struct iovec *iov, int iovcnt,
				 off_t offset, const char *path,
				 strata_error *err)
{
	struct iovec left[STRATA_PREADV_MAX];
	if (iovcnt < 0 || iovcnt > STRATA_PREADV_MAX)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "read at most STRATA_PREADV_MAX buffers at once",
				   "a scatter read of %d buffers", iovcnt);
	size_t count = 0, done = 0;
	int first = 0;
	for (int i = 0; i < iovcnt; i++) {
		left[i] = iov[i];
		count += iov[i].iov_len;
	}
	while (first < iovcnt) {
		if (left[first].iov_len == 0) {
			first++;
			continue;
		}
		ssize_t n = scatter(fd, left + first, iovcnt - first,
				    offset + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return strata_fail(
				err, STRATA_E_IO,
				n < 0 ? "check the disk and the file's permissions"
				      : "the file is shorter than it should be; re-download or regenerate it",
				"reading %zu bytes at offset %" PRIu64
				" of '%s' failed after %zu: %s",
				count, (uint64_t)offset, path, done,
				n < 0 ? strerror(errno) : "end of file");
		done += (size_t)n;
		/* a short read: step past the buffers it filled */
		for (size_t k = (size_t)n; k && first < iovcnt;) {
			size_t take = k < left[first].iov_len ? k
							      : left[first].iov_len;
			left[first].iov_base = (char *)left[first].iov_base + take;
			left[first].iov_len -= take;
			k -= take;
			if (left[first].iov_len == 0)
				first++;
		}
	}
	return STRATA_OK;
}

static const char *kind_of(mode_t m)
{
	return S_ISDIR(m)    ? "a folder"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	       : S_ISSOCK(m) ? "a socket"
			     : "not a regular file";
}

strata_status strata_file_open_regular(const char *path, int flags, int *fd_out,
				       struct stat *st, strata_error *err)
{
	int fd = strata_sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK |
					       O_NOCTTY | flags, 0);
	if (fd < 0) {
		int e = errno; /* kept for the caller (EINVAL: no O_DIRECT) */
		strata_status s = strata_fail(
			err, e == ENOENT ? STRATA_E_NOT_FOUND : STRATA_E_IO,
			"check the path", "cannot open '%s': %s", path,
			strerror(e));
		errno = e;
		return s;
	}
	strata_status s = STRATA_OK;
	int fl;
	if (strata_sys.fstat(fd, st) != 0)
		s = strata_fail(err, STRATA_E_IO, "check the path",
				"cannot stat '%s': %s", path, strerror(errno));
	else if (!S_ISREG(st->st_mode))
		s = strata_fail(err, STRATA_E_IO, "give a regular file",
				"'%s' is %s, not a regular file", path,
				kind_of(st->st_mode));
	else if ((fl = fcntl(fd, F_GETFL)) < 0 ||
		 fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		s = strata_fail(err, STRATA_E_IO, "check the path",
				"cannot read '%s': %s", path, strerror(errno));
	if (s) {
		strata_sys.close(fd);
		return s;
	}
	*fd_out = fd;
	return STRATA_OK;
}

strata_status strata_file_read_all(const char *path, uint64_t max_bytes,
				   char **out, size_t *out_len,
				   strata_error *err)
{
	int fd = -1;
	struct stat st;
	strata_status s = strata_file_open_regular(path, 0, &fd, &st, err);
	if (s)
		return s;
	char *buf = NULL;
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

uint64_t strata_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* Atomic output files                                                      */
/* ------------------------------------------------------------------------ */

/* The temporary name of the write in progress, for
 * strata_file_abandon_pending (a signal handler): `pending` is set only
 * while pending_path holds a complete name. */
static char pending_path[PATH_MAX];
static volatile sig_atomic_t pending;

void strata_file_abandon_pending(void)
{
	if (pending)
		unlink(pending_path);
}

typedef enum out_kind {
	OUT_REPLACE, /* a new or regular file: temporary file and rename */
	OUT_OPEN,    /* a character device or FIFO: opened and written */
	OUT_FD,	     /* one of our own stdout/stderr: written through it */
} out_kind;

typedef struct out_target {
	out_kind kind;
	int fd;		      /* OUT_FD */
	char path[PATH_MAX];  /* OUT_REPLACE: the file renamed over */
} out_target;

static bool same_file(const struct stat *a, int fd)
{
	struct stat b;
	return fstat(fd, &b) == 0 && a->st_dev == b.st_dev &&
	       a->st_ino == b.st_ino;
}

static strata_status refuse(strata_error *err, const char *path,
			    const char *what)
{
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "name a regular file (or a FIFO or character device "
			   "to write to)",
			   "output '%s' is %s", path, what);
}

/* The folder of `path` ("." when it names none) into dir. */
static void folder_of(const char *path, char *dir, size_t cap)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, cap, ".");
	else if (slash == path)
		snprintf(dir, cap, "/");
	else
		snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

/* Follows symbolic links in the last component of path (40 at most, as
 * the kernel does) into out: the name a rename must replace, which may not
 * exist yet (a link to a file still to be made). */
static strata_status follow_links(const char *path, char *out,
				  strata_error *err)
{
	char cur[PATH_MAX], link[PATH_MAX], dir[PATH_MAX];
	if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur)
		return refuse(err, path, "a name too long");
	for (int hops = 0; hops < 40; hops++) {
		struct stat lst;
		if (lstat(cur, &lst) != 0 || !S_ISLNK(lst.st_mode)) {
			memcpy(out, cur, sizeof cur);
			return STRATA_OK;
		}
		ssize_t n = readlink(cur, link, sizeof link - 1);
		if (n < 0)
			return strata_fail(err, STRATA_E_IO, "check the link",
					   "cannot read link '%s': %s", cur,
					   strerror(errno));
		link[n] = '\0';
		folder_of(cur, dir, sizeof dir);
		int w = link[0] == '/'
				? snprintf(cur, sizeof cur, "%s", link)
				: snprintf(cur, sizeof cur, "%s/%s", dir, link);
		if (w >= (int)sizeof cur)
			return refuse(err, path, "a link to a name too long");
	}
	return refuse(err, path, "a loop of symbolic links");
}

/* What writing `path` means. A symbolic link is never replaced: the file it
 * names is (made if missing); a FIFO or character device is written as it
 * is (/dev/null stays a device); stdout or stderr named by any path
 * (/dev/stdout) is written through the stream itself; a socket, block
 * device, folder or a file in a missing folder is refused. */
static strata_status resolve(const char *path, out_target *t,
			     strata_error *err)
{
	struct stat st;
	memset(t, 0, sizeof *t);
	t->fd = -1;
	if (!*path)
		return refuse(err, path, "an empty name");
	if (stat(path, &st) != 0) {
		char dir[PATH_MAX];
		struct stat ds;
		if (errno != ENOENT)
			return strata_fail(err, STRATA_E_IO, "check the path",
					   "cannot look at output '%s': %s",
					   path, strerror(errno));
		strata_status s = follow_links(path, t->path, err);
		if (s)
			return s;
		folder_of(t->path, dir, sizeof dir);
		if (stat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode))
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "make the folder first, or name a file in one that exists",
					   "output '%s': there is no folder '%s'",
					   path, dir);
		return STRATA_OK;
	}
	if (same_file(&st, STDOUT_FILENO) || same_file(&st, STDERR_FILENO)) {
		t->kind = OUT_FD;
		t->fd = same_file(&st, STDOUT_FILENO) ? STDOUT_FILENO
						      : STDERR_FILENO;
		return STRATA_OK;
	}
	if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
		t->kind = OUT_OPEN;
		return STRATA_OK;
	}
	if (S_ISSOCK(st.st_mode))
		return refuse(err, path, "a socket");
	if (S_ISBLK(st.st_mode))
		return refuse(err, path, "a block device");
	if (S_ISDIR(st.st_mode))
		return refuse(err, path, "a folder");
	if (!S_ISREG(st.st_mode))
		return refuse(err, path, "not a regular file");
	return follow_links(path, t->path, err);
}

static strata_status write_all(int fd, const void *data, size_t len,
			       const char *path, strata_error *err)
{
	const char *p = data;
	for (size_t done = 0; done < len;) {
		ssize_t n = strata_sys.write(fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return strata_fail(err, STRATA_E_IO,
					   "check free disk space",
					   "writing '%s' failed: %s", path,
					   strerror(n < 0 ? errno : EIO));
		done += (size_t)n;
	}
	return STRATA_OK;
}

/* A FIFO or device, opened without blocking (a FIFO nobody reads is an
 * error, not a hang), then written in blocking mode. */
static strata_status write_opened(const char *path, const void *data,
				  size_t len, strata_error *err)
{
	int fd = strata_sys.open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY |
					       O_CLOEXEC, 0);
	if (fd < 0)
		return strata_fail(err, STRATA_E_IO,
				   errno == ENXIO ? "start the process that reads the FIFO first"
						  : "check the path and its permissions",
				   "cannot open output '%s': %s", path,
				   errno == ENXIO ? "no process reads it"
						  : strerror(errno));
	int fl = fcntl(fd, F_GETFL);
	strata_status s = STRATA_OK;
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		s = strata_fail(err, STRATA_E_IO, "check the path",
				"cannot set up output '%s': %s", path,
				strerror(errno));
	if (s == STRATA_OK)
		s = write_all(fd, data, len, path, err);
	if (strata_sys.close(fd) != 0 && s == STRATA_OK)
		s = strata_fail(err, STRATA_E_IO, "check the device",
				"cannot finish writing '%s': %s", path,
				strerror(errno));
	return s;
}

/* Blocks the signals that end a process in this thread (the CLI's handler
 * covers the others) over the rename; restores them in *old. */
static void block_signals(sigset_t *old)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, old);
}

/* One file being replaced: its temporary file (unnamed while written
 * where the file system allows, else named tmp from the start) and the
 * folder whose entry the rename changes. */
struct strata_file_out {
	int fd;
	bool named;
	char path[PATH_MAX], tmp[PATH_MAX], dir[PATH_MAX];
};

/* The temporary file is unnamed (O_TMPFILE) while it is written, so no
 * signal or crash can leave it behind; it is fsynced, named PATH.tmp.PID
 * with every signal blocked and registered for the CLI's signal handler,
 * and renamed over PATH. Where the file system has no O_TMPFILE it is
 * named from the start and registered all along. */
static strata_status replace_begin(const char *path, strata_file_out *f,
				   strata_error *err)
{
	if (snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%ld", path,
		     (long)getpid()) >= (int)sizeof f->tmp ||
	    strlen(path) >= sizeof f->path)
		return strata_fail(err, STRATA_E_INVALID_ARG, "use a shorter path",
				   "output path '%s' is too long", path);
	memcpy(f->path, path, strlen(path) + 1);
	folder_of(path, f->dir, sizeof f->dir);
	f->named = false;
	f->fd = -1;
#ifdef O_TMPFILE
	f->fd = strata_sys.open(f->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
#endif
	if (f->fd < 0) {
		f->named = true;
		memcpy(pending_path, f->tmp, sizeof f->tmp);
		pending = 1;
		f->fd = strata_sys.open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC |
						O_CLOEXEC, 0644);
	}
	if (f->fd < 0) {
		int e = errno;
		pending = 0;
		return strata_fail(err, STRATA_E_IO,
				   "check the folder exists and is writable",
				   "cannot create '%s': %s", f->tmp, strerror(e));
	}
	return STRATA_OK;
}

/* Ends a replacement: with s == STRATA_OK fsyncs, names and renames the
 * temporary file over the path; otherwise (or when that fails) removes
 * it. Returns the first error. */
static strata_status replace_end(strata_file_out *f, strata_status s,
				 strata_error *err)
{
	char fdpath[64];
	if (s == STRATA_OK && fsync(f->fd) != 0)
		s = strata_fail(err, STRATA_E_IO, "check free disk space",
				"cannot flush '%s' to disk: %s", f->path,
				strerror(errno));
	sigset_t old;
	block_signals(&old);
	if (s == STRATA_OK && !f->named) {
		memcpy(pending_path, f->tmp, sizeof f->tmp);
		pending = 1;
		snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", f->fd);
		if (linkat(AT_FDCWD, fdpath, AT_FDCWD, f->tmp,
			   AT_SYMLINK_FOLLOW) != 0)
			s = strata_fail(err, STRATA_E_IO,
					"check the folder is writable",
					"cannot create '%s': %s", f->tmp,
					strerror(errno));
	}
	if (strata_sys.close(f->fd) != 0 && s == STRATA_OK)
		s = strata_fail(err, STRATA_E_IO,
				"check free disk space and permissions",
				"cannot finish writing '%s': %s", f->path,
				strerror(errno));
	f->fd = -1;
	if (s == STRATA_OK && rename(f->tmp, f->path) != 0)
		s = strata_fail(err, STRATA_E_IO,
				"check free disk space and permissions",
				"cannot finish writing '%s': %s", f->path,
				strerror(errno));
	if (s != STRATA_OK && pending)
		unlink(f->tmp);
	pending = 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (s == STRATA_OK) {
		int dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			(void)fsync(dfd); /* the rename itself, best effort */
			close(dfd);
		}
	}
	return s;
}

static strata_status write_replacing(const char *path, const void *data,
				     size_t len, strata_error *err)
{
	strata_file_out f;
	strata_status s = replace_begin(path, &f, err);
	if (s)
		return s;
	s = write_all(f.fd, data, len, path, err);
	return replace_end(&f, s, err);
}

strata_status strata_file_out_open(const char *path, strata_file_out **out,
				   strata_error *err)
{
	out_target t;
	strata_status s = resolve(path, &t, err);
	if (s)
		return s;
	if (t.kind != OUT_REPLACE)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "name a regular file (new or to replace)",
				   "output '%s' is a device, FIFO or stream, "
				   "not a file that can be replaced whole",
				   path);
	strata_file_out *f = strata_alloc_or_error(sizeof *f, "an output file",
						   err);
	if (!f)
		return STRATA_E_NOMEM;
	if ((s = replace_begin(t.path, f, err))) {
		strata_free(f);
		return s;
	}
	*out = f;
	return STRATA_OK;
}

strata_status strata_file_out_write(strata_file_out *f, const void *data,
				    size_t len, strata_error *err)
{
	return write_all(f->fd, data, len, f->path, err);
}

strata_status strata_file_out_commit(strata_file_out *f, strata_error *err)
{
	strata_status s = replace_end(f, STRATA_OK, err);
	strata_free(f);
	return s;
}

void strata_file_out_abort(strata_file_out *f)
{
	if (!f)
		return;
	(void)replace_end(f, STRATA_E_IO, NULL);
	strata_free(f);
}

strata_status strata_file_check_output(const char *path, strata_error *err)
{
	out_target t;
	return resolve(path, &t, err);
}

strata_status strata_file_write_atomic(const char *path, const void *data,
				       size_t len, strata_error *err)
{
	out_target t;
	strata_status s = resolve(path, &t, err);
	if (s)
		return s;
	if (t.kind == OUT_OPEN)
		return write_opened(path, data, len, err);
	if (t.kind == OUT_FD) {
		fflush(t.fd == STDOUT_FILENO ? stdout : stderr);
		return write_all(t.fd, data, len, path, err);
	}
	return write_replacing(t.path, data, len, err);
}

bool strata_str_ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcmp(s + a - b, suffix);
}
