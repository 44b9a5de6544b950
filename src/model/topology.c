/* topology.c - tensor name -> static role or execution unit {group, unit},
 * and the --exclude globs (layer: model). */
#include <fnmatch.h>
#include <string.h>

#include "strata/topology.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Segments that introduce a unit index: HF `layers`/`blocks`/`h`, GGUF
 * `blk` (DESIGN.md "Parameter topology"). */
static const char *const unit_keywords[] = {"layers", "blocks", "h", "blk"};

static bool segment_is(const char *s, size_t len, const char *word)
{
	return strlen(word) == len && memcmp(s, word, len) == 0;
}

static bool is_unit_keyword(const char *s, size_t len)
{
	for (size_t i = 0; i < sizeof unit_keywords / sizeof *unit_keywords;
	     i++)
		if (segment_is(s, len, unit_keywords[i]))
			return true;
	return false;
}

static bool all_digits(const char *s, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* Parses len decimal digits; false when the value exceeds 2^64-1. */
static bool parse_index(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (!strata_mul_u64(v, 10, &v) ||
		    !strata_add_u64(v, (uint64_t)(s[i] - '0'), &v))
			return false;
	}
	*out = v;
	return true;
}

static size_t segment_len(const char *s)
{
	const char *dot = strchr(s, '.');
	return dot ? (size_t)(dot - s) : strlen(s);
}

/* True when some dot-separated segment of name contains `part`. */
static bool has_segment_containing(const char *name, const char *part)
{
	for (const char *s = name;;) {
		size_t len = segment_len(s);
		size_t plen = strlen(part);
		for (size_t i = 0; plen <= len && i + plen <= len; i++)
			if (memcmp(s + i, part, plen) == 0)
				return true;
		if (s[len] == '\0')
			return false;
		s += len + 1;
	}
}

static bool has_segment(const char *name, const char *word)
{
	for (const char *s = name;;) {
		size_t len = segment_len(s);
		if (segment_is(s, len, word))
			return true;
		if (s[len] == '\0')
			return false;
		s += len + 1;
	}
}

/* The role of a static tensor. Output heads are checked first because
 * GPT-NeoX calls its head `embed_out`; norms before embeddings because
 * `output_norm` is a norm. Anything unrecognised keeps its own name. */
static void static_role(const char *name, strata_owner *o)
{
	const char *role = NULL;
	if (has_segment(name, "lm_head") || has_segment(name, "embed_out") ||
	    has_segment(name, "output"))
		role = "output";
	else if (has_segment_containing(name, "norm") ||
		 has_segment(name, "ln_f"))
		role = "norm";
	else if (has_segment_containing(name, "embed") ||
		 has_segment(name, "wte") || has_segment(name, "wpe") ||
		 has_segment_containing(name, "embd"))
		role = "embedding";
	o->kind = STRATA_OWNER_STATIC;
	o->role = role ? role : name;
	o->role_len = strlen(o->role);
	o->group = NULL;
	o->group_len = 0;
	o->unit = 0;
}

/* ------------------------------------------------------------------------ */
/* Public                                                                   */
/* ------------------------------------------------------------------------ */

const char *strata_owner_kind_name(strata_owner_kind k)
{
	switch (k) {
#define STRATA_OWNER_KIND_CASE(name, text)                                     \
	case STRATA_OWNER_##name:                                              \
		return text;
		STRATA_OWNER_KIND_MAP(STRATA_OWNER_KIND_CASE)
#undef STRATA_OWNER_KIND_CASE
	}
	return "unknown";
}

strata_status strata_topology_owner(const char *name, strata_owner *out,
				    strata_error *err)
{
	if (!name || !name[0])
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give every tensor a non-empty name",
				   "tensor name is empty");
	for (const char *s = name;;) {
		size_t len = segment_len(s);
		if (s[len] == '\0')
			break;
		const char *next = s + len + 1;
		size_t next_len = segment_len(next);
		if (is_unit_keyword(s, len) && all_digits(next, next_len)) {
			uint64_t unit;
			if (!parse_index(next, next_len, &unit)) {
				char shown[128];
				strata_escape(shown, sizeof shown, name,
					      strlen(name));
				return strata_fail(
					err, STRATA_E_OVERFLOW,
					"check the checkpoint is not corrupt; unit indices must be below 2^64",
					"tensor '%s': unit index '%.*s' does not fit in 64 bits",
					shown, (int)(next_len > 40 ? 40 : next_len),
					next);
			}
			strata_owner o = {.kind = STRATA_OWNER_UNIT, .unit = unit};
			if (s == name) { /* `blk.3.x`: the keyword names it */
				o.group = s;
				o.group_len = len;
			} else { /* everything before the keyword's dot */
				o.group = name;
				o.group_len = (size_t)(s - name) - 1;
			}
			*out = o;
			return STRATA_OK;
		}
		s = next;
	}
	strata_owner o;
	static_role(name, &o);
	*out = o;
	return STRATA_OK;
}

bool strata_topology_excluded(const char *name, const char *const *globs,
			      size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fnmatch(globs[i], name, 0) == 0)
			return true;
	return false;
}
