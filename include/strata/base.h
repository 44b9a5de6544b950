/* base.h - errors, checked arithmetic, allocation, sizes, JSON writing,
 * system calls and progress display (layer: base).
 *
 * Every other layer builds on these. Nothing here prints on its own except
 * the explicitly stderr-facing helpers at the end, which only the CLI uses.
 */
#ifndef STRATA_BASE_H
#define STRATA_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "strata/status.h"

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

#define STRATA_ERROR_MESSAGE_BYTES 512
#define STRATA_ERROR_FIX_BYTES 256

/* What went wrong and how to fix it. Fixed buffers, so making an error never
 * allocates; longer text is truncated. */
typedef struct strata_error {
	strata_status code;
	char message[STRATA_ERROR_MESSAGE_BYTES];
	char fix[STRATA_ERROR_FIX_BYTES];
} strata_error;

/* The constant name of a code ("E_NOMEM") and its short meaning; both return
 * "unknown" for a value outside the map. */
const char *strata_status_name(strata_status code);
const char *strata_status_text(strata_status code);

/* Clears err to STRATA_OK with empty text. err may be NULL. */
void strata_error_clear(strata_error *err);

/* Fills err (which may be NULL) with code, a printf-style message and a
 * plain fix line, and returns code so callers can `return strata_fail(...)`. */
strata_status strata_fail(strata_error *err, strata_status code,
			  const char *fix, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Replaces err's fix with a printf-style line; returns err->code. */
strata_status strata_error_set_fix(strata_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prefixes err's message with "CONTEXT: " (printf-style), keeping code and
 * fix, to say where a lower-level failure happened; returns err->code. */
strata_status strata_error_prefix(strata_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Copies bytes into dst (cap bytes) for printing in a message: printable
 * ASCII as is, everything else as \xNN; truncated with "..." when long.
 * Returns dst. Untrusted names must go through this before printing. */
char *strata_escape(char *dst, size_t cap, const void *bytes, size_t len);

/* ------------------------------------------------------------------------ */
/* Checked arithmetic                                                       */
/* ------------------------------------------------------------------------ */

/* Return false on overflow, leaving *out unchanged. */
static inline bool strata_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	uint64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return false;
	*out = r;
	return true;
}

static inline bool strata_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	uint64_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return false;
	*out = r;
	return true;
}

/* Saturating add for counters that must never wrap. */
static inline uint64_t strata_sat_add_u64(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Checked add/multiply that fill err with E_OVERFLOW naming `what` (the sum
 * or product, e.g. "static bytes") and both operands. */
strata_status strata_checked_add(uint64_t a, uint64_t b, uint64_t *out,
				 const char *what, strata_error *err);
strata_status strata_checked_mul(uint64_t a, uint64_t b, uint64_t *out,
				 const char *what, strata_error *err);

/* The one alignment of strata's buffers: every block an arena hands out,
 * every tensor slot and buffer the plan sizes and every run of the prefix
 * pool starts on and is rounded up to this many bytes, so the plan's sizes
 * and the runtime's blocks round alike. (File formats keep their own: GGUF
 * data alignment, O_DIRECT's block size.) */
#define STRATA_ALIGN 256u

/* bytes rounded up to STRATA_ALIGN; E_OVERFLOW naming `what` when the
 * rounded value does not fit in 64 bits. */
strata_status strata_checked_align(uint64_t bytes, uint64_t *out,
				   const char *what, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Allocation                                                               */
/* ------------------------------------------------------------------------ */

/* All library allocation goes through these. They return NULL on failure
 * (never abort); strata_alloc(0) returns a unique non-NULL pointer. */
void *strata_alloc(size_t bytes);
void *strata_calloc(size_t count, size_t size); /* checked product, zeroed */
void *strata_realloc(void *ptr, size_t bytes);	/* NULL: ptr unchanged */
void *strata_alloc_aligned(size_t alignment, size_t bytes);
char *strata_strdup(const char *s);
char *strata_strndup(const char *s, size_t n);
void strata_free(void *ptr); /* NULL is fine */

/* Like the above but fill err with E_NOMEM naming `what` and the bytes. */
void *strata_alloc_or_error(size_t bytes, const char *what, strata_error *err);
void *strata_calloc_or_error(size_t count, size_t size, const char *what,
			     strata_error *err);

/* Test hook: after n more successful allocations, every allocation fails
 * until the hook is reset with n < 0 (the default). Thread-safe. Tests loop
 * n = 0, 1, 2 ... until the operation succeeds (SQLite faultsim). */
void strata_alloc_fail_after(long n);
/* Allocations that failed by injection since the last reset. */
uint64_t strata_alloc_injected_failures(void);

/* Grows *buf (element size elem) to hold at least need elements, doubling.
 * On failure *buf and *cap are unchanged and E_NOMEM is returned. */
strata_status strata_grow(void **buf, size_t *cap, size_t need, size_t elem,
			  const char *what, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Sizes: "2GiB", "1.5GB", "4096"                                           */
/* ------------------------------------------------------------------------ */

/* Parses bytes or a decimal number with an optional unit, optionally after
 * one space: B, KiB MiB GiB TiB PiB EiB (binary), KB MB GB TB PB EB
 * (decimal); case of the unit is not significant, and a lone "k"/"m"/"g"
 * is refused as ambiguous. A fraction (at most 18 digits, needs a unit
 * above B) rounds down to whole bytes, exactly. Rejects empty, negative,
 * garbage and overflow past 2^64-1 with E_SIZE_SYNTAX / E_OVERFLOW naming
 * the text. */
strata_status strata_size_parse(const char *text, uint64_t *out,
				strata_error *err);

/* Human form with binary units and two decimals ("7.50 GiB", "512 B").
 * Returns buf; cap of 32 always suffices. */
char *strata_size_format(uint64_t bytes, char *buf, size_t cap);

/* ------------------------------------------------------------------------ */
/* JSON writer                                                              */
/* ------------------------------------------------------------------------ */

/* A streaming writer into a growable buffer: exact u64/i64 (no detour through
 * double), RFC 8259 string escaping, pretty printing. The first failure
 * (allocation, misuse) sticks and is reported by strata_json_finish, so
 * callers can write a whole document and check once. Misuse is: a key
 * outside an object or twice in a row, a value in an object without its
 * key, a close that does not match the open, a second top-level value,
 * nesting deeper than 64. Strings are copied as bytes (escaping only what
 * RFC 8259 requires); callers pass UTF-8. */
typedef struct strata_json {
	char *buf;
	size_t len, cap;
	int depth;
	bool need_comma[64];
	bool is_object[64]; /* per open level: object (keys) or array */
	bool after_key;
	bool root_started; /* a document holds exactly one top-level value */
	bool pretty;
	strata_status status;
} strata_json;

void strata_json_init(strata_json *j, bool pretty);
void strata_json_fini(strata_json *j); /* frees the buffer */
void strata_json_object_begin(strata_json *j);
void strata_json_object_end(strata_json *j);
void strata_json_array_begin(strata_json *j);
void strata_json_array_end(strata_json *j);
void strata_json_key(strata_json *j, const char *key);
void strata_json_string(strata_json *j, const char *s);
void strata_json_string_n(strata_json *j, const char *s, size_t n);
void strata_json_u64(strata_json *j, uint64_t v);
void strata_json_i64(strata_json *j, int64_t v);
void strata_json_double(strata_json *j, double v); /* non-finite -> null */
void strata_json_bool(strata_json *j, bool v);
void strata_json_null(strata_json *j);
/* Key-value shorthands. */
void strata_json_kv_string(strata_json *j, const char *k, const char *v);
void strata_json_kv_u64(strata_json *j, const char *k, uint64_t v);
void strata_json_kv_double(strata_json *j, const char *k, double v);
void strata_json_kv_bool(strata_json *j, const char *k, bool v);
/* Checks the document is complete and well nested; on success the text is
 * j->buf (NUL-terminated, j->len bytes, a trailing newline added). */
strata_status strata_json_finish(strata_json *j, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Files and system calls                                                   */
/* ------------------------------------------------------------------------ */

/* The system calls strata's I/O goes through. Tests replace entries to inject
 * short reads, EINTR, EIO (SQLite aSyscall). Restore with
 * strata_sys_reset(). Not thread-safe to change while I/O is running. */
struct stat;
struct iovec;
typedef struct strata_sys_table {
	int (*open)(const char *path, int flags, mode_t mode);
	ssize_t (*pread)(int fd, void *buf, size_t count, off_t offset);
	/* a test that replaces pread alone sees scatter reads through it */
	ssize_t (*preadv)(int fd, const struct iovec *iov, int iovcnt,
			  off_t offset);
	ssize_t (*write)(int fd, const void *buf, size_t count);
	int (*close)(int fd);
	int (*fstat)(int fd, struct stat *st);
} strata_sys_table;

extern strata_sys_table strata_sys;
void strata_sys_reset(void);

/* Reads exactly count bytes at offset, retrying EINTR and short reads; a
 * read that ends early is E_IO naming `path` and the offsets. */
strata_status strata_pread_full(int fd, void *buf, size_t count, off_t offset,
				const char *path, strata_error *err);

/* Reads the buffers iov[0..iovcnt) (at most STRATA_PREADV_MAX) from the
 * file's bytes starting at offset, in order, with as few calls as the
 * kernel allows, retrying EINTR and short reads; a read that ends early is
 * E_IO naming `path`. iov itself is not changed. */
#define STRATA_PREADV_MAX 64
strata_status strata_preadv_full(int fd, const struct iovec *iov, int iovcnt,
				 off_t offset, const char *path,
				 strata_error *err);

/* Opens path for reading (O_RDONLY | O_CLOEXEC | flags) only if it is a
 * regular file, with *st its fstat. The open itself never blocks: a FIFO,
 * device, socket or folder is E_IO naming what it is, and a FIFO with no
 * writer is refused at once instead of waiting for one. E_NOT_FOUND for a
 * missing file. The caller closes *fd. */
strata_status strata_file_open_regular(const char *path, int flags, int *fd,
				       struct stat *st, strata_error *err);

/* Reads a whole file (at most max_bytes) into a NUL-terminated buffer that
 * the caller frees with strata_free. */
strata_status strata_file_read_all(const char *path, uint64_t max_bytes,
				   char **out, size_t *out_len,
				   strata_error *err);

/* Writes data to path. A new or regular file is written through a
 * temporary file (unnamed while written where the file system allows,
 * fsynced) and renamed over it, so the path holds either the old content or
 * all of the new: never a partial write, and no temporary file left by a
 * signal (see strata_file_abandon_pending). What the path names decides the
 * rest: a symbolic link stays and the file it names is replaced; a FIFO or
 * character device (/dev/null) is opened and written, never replaced (a FIFO
 * nobody reads is E_IO, not a wait); a path naming the process's own stdout
 * or stderr (/dev/stdout) is written through that stream; a socket, block
 * device, folder or link to a missing file is E_INVALID_ARG. */
strata_status strata_file_write_atomic(const char *path, const void *data,
				       size_t len, strata_error *err);

/* A file written in pieces with strata_file_write_atomic's guarantee: PATH
 * holds its old content (or nothing) until commit renames the finished,
 * fsynced temporary file over it. open takes a new or regular file (a
 * link is followed); a device, FIFO or stream is E_INVALID_ARG, a missing
 * folder too. commit and abort free f; abort (NULL is fine) removes the
 * temporary file and leaves PATH as it was. One at a time per process
 * (the signal handler knows one temporary file). */
typedef struct strata_file_out strata_file_out;
strata_status strata_file_out_open(const char *path, strata_file_out **out,
				   strata_error *err);
/* A failed write (E_IO, disk full) leaves f for strata_file_out_abort. */
strata_status strata_file_out_write(strata_file_out *f, const void *data,
				    size_t len, strata_error *err);
/* Always frees f; on an error PATH is as it was and nothing is left. */
strata_status strata_file_out_commit(strata_file_out *f, strata_error *err);
void strata_file_out_abort(strata_file_out *f);

/* The checks strata_file_write_atomic makes of path before it writes, so a
 * command can refuse an output it could never write before it runs. */
strata_status strata_file_check_output(const char *path, strata_error *err);

/* Removes the temporary file of a strata_file_write_atomic in progress, if
 * it has a name yet. Async-signal-safe: for a signal handler that then ends
 * the process (the CLI's, for SIGINT, SIGTERM and SIGHUP). */
void strata_file_abandon_pending(void);

/* Monotonic clock in nanoseconds. */
uint64_t strata_now_ns(void);

/* Whether s ends with suffix ("model.gguf", ".gguf"). */
bool strata_str_ends_with(const char *s, const char *suffix);

/* A seed that differs from run to run (the kernel's random source), for a
 * run given no --seed; the run prints it so it can be repeated. */
uint64_t strata_random_seed(void);

/* ------------------------------------------------------------------------ */
/* Command-line facing output (used by the CLI, never by library code)      */
/* ------------------------------------------------------------------------ */

/* Prints "strata: error: WHAT" and "  fix: HOW" to f. */
void strata_error_print(FILE *f, const strata_error *err);

/* A one-line progress display on a terminal; silent when f is NULL or not
 * a tty. After init a caller may set `bytes` (done and total shown as
 * sizes, 1.2 GiB) and `delay_ns` (nothing drawn until that long after init,
 * so a short task shows no bar; finish then ends the line only if one was
 * drawn). */
typedef struct strata_progress {
	FILE *f;
	bool tty;
	bool bytes;
	bool drawn;
	const char *label;
	uint64_t total, done;
	uint64_t start_ns, last_draw_ns, delay_ns;
} strata_progress;

void strata_progress_init(strata_progress *p, FILE *f, const char *label,
			  uint64_t total);
void strata_progress_update(strata_progress *p, uint64_t done);
void strata_progress_finish(strata_progress *p);

/* ------------------------------------------------------------------------ */
/* Weight block formats                                                     */
/* ------------------------------------------------------------------------ */

/* The element formats strata computes on as stored: the float types and
 * ggml's block types (name, elements per block, bytes per block), as ggml
 * defines them. The checkpoint layer maps its tensor types onto these; the
 * backend's products read them. */
#define STRATA_BLOCK_MAP(X)                                                    \
	X(F32, 1, 4)                                                           \
	X(F16, 1, 2)                                                           \
	X(BF16, 1, 2)                                                          \
	X(Q8_0, 32, 34)                                                        \
	X(Q4_0, 32, 18)                                                        \
	X(Q4_1, 32, 20)                                                        \
	X(Q5_0, 32, 22)                                                        \
	X(Q5_1, 32, 24)                                                        \
	X(Q2_K, 256, 84)                                                       \
	X(Q3_K, 256, 110)                                                      \
	X(Q4_K, 256, 144)                                                      \
	X(Q5_K, 256, 176)                                                      \
	X(Q6_K, 256, 210)                                                      \
	X(IQ4_NL, 32, 18)                                                      \
	X(IQ4_XS, 256, 136)

typedef enum strata_block_type {
#define STRATA_BLOCK_ENUM(name, be, bb) STRATA_BLOCK_##name,
	STRATA_BLOCK_MAP(STRATA_BLOCK_ENUM)
#undef STRATA_BLOCK_ENUM
	STRATA_BLOCK_COUNT
} strata_block_type;

/* Sentinel of strata_block_decode: every block was finite. */
#define STRATA_BLOCK_ALL_FINITE UINT64_MAX

/* Name ("Q4_K"), elements and bytes per block of t; NULL / 0 outside the
 * map. */
const char *strata_block_name(strata_block_type t);
uint32_t strata_block_elements(strata_block_type t);
uint32_t strata_block_bytes(strata_block_type t);

/* Decodes `elements` elements of type t (a whole number of blocks, which
 * the caller checks) from src (little-endian file bytes, any alignment)
 * into dst, bit-exact against gguf-py's reference dequantizer (each
 * sub-block factor rounded to f32 first, then one product, and one
 * difference for the types with a min). Returns the index of the first
 * block whose factors or values are NaN or infinite (its output is written
 * anyway), or STRATA_BLOCK_ALL_FINITE; 0 and nothing written for a t
 * outside the map. */
uint64_t strata_block_decode(strata_block_type t, const void *src, float *dst,
			     uint64_t elements);

/* Encodes `elements` finite values at src (a whole number of blocks of t,
 * which the caller checks) into dst in type t, with the project's own
 * quantizers (docs/quantize.md): F32 exactly, F16/BF16 rounded to nearest
 * even, Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 by the format's defined rounding (the
 * bytes llama.cpp writes), the K types, IQ4_NL and IQ4_XS by a search for
 * the scales that minimise the squared error of the decoded block. Returns
 * STRATA_BLOCK_ALL_FINITE, or the index of the first NaN or infinite
 * element of src (nothing written); 0 and nothing written for a t outside
 * the map. Finite values too large for a type's f16 scale decode as
 * infinity: callers check the decode (strata_block_decode). */
uint64_t strata_block_encode(strata_block_type t, const float *src, void *dst,
			     uint64_t elements);

/* strata_block_decode's verdict without decoding: the index of the first
 * block of `elements` elements of type t at src whose values are not all
 * finite (read from its factors' bits; an element for the float types),
 * or STRATA_BLOCK_ALL_FINITE; 0 for a t outside the map. Fast enough to
 * run on every weight read. */
uint64_t strata_block_first_nonfinite(strata_block_type t, const void *src,
				      uint64_t elements);

#endif
