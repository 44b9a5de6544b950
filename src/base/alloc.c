/* alloc.c - fallible allocation with an injectable failure hook
 * (layer: base). Library code allocates only through these. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "strata/base.h"

/* Remaining successful allocations before injected failure; < 0: off. */
static atomic_long fail_after = -1;
static atomic_ullong injected_failures;

/* ------------------------------------------------------------------------ */

static bool inject_failure(void)
{
	long n = atomic_load(&fail_after);
	while (n >= 0) {
		if (n == 0) {
			atomic_fetch_add(&injected_failures, 1);
			return true;
		}
		if (atomic_compare_exchange_weak(&fail_after, &n, n - 1))
			return false;
	}
	return false;
}

/* ------------------------------------------------------------------------ */

void strata_alloc_fail_after(long n)
{
	atomic_store(&fail_after, n < 0 ? -1 : n);
	atomic_store(&injected_failures, 0);
}

uint64_t strata_alloc_injected_failures(void)
{
	return atomic_load(&injected_failures);
}

void *strata_alloc(size_t bytes)
{
	if (inject_failure())
		return NULL;
	return malloc(bytes ? bytes : 1);
}

void *strata_calloc(size_t count, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(count, size, &total))
		return NULL;
	if (inject_failure())
		return NULL;
	return calloc(total ? total : 1, 1);
}

void *strata_realloc(void *ptr, size_t bytes)
{
	if (inject_failure())
		return NULL;
	return realloc(ptr, bytes ? bytes : 1);
}

void *strata_alloc_aligned(size_t alignment, size_t bytes)
{
	if (alignment < sizeof(void *) || (alignment & (alignment - 1)))
		return NULL;
	if (inject_failure())
		return NULL;
	void *p = NULL;
	if (posix_memalign(&p, alignment, bytes ? bytes : alignment) != 0)
		return NULL;
	return p;
}

char *strata_strndup(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *d = strata_alloc(len + 1);
	if (!d)
		return NULL;
	memcpy(d, s, len);
	d[len] = '\0';
	return d;
}

char *strata_strdup(const char *s)
{
	return strata_strndup(s, strlen(s));
}

void strata_free(void *ptr)
{
	free(ptr);
}

void *strata_alloc_or_error(size_t bytes, const char *what, strata_error *err)
{
	void *p = strata_alloc(bytes);
	if (!p)
		strata_fail(err, STRATA_E_NOMEM,
			    "free host memory or lower the sizes asked for",
			    "cannot allocate %zu bytes for %s", bytes, what);
	return p;
}

void *strata_calloc_or_error(size_t count, size_t size, const char *what,
			     strata_error *err)
{
	void *p = strata_calloc(count, size);
	if (!p)
		strata_fail(err, STRATA_E_NOMEM,
			    "free host memory or lower the sizes asked for",
			    "cannot allocate %zu x %zu bytes for %s", count, size,
			    what);
	return p;
}

strata_status strata_grow(void **buf, size_t *cap, size_t need, size_t elem,
			  const char *what, strata_error *err)
{
	if (need <= *cap)
		return STRATA_OK;
	size_t ncap = *cap ? *cap : 8;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return strata_fail(err, STRATA_E_OVERFLOW,
					   "the input is too large",
					   "%s cannot grow to %zu elements", what,
					   need);
		ncap *= 2;
	}
	size_t bytes;
	if (__builtin_mul_overflow(ncap, elem, &bytes))
		return strata_fail(err, STRATA_E_OVERFLOW, "the input is too large",
				   "%s cannot grow to %zu elements", what, need);
	void *p = strata_realloc(*buf, bytes);
	if (!p)
		return strata_fail(err, STRATA_E_NOMEM,
				   "free host memory or lower the sizes asked for",
				   "cannot grow %s to %zu bytes", what, bytes);
	*buf = p;
	*cap = ncap;
	return STRATA_OK;
}
