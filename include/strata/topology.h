/* topology.h - who owns each tensor: a static role or an execution unit
 * {group, unit}, and which tensors live in independent storage (layer:
 * model).
 *
 * The rule (DESIGN.md "Parameter topology"): the first dot-separated segment
 * `layers`, `blocks`, `h` or `blk` followed by a decimal segment N makes the
 * tensor unit N of the group named by everything before that keyword
 * (`model.layers.3.mlp.up_proj.weight` -> group "model", unit 3). With
 * nothing before the keyword the keyword itself names the group
 * (`blk.0.attn_q.weight` -> group "blk"). Everything else is static, with a
 * role from its name. Unit indices are full u64: `layers.18446744073709551615`
 * is a valid index; a longer number is an error, never wrapped.
 *
 * Trust: names come from checkpoint headers and are hostile; nothing here
 * allocates, and the results point into the caller's name.
 */
#ifndef STRATA_TOPOLOGY_H
#define STRATA_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/base.h"

/* X(NAME, "text"): how a tensor is held while a model runs. */
#define STRATA_OWNER_KIND_MAP(X)                                               \
	X(STATIC, "static")                                                    \
	X(UNIT, "unit")

typedef enum strata_owner_kind {
#define STRATA_OWNER_KIND_ENUM(name, text) STRATA_OWNER_##name,
	STRATA_OWNER_KIND_MAP(STRATA_OWNER_KIND_ENUM)
#undef STRATA_OWNER_KIND_ENUM
} strata_owner_kind;

/* The owner of one tensor. Strings are NOT NUL-terminated: they are
 * (pointer, length) views into the name given to strata_topology_owner, or
 * into constant storage for the fixed roles, and live as long as those. */
typedef struct strata_owner {
	strata_owner_kind kind;
	/* STATIC: "embedding", "output", "norm", or the whole name. */
	const char *role;
	size_t role_len;
	/* UNIT: the group ("model", "model.vision_tower", "blk") and index. */
	const char *group;
	size_t group_len;
	uint64_t unit;
} strata_owner;

/* "static" / "unit"; "unknown" outside the enum. */
const char *strata_owner_kind_name(strata_owner_kind k);

/* Classifies `name` (NUL-terminated). On success *out points into name.
 * Errors: E_INVALID_ARG for a NULL or empty name; E_OVERFLOW when a unit
 * index does not fit in 64 bits (the message names the tensor). *out is
 * unchanged on error. */
strata_status strata_topology_owner(const char *name, strata_owner *out,
				    strata_error *err);

/* True when name matches one of the n fnmatch(3) globs (flags 0, so `*`
 * also matches dots): such tensors are held in independent storage and are
 * never sized (DESIGN.md "--exclude"). */
bool strata_topology_excluded(const char *name, const char *const *globs,
			      size_t n);

#endif
