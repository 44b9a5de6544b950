/* size.c - parse and format byte sizes such as "2GiB", "1.5GB", "4096"
 * (layer: base). */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "strata/base.h"

typedef struct unit {
	const char *name;
	uint64_t multiplier;
} unit;

static const unit units[] = {
	{"", 1},
	{"B", 1},
	{"KiB", 1ull << 10},
	{"MiB", 1ull << 20},
	{"GiB", 1ull << 30},
	{"TiB", 1ull << 40},
	{"PiB", 1ull << 50},
	{"EiB", 1ull << 60},
	{"KB", 1000ull},
	{"MB", 1000ull * 1000},
	{"GB", 1000ull * 1000 * 1000},
	{"TB", 1000ull * 1000 * 1000 * 1000},
	{"PB", 1000ull * 1000 * 1000 * 1000 * 1000},
	{"EB", 1000ull * 1000 * 1000 * 1000 * 1000 * 1000},
};

/* Fraction digits kept exactly: 10^18 * 2^60 still fits in 128 bits. */
#define MAX_FRACTION_DIGITS 18

#define SIZE_FIX "write a whole number of bytes or a number with a unit: 4096, 2GiB, 1.5GB (units B KiB MiB GiB TiB PiB EiB KB MB GB TB PB EB)"

/* ------------------------------------------------------------------------ */

static strata_status syntax(strata_error *err, const char *text,
			    const char *why)
{
	char shown[96];
	strata_escape(shown, sizeof shown, text, strlen(text));
	return strata_fail(err, STRATA_E_SIZE_SYNTAX, SIZE_FIX,
			   "'%s' is not a size: %s", shown, why);
}

static const unit *find_unit(const char *s)
{
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (strcasecmp(s, units[i].name) == 0)
			return &units[i];
	return NULL;
}

/* ------------------------------------------------------------------------ */

strata_status strata_size_parse(const char *text, uint64_t *out,
				strata_error *err)
{
	const char *p = text;
	if (!text || !*text)
		return syntax(err, text ? text : "", "it is empty");
	if (*p == '-')
		return syntax(err, text, "sizes cannot be negative");
	if (*p == '+')
		return syntax(err, text, "write the number without a sign");
	if (!isdigit((unsigned char)*p))
		return syntax(err, text, "it does not start with a digit");

	unsigned __int128 whole = 0, frac = 0, frac_scale = 1;
	for (; isdigit((unsigned char)*p); p++) {
		whole = whole * 10 + (unsigned)(*p - '0');
		if (whole > UINT64_MAX)
			goto overflow;
	}
	bool has_frac = false;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return syntax(err, text, "a digit must follow the point");
		for (int digits = 0; isdigit((unsigned char)*p); p++) {
			/* Dropping digits would round wrongly for the large
			 * units, so refuse them rather than guess. */
			if (++digits > MAX_FRACTION_DIGITS)
				return syntax(err, text,
					      "at most 18 digits may follow the point");
			has_frac = true;
			frac = frac * 10 + (unsigned)(*p - '0');
			frac_scale *= 10;
		}
	}
	if (*p == ' ')
		p++;
	const unit *u = find_unit(p);
	if (!u)
		return syntax(err, text,
			      "unknown unit (use B KiB MiB GiB TiB PiB EiB KB MB GB TB PB EB)");
	if (has_frac && u->multiplier == 1)
		return syntax(err, text, "a byte count must be whole");
	unsigned __int128 total = whole * u->multiplier +
				  frac * u->multiplier / frac_scale;
	if (total > UINT64_MAX)
		goto overflow;
	*out = (uint64_t)total;
	return STRATA_OK;

overflow: {
	char shown[96];
	strata_escape(shown, sizeof shown, text, strlen(text));
	return strata_fail(err, STRATA_E_OVERFLOW,
			   "sizes must be below 16 EiB (2^64 bytes)",
			   "size '%s' does not fit in 64 bits", shown);
}
}

char *strata_size_format(uint64_t bytes, char *buf, size_t cap)
{
	static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB",
				      "EiB"};
	if (bytes < 1024) {
		snprintf(buf, cap, "%" PRIu64 " B", bytes);
		return buf;
	}
	int i = 0;
	double v = (double)bytes;
	while (v >= 1024.0 && i < 6) {
		v /= 1024.0;
		i++;
	}
	snprintf(buf, cap, "%.2f %s", v, names[i]);
	return buf;
}
