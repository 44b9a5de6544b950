/* test_sys.c - the replaceable system-call table: pread_full under short
 * reads, EINTR and EIO; write_atomic never leaving a partial file;
 * read_all's limits (layer: base). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "strata/base.h"

static char dir[4096];

/* ------------------------------------------------------------------------ */
/* Injected system calls                                                    */
/* ------------------------------------------------------------------------ */

static int calls;
static int eintr_every; /* 0: never */
static int eio_at;	/* call number that fails with EIO; 0: never */
static ssize_t real_pread(int fd, void *b, size_t n, off_t o)
{
	return pread(fd, b, n, o);
}

static ssize_t fake_pread(int fd, void *b, size_t n, off_t o)
{
	calls++;
	if (eio_at && calls == eio_at) {
		errno = EIO;
		return -1;
	}
	if (eintr_every && calls % eintr_every == 0) {
		errno = EINTR;
		return -1;
	}
	if (n > 3)
		n = 3; /* short reads: at most 3 bytes per call */
	return real_pread(fd, b, n, o);
}

static int write_calls, write_fail_at;
static ssize_t fake_write(int fd, const void *b, size_t n)
{
	write_calls++;
	if (write_calls == write_fail_at) {
		errno = ENOSPC;
		return -1;
	}
	if (write_calls % 2 == 1) {
		errno = EINTR; /* every other call interrupted */
		return -1;
	}
	return write(fd, b, n > 5 ? 5 : n); /* short writes */
}

static int fake_close_fails(int fd)
{
	close(fd);
	errno = EIO;
	return -1;
}

static void reset(void)
{
	strata_sys_reset();
	calls = eintr_every = eio_at = 0;
	write_calls = write_fail_at = 0;
}

static int open_data(const char *name, const char *content)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	fputs(content, f);
	fclose(f);
	return open(path, O_RDONLY);
}

static char *path_of(const char *name)
{
	static char p[4200];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return p;
}

/* ------------------------------------------------------------------------ */
/* pread_full                                                               */
/* ------------------------------------------------------------------------ */

static void test_pread_full_retries_short_reads_and_eintr(void **state)
{
	(void)state;
	reset();
	int fd = open_data("p.bin", "0123456789abcdefghij");
	char buf[16] = {0};
	strata_sys.pread = fake_pread;
	eintr_every = 2;
	strata_error e;
	assert_int_equal(strata_pread_full(fd, buf, 15, 3, "p.bin", &e), STRATA_OK);
	assert_string_equal(buf, "3456789abcdefgh");
	assert_int_equal(calls, 9); /* 5 short reads, 4 interruptions */
	close(fd);
	reset();
}

static void test_pread_full_reports_eio(void **state)
{
	(void)state;
	reset();
	int fd = open_data("q.bin", "0123456789");
	char buf[10];
	strata_sys.pread = fake_pread;
	eio_at = 2;
	strata_error e;
	assert_int_equal(strata_pread_full(fd, buf, 8, 1, "q.bin", &e), STRATA_E_IO);
	assert_non_null(strstr(e.message, "'q.bin'"));
	assert_non_null(strstr(e.message, "offset 1"));
	assert_non_null(strstr(e.message, strerror(EIO)));
	assert_true(e.fix[0] != '\0');
	close(fd);
	reset();
}

static void test_pread_full_reports_early_end(void **state)
{
	(void)state;
	reset();
	int fd = open_data("r.bin", "0123456789");
	char buf[32];
	strata_sys.pread = fake_pread;
	strata_error e;
	assert_int_equal(strata_pread_full(fd, buf, 8, 6, "r.bin", &e), STRATA_E_IO);
	assert_string_equal(e.message, "'r.bin' ended after 10 bytes while reading "
				       "8 bytes at offset 6");
	close(fd);
	reset();
	assert_int_equal(strata_pread_full(-1, buf, 1, 0, "bad fd", &e), STRATA_E_IO);
	assert_non_null(strstr(e.message, strerror(EBADF)));
	/* Zero bytes asked: nothing read, success. */
	assert_int_equal(strata_pread_full(-1, buf, 0, 0, "x", &e), STRATA_OK);
}

/* preadv_full: a scatter read through the table's preadv, here one that
 * stops short inside and at the edges of buffers and is interrupted. */
static int v_calls;
static ssize_t short_preadv(int fd, const struct iovec *iov, int n, off_t o)
{
	if (++v_calls % 3 == 0) {
		errno = EINTR;
		return -1;
	}
	/* at most 4 bytes, from the first buffer and into the second */
	size_t want = 4, got = 0;
	for (int i = 0; i < n && want; i++) {
		size_t k = iov[i].iov_len < want ? iov[i].iov_len : want;
		ssize_t r = real_pread(fd, iov[i].iov_base, k, o + (off_t)got);
		if (r <= 0)
			return got ? (ssize_t)got : r;
		got += (size_t)r;
		want -= (size_t)r;
	}
	return (ssize_t)got;
}

static void test_preadv_full_fills_buffers_in_order(void **state)
{
	(void)state;
	reset();
	int fd = open_data("v.bin", "0123456789abcdefghij");
	char a[4] = {0}, b[1] = {0}, c[8] = {0};
	struct iovec iov[4] = {{a, 3}, {b, 1}, {NULL, 0}, {c, 7}};
	strata_error e;
	strata_sys.preadv = short_preadv;
	v_calls = 0;
	assert_int_equal(strata_preadv_full(fd, iov, 4, 2, "v.bin", &e),
			 STRATA_OK);
	assert_string_equal(a, "234");
	assert_true(b[0] == '5');
	assert_string_equal(c, "6789abc");
	assert_true(v_calls >= 4); /* short reads and interruptions retried */
	assert_true(iov[0].iov_base == a && iov[0].iov_len == 3);
	reset();
	/* a test's pread alone sees the scatter read, one buffer a call */
	strata_sys.pread = fake_pread;
	memset(a, 0, sizeof a);
	memset(c, 0, sizeof c);
	assert_int_equal(strata_preadv_full(fd, iov, 4, 0, "v.bin", &e),
			 STRATA_OK);
	assert_string_equal(a, "012");
	assert_string_equal(c, "456789a");
	assert_int_equal(calls, 5); /* 3 + 1 + 3 + 3 + 1 bytes */
	/* the file ends inside the last buffer: E_IO naming it */
	reset();
	struct iovec tail[2] = {{a, 3}, {c, 7}};
	assert_int_equal(strata_preadv_full(fd, tail, 2, 15, "v.bin", &e),
			 STRATA_E_IO);
	assert_non_null(strstr(e.message, "'v.bin'"));
	assert_non_null(strstr(e.message, "end of file"));
	assert_int_equal(strata_preadv_full(fd, tail, STRATA_PREADV_MAX + 1, 0,
					    "v.bin", &e),
			 STRATA_E_INVALID_ARG);
	close(fd);
	reset();
}

/* ------------------------------------------------------------------------ */
/* write_atomic                                                             */
/* ------------------------------------------------------------------------ */

static char *read_text(const char *path)
{
	char *buf = NULL;
	size_t len;
	if (strata_file_read_all(path, 1 << 20, &buf, &len, NULL) != STRATA_OK)
		return NULL;
	return buf;
}

/* No temporary file left behind in the folder. */
static int entries(void)
{
	char cmd[4300];
	snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | grep -c '[.]tmp[.]') -eq 0",
		 dir);
	return system(cmd) == 0 ? 1 : 0;
}

static void test_write_atomic_survives_eintr_and_short_writes(void **state)
{
	(void)state;
	reset();
	char *p = path_of("out.json");
	strata_sys.write = fake_write;
	const char text[] = "{\"a\": 1, \"b\": [1, 2, 3]}\n";
	assert_int_equal(strata_file_write_atomic(p, text, sizeof text - 1, NULL),
			 STRATA_OK);
	reset();
	char *got = read_text(p);
	assert_string_equal(got, text);
	strata_free(got);
	assert_true(entries());
	unlink(p);
}

static void test_write_atomic_failure_keeps_old_content(void **state)
{
	(void)state;
	reset();
	char *p = path_of("keep.json");
	assert_int_equal(strata_file_write_atomic(p, "old\n", 4, NULL), STRATA_OK);
	strata_error e;
	/* Fails mid-way (after some bytes reached the temporary file). */
	strata_sys.write = fake_write;
	write_fail_at = 6;
	assert_int_equal(strata_file_write_atomic(p, "new content, longer", 19, &e),
			 STRATA_E_IO);
	reset();
	assert_non_null(strstr(e.message, "keep.json"));
	assert_non_null(strstr(e.message, strerror(ENOSPC)));
	char *got = read_text(p);
	assert_string_equal(got, "old\n");
	strata_free(got);
	assert_true(entries());

	/* A failing close (delayed write error) is a failure too. */
	strata_sys.close = fake_close_fails;
	assert_int_equal(strata_file_write_atomic(p, "newer", 5, &e), STRATA_E_IO);
	reset();
	got = read_text(p);
	assert_string_equal(got, "old\n");
	strata_free(got);
	assert_true(entries());

	/* A missing folder: refused, nothing created. */
	assert_int_equal(strata_file_write_atomic("/nonexistent-dir/x", "a", 1, &e),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(e.message, "there is no folder"));
	unlink(p);
}

/* A symbolic link stays a link (the file it names gets the content, made if
 * missing); a FIFO stays a FIFO and its reader gets the bytes; /dev/null
 * stays a device; a socket, a folder and a file in a missing folder are
 * refused, before and at the write (issue 20, defect 1: as root, rename
 * replaced /dev/null). */
static void test_write_atomic_keeps_what_the_path_names(void **state)
{
	(void)state;
	reset();
	char real[4200], link_[4200], fifo[4200], sock[4200], dangling[4200];
	snprintf(real, sizeof real, "%s", path_of("real.json"));
	snprintf(link_, sizeof link_, "%s", path_of("link.json"));
	snprintf(fifo, sizeof fifo, "%s", path_of("fifo"));
	snprintf(sock, sizeof sock, "%s", path_of("sock"));
	snprintf(dangling, sizeof dangling, "%s", path_of("dangling"));
	strata_error e;
	assert_int_equal(strata_file_write_atomic(real, "old", 3, &e), STRATA_OK);
	assert_int_equal(symlink("real.json", link_), 0);
	assert_int_equal(strata_file_write_atomic(link_, "new\n", 4, &e),
			 STRATA_OK);
	struct stat st;
	assert_int_equal(lstat(link_, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	char *got = read_text(real);
	assert_string_equal(got, "new\n");
	strata_free(got);

	assert_int_equal(strata_file_write_atomic("/dev/null", "x", 1, &e),
			 STRATA_OK);
	assert_int_equal(stat("/dev/null", &st), 0);
	assert_true(S_ISCHR(st.st_mode));

	assert_int_equal(mkfifo(fifo, 0644), 0);
	/* nobody reads it: an error at once, not a wait */
	alarm(20);
	assert_int_equal(strata_file_write_atomic(fifo, "x", 1, &e), STRATA_E_IO);
	assert_non_null(strstr(e.message, "no process reads it"));
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		char buf[64] = {0};
		int fd = open(fifo, O_RDONLY);
		ssize_t n = read(fd, buf, sizeof buf - 1);
		_exit(n == 6 && !memcmp(buf, "fifo!\n", 6) ? 0 : 1);
	}
	int status = 0, tries = 0;
	strata_status ws;
	/* the reader opens when it gets to it: retry until it has */
	while ((ws = strata_file_write_atomic(fifo, "fifo!\n", 6, &e)) ==
		       STRATA_E_IO &&
	       tries++ < 2000)
		usleep(1000);
	assert_int_equal(ws, STRATA_OK);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	alarm(0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(lstat(fifo, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));

	/* bound by a relative name: sun_path holds 108 bytes */
	int sfd = socket(AF_UNIX, SOCK_STREAM, 0), cwd = open(".", O_RDONLY);
	struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "sock"};
	assert_int_equal(chdir(dir), 0);
	assert_int_equal(bind(sfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(fchdir(cwd), 0);
	close(cwd);
	assert_int_equal(strata_file_check_output(sock, &e), STRATA_E_INVALID_ARG);
	assert_non_null(strstr(e.message, "a socket"));
	assert_int_equal(strata_file_write_atomic(sock, "x", 1, &e),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(lstat(sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	close(sfd);
	assert_int_equal(strata_file_check_output(dir, &e), STRATA_E_INVALID_ARG);
	assert_non_null(strstr(e.message, "a folder"));
	/* a link to a file still to be made: the file is made */
	assert_int_equal(symlink("made", dangling), 0);
	assert_int_equal(strata_file_write_atomic(dangling, "x", 1, &e),
			 STRATA_OK);
	assert_int_equal(lstat(dangling, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	got = read_text(path_of("made"));
	assert_string_equal(got, "x");
	strata_free(got);
	unlink(path_of("made"));
	assert_int_equal(strata_file_check_output(path_of("no/such/x"), &e),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(e.message, "there is no folder"));
	assert_int_equal(strata_file_check_output(real, &e), STRATA_OK);
	assert_true(entries());
	unlink(real), unlink(link_), unlink(fifo), unlink(sock);
	unlink(dangling);
}

/* What the CLI does on SIGTERM: remove the temporary file, then die. */
static void die_cleanly(int sig)
{
	strata_file_abandon_pending();
	signal(sig, SIG_DFL);
	raise(sig);
}

static ssize_t write_then_signal(int fd, const void *b, size_t n)
{
	ssize_t w = write(fd, b, n > 3 ? 3 : n);
	raise(SIGTERM);
	return w;
}

static int no_tmpfile_open(const char *path, int flags, mode_t mode)
{
	if (flags & O_TMPFILE) {
		errno = EOPNOTSUPP;
		return -1;
	}
	return open(path, flags, mode);
}

/* A signal in the middle of the write (with an unnamed temporary file, and
 * with a named one where O_TMPFILE is missing) leaves the old content and
 * no temporary file. */
static void test_write_atomic_signal_leaves_no_temp_file(void **state)
{
	(void)state;
	for (int named = 0; named < 2; named++) {
		reset();
		char *p = path_of("sig.json");
		assert_int_equal(strata_file_write_atomic(p, "old\n", 4, NULL),
				 STRATA_OK);
		fflush(NULL);
		pid_t pid = fork();
		if (pid == 0) {
			signal(SIGTERM, die_cleanly);
			strata_sys.write = write_then_signal;
			if (named)
				strata_sys.open = no_tmpfile_open;
			strata_file_write_atomic(p, "new content", 11, NULL);
			_exit(0);
		}
		int status = 0;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
		char *got = read_text(p);
		assert_string_equal(got, "old\n");
		strata_free(got);
		assert_true(entries());
		unlink(p);
	}
}

/* ------------------------------------------------------------------------ */
/* read_all                                                                 */
/* ------------------------------------------------------------------------ */

static void test_read_all_limits_and_errors(void **state)
{
	(void)state;
	reset();
	close(open_data("ten.txt", "0123456789"));
	char *buf = NULL;
	size_t len = 0;
	strata_error e;
	assert_int_equal(strata_file_read_all(path_of("ten.txt"), 10, &buf, &len, &e),
			 STRATA_OK);
	assert_int_equal(len, 10);
	assert_string_equal(buf, "0123456789");
	strata_free(buf);
	buf = NULL;
	assert_int_not_equal(strata_file_read_all(path_of("ten.txt"), 9, &buf, &len,
						  &e),
			     STRATA_OK);
	assert_non_null(strstr(e.message, "over the 9-byte limit"));
	assert_null(buf);
	assert_int_equal(strata_file_read_all(path_of("missing"), 9, &buf, &len, &e),
			 STRATA_E_NOT_FOUND);
	assert_int_equal(strata_file_read_all(dir, 9, &buf, &len, &e), STRATA_E_IO);
	assert_non_null(strstr(e.message, "not a regular file"));
	/* Allocation failure: E_NOMEM, nothing returned, fd closed. */
	strata_alloc_fail_after(0);
	assert_int_equal(strata_file_read_all(path_of("ten.txt"), 10, &buf, &len, &e),
			 STRATA_E_NOMEM);
	strata_alloc_fail_after(-1);
	assert_null(buf);
	unlink(path_of("ten.txt"));
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "%s/tests/tmp-base-sys-%ld", STRATA_BINARY_DIR,
		 (long)getpid());
	char cmd[8400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
	return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[4300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pread_full_retries_short_reads_and_eintr),
		cmocka_unit_test(test_pread_full_reports_eio),
		cmocka_unit_test(test_pread_full_reports_early_end),
		cmocka_unit_test(test_preadv_full_fills_buffers_in_order),
		cmocka_unit_test(test_write_atomic_survives_eintr_and_short_writes),
		cmocka_unit_test(test_write_atomic_failure_keeps_old_content),
		cmocka_unit_test(test_write_atomic_keeps_what_the_path_names),
		cmocka_unit_test(test_write_atomic_signal_leaves_no_temp_file),
		cmocka_unit_test(test_read_all_limits_and_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
