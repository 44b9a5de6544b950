/* line.c - parsing one `strata shard` input line, KEY<TAB>COST
 * (layer: shard).
 *
 * Trust: the line is untrusted input from stdin. Any bytes are accepted
 * and either parsed or refused with E_SHARD_INPUT; nothing is read past
 * `len` and nothing is allocated.
 */
#include <inttypes.h>
#include <string.h>

#include "strata/shard.h"

#define LINE_FIX                                                               \
	"write each item as KEY<TAB>COST, COST a whole number from 0 to "     \
	"18446744073709551615"

static strata_status bad_cost(strata_error *err, uint64_t line_number,
			      const char *cost, size_t n, const char *why)
{
	char shown[64];
	strata_escape(shown, sizeof shown, cost, n);
	return strata_fail(err, STRATA_E_SHARD_INPUT, LINE_FIX,
			   "line %" PRIu64 ": cost '%s' %s", line_number, shown,
			   why);
}

strata_status strata_shard_parse_line(const char *line, size_t len,
				      uint64_t line_number, size_t *key_bytes,
				      uint64_t *cost, strata_error *err)
{
	/* CRLF input: a cost never ends in '\r', so dropping one is safe. */
	if (len > 0 && line[len - 1] == '\r')
		len--;
	const char *tab = len ? memrchr(line, '\t', len) : NULL;
	if (!tab)
		return strata_fail(err, STRATA_E_SHARD_INPUT, LINE_FIX,
				   "line %" PRIu64
				   ": no tab between KEY and COST%s",
				   line_number, len ? "" : " (the line is empty)");
	const char *c = tab + 1;
	size_t n = (size_t)(line + len - c);
	if (n == 0)
		return strata_fail(err, STRATA_E_SHARD_INPUT, LINE_FIX,
				   "line %" PRIu64 ": the cost after the last tab is empty",
				   line_number);
	if (c[0] == '-')
		return bad_cost(err, line_number, c, n, "is negative");
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)c[i];
		if (ch < '0' || ch > '9')
			return bad_cost(err, line_number, c, n,
					"is not a whole number (digits only)");
		if (!strata_mul_u64(v, 10, &v) ||
		    !strata_add_u64(v, ch - '0', &v)) {
			/* Keep scanning: a non-digit later is the better error. */
			for (size_t k = i + 1; k < n; k++)
				if (c[k] < '0' || c[k] > '9')
					return bad_cost(err, line_number, c, n,
							"is not a whole number (digits only)");
			return bad_cost(err, line_number, c, n,
					"is larger than 18446744073709551615 (2^64-1)");
		}
	}
	*key_bytes = (size_t)(tab - line);
	*cost = v;
	return STRATA_OK;
}
