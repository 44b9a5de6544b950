/* test_cpu_experts.c - strata_kernel_experts on the CPU (a mixture-of-
 * experts layer's routed experts at once, issue 22): the same bits as the
 * one-expert-at-a-time kernels forward_moe.c ran before it (gather,
 * gated product, down, scatter-add) on Q8_0, bf16 and Q4_K / Q6_K
 * experts (and f16, f32, Q4_0/Q5_K, a Q8_0 gate with a bf16 down), one
 * row and several (up to the slot's 8), one hit to sixteen, a hit of no
 * rows and rows routed to several hits, on 1 to 3 threads, the CPU's
 * own slot taking those it says it takes (the block types up to 8 rows a
 * hit, the half types one; --precision exact: the half types only) and
 * the composition the others; within 3e-2 of float64 on the decoded
 * weights as a relative rms (the fast precision's 8-bit x: ~9e-3
 * measured, a wrong row or weight is of the order of 1); rows no hit routes to keep their bits;
 * and each bad call named (layer: backend tests). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "backend/experts_fixture.h"
#include "backend/cpu/kernels_internal.h"
#include "strata/backend.h"

#define EXACT_TOL 3e-2

static strata_compute *cpu;
static void *owned[64];
static int owned_count;

static void *put_host(const void *host, uint64_t bytes)
{
	assert_true(owned_count < 64);
	void *p = malloc(bytes ? bytes : 1);
	assert_non_null(p);
	memcpy(p, host, bytes);
	return owned[owned_count++] = p;
}

static void free_owned(void)
{
	while (owned_count)
		free(owned[--owned_count]);
}

static float *scratch_floats(uint64_t n)
{
	float *p = calloc(n ? n : 1, sizeof *p);
	assert_non_null(p);
	return owned[owned_count++] = p;
}

static strata_kernel_experts_scratch scratch_for(const experts_case *c)
{
	const uint64_t rows = c->n;
	return (strata_kernel_experts_scratch){
		scratch_floats(rows * c->dim), scratch_floats(rows * c->ffn),
		scratch_floats(rows * c->ffn), scratch_floats(rows * c->dim)};
}

/* Whether the table's own slot takes the case's hits (else the wrapper
 * composes, and the comparison below compares the composition with
 * itself). */
static bool slot_takes(const experts_case *c, const strata_kernel_expert *e)
{
	return cpu->ops->experts_take &&
	       cpu->ops->experts_take(cpu->ctx, c->n, e, c->count);
}

/* The slot's result and the composition's, bit for bit, and the
 * reference's within EXACT_TOL; `slot`: whether the slot must take it. */
static void check_case(const char *what, experts_case *c, bool slot)
{
	strata_kernel_expert e[EXPERTS_HITS_MAX], e2[EXPERTS_HITS_MAX];
	float *x, *y, *x2, *y2;
	experts_case_place(c, put_host, e, &x, &y);
	experts_case_place(c, put_host, e2, &x2, &y2);
	if (slot_takes(c, e) != slot)
		fail_msg("%s: the cpu slot %s the call", what,
			 slot ? "declines" : "takes");
	strata_kernel_experts_scratch s = scratch_for(c), s2 = scratch_for(c);
	strata_error err;
	assert_int_equal(strata_kernel_experts(cpu, y, x, c->n, e, c->count,
					       &s, &err),
			 STRATA_OK);
	assert_int_equal(experts_compose(cpu, y2, x2, c->n, e2, c->count, &s2,
					 &err),
			 STRATA_OK);
	const uint64_t count = (uint64_t)c->n * c->dim;
	if (memcmp(y, y2, count * sizeof *y))
		fail_msg("%s: the slot's bits are not the composition's", what);
	for (uint32_t r = 0; r < c->n; r++)
		if (!experts_row_routed(c, r) &&
		    memcmp(y + (uint64_t)r * c->dim, c->y0 + (uint64_t)r * c->dim,
			   c->dim * sizeof *y))
			fail_msg("%s: row %u, routed to no hit, changed", what, r);
	double *want = malloc(count * sizeof *want);
	assert_non_null(want);
	experts_reference(c, want);
	double d = experts_change_rms_err(c, y, want);
	print_message("  %-52s vs float64: relative rms %.3g\n", what, d);
	if (!(d <= EXACT_TOL))
		fail_msg("%s: relative rms error %.3g against float64", what, d);
	free(want);
	free_owned();
}

typedef struct routing {
	const char *name;
	uint32_t n, count;
	uint8_t masks[EXPERTS_HITS_MAX];
} routing;

/* decode (one row, top-1 and top-8), a batch of 5 rows over 6 hits (a
 * hit of no rows, row 0 in four hits, row 4 in none), and 8 rows over 16
 * hits (the slot's most rows a hit: every row in hit 2) */
static const routing routings[] = {
	{"1 row, 1 hit", 1, 1, {1}},
	{"1 row, 8 hits", 1, 8, {1, 1, 1, 1, 1, 1, 1, 1}},
	{"5 rows, 6 hits", 5, 6, {0x01, 0x0f, 0x00, 0x05, 0x09, 0x03}},
	{"8 rows, 16 hits", 8, 16,
	 {0x81, 0x42, 0xff, 0x00, 0x18, 0x24, 0x03, 0xc0, 0x10, 0x01, 0x80,
	  0x7e, 0x00, 0x05, 0xa0, 0x11}},
};

static const struct {
	strata_weight_type gate, down;
	uint32_t dim, ffn;
} types[] = {
	{STRATA_WEIGHT_Q8_0, STRATA_WEIGHT_Q8_0, 96, 160},
	{STRATA_WEIGHT_BF16, STRATA_WEIGHT_BF16, 96, 160},
	{STRATA_WEIGHT_F16, STRATA_WEIGHT_F16, 100, 164}, /* tails past 8s */
	{STRATA_WEIGHT_F32, STRATA_WEIGHT_F32, 96, 160},
	{STRATA_WEIGHT_Q4_K, STRATA_WEIGHT_Q6_K, 256, 512},
	{STRATA_WEIGHT_Q8_0, STRATA_WEIGHT_BF16, 96, 160}, /* two paths */
	{STRATA_WEIGHT_Q4_0, STRATA_WEIGHT_Q5_K, 256, 768},
};

/* Every type over every routing on a context of `threads` threads;
 * `exact`: --precision exact, where the block types are declined. */
static void check_types(uint32_t threads, bool exact)
{
	strata_error err;
	strata_compute *keep = cpu;
	const strata_compute_options o = {
		.threads = threads,
		.precision = exact ? STRATA_PRECISION_EXACT
				   : STRATA_PRECISION_FAST};
	assert_int_equal(strata_compute_create_with(&strata_cpu_kernel_ops, &o,
						    &cpu, &err),
			 STRATA_OK);
	for (size_t t = 0; t < sizeof types / sizeof *types; t++)
		for (size_t k = 0; k < sizeof routings / sizeof *routings; k++) {
			experts_case c;
			experts_case_init(&c, types[t].gate, types[t].down,
					  types[t].dim, types[t].ffn,
					  routings[k].n, routings[k].count,
					  routings[k].masks);
			char what[112];
			snprintf(what, sizeof what, "%s/%s, %s, %u thread%s%s",
				 strata_weight_type_name(types[t].gate),
				 strata_weight_type_name(types[t].down),
				 routings[k].name, threads,
				 threads > 1 ? "s" : "", exact ? ", exact" : "");
			bool half = types[t].gate == STRATA_WEIGHT_BF16 ||
				    types[t].gate == STRATA_WEIGHT_F16 ||
				    types[t].gate == STRATA_WEIGHT_F32;
			bool down_half = types[t].down == STRATA_WEIGHT_BF16 ||
					 types[t].down == STRATA_WEIGHT_F32 ||
					 types[t].down == STRATA_WEIGHT_F16;
			/* half types: one row a hit (decode) */
			bool one = routings[k].n == 1;
			bool slot = strata__cpu_decode_usable() &&
				    (!exact || (half && down_half)) &&
				    (one || (!half && !down_half));
			check_case(what, &c, slot);
			experts_case_fini(&c);
		}
	strata_compute_destroy(cpu);
	cpu = keep;
}

static void test_experts_cpu_same_bits_as_one_at_a_time(void **state)
{
	(void)state;
	for (uint32_t threads = 1; threads <= 3; threads++)
		check_types(threads, false);
}

static void test_experts_cpu_exact_keeps_block_types_composed(void **state)
{
	(void)state;
	check_types(2, true);
}

/* A hit of more rows than the slot takes (a prompt's): composed, the
 * same bits as one expert at a time by construction. */
static void test_experts_cpu_declines_many_rows(void **state)
{
	(void)state;
	const uint8_t masks[] = {0xff, 0x01};
	experts_case c;
	experts_case_init(&c, STRATA_WEIGHT_Q8_0, STRATA_WEIGHT_Q8_0, 64, 96, 8,
			  2, masks);
	strata_kernel_expert e[EXPERTS_HITS_MAX];
	float *x, *y;
	experts_case_place(&c, put_host, e, &x, &y);
	assert_true(slot_takes(&c, e));
	e[0].m = STRATA__CPU_EXPERTS_ROWS + 1; /* only asked, never run */
	assert_false(slot_takes(&c, e));
	free_owned();
	experts_case_fini(&c);
}

static void expect_invalid(const char *what, strata_status st,
			   const strata_error *err, const char *needle)
{
	if (st != STRATA_E_INVALID_ARG || !strstr(err->message, needle))
		fail_msg("%s: status %d, message '%s' (wanted '%s')", what,
			 (int)st, st ? err->message : "", needle);
}

static void test_experts_rejects_bad_calls(void **state)
{
	(void)state;
	const uint8_t masks[] = {0x03, 0x02};
	experts_case c;
	experts_case_init(&c, STRATA_WEIGHT_Q8_0, STRATA_WEIGHT_Q8_0, 64, 64, 3,
			  2, masks);
	strata_kernel_expert e[EXPERTS_HITS_MAX];
	float *x, *y;
	experts_case_place(&c, put_host, e, &x, &y);
	strata_kernel_experts_scratch s = scratch_for(&c);
	strata_error err;
	expect_invalid("y is x", strata_kernel_experts(cpu, x, x, 3, e, 2, &s,
						       &err),
		       &err, "aliased");
	/* the composition's buffers: where the slot declines (Q8_0 under
	 * --precision exact) */
	strata_compute *exact = NULL;
	const strata_compute_options o = {.threads = 2,
					  .precision = STRATA_PRECISION_EXACT};
	assert_int_equal(strata_compute_create_with(&strata_cpu_kernel_ops, &o,
						    &exact, &err),
			 STRATA_OK);
	expect_invalid("no buffers", strata_kernel_experts(exact, y, x, 3, e,
							   2, NULL, &err),
		       &err, "no buffers");
	strata_compute_destroy(exact);
	int32_t bad_rows[2] = {0, 3};
	e[0].rows = bad_rows;
	expect_invalid("row 3 of 3", strata_kernel_experts(cpu, y, x, 3, e, 2,
							   &s, &err),
		       &err, "hit 0: row 3 at 1");
	int32_t down_rows[2] = {1, 1};
	e[0].rows = down_rows;
	expect_invalid("a repeated row in one hit",
		       strata_kernel_experts(cpu, y, x, 3, e, 2, &s, &err),
		       &err, "not above the one before");
	e[0].rows = c.rows[0];
	e[1].down.cols = 32;
	expect_invalid("a down of another shape",
		       strata_kernel_experts(cpu, y, x, 3, e, 2, &s, &err),
		       &err, "hit 1");
	e[1].down.cols = 64;
	e[1].m = 4;
	expect_invalid("more rows than x's", strata_kernel_experts(cpu, y, x, 3,
								   e, 2, &s,
								   &err),
		       &err, "4 rows of x's 3");
	e[1].m = c.m[1];
	/* nothing changed y on the way: every call failed before a kernel */
	assert_memory_equal(y, c.y0, (size_t)3 * 64 * sizeof *y);
	assert_int_equal(strata_kernel_experts(cpu, y, x, 3, e, 0, &s, &err),
			 STRATA_OK); /* no hits: nothing to do */
	assert_memory_equal(y, c.y0, (size_t)3 * 64 * sizeof *y);
	free_owned();
	experts_case_fini(&c);
}

static int setup(void **state)
{
	(void)state;
	strata_error err;
	return strata_compute_create(&strata_cpu_kernel_ops, 2, &cpu, &err) ==
			       STRATA_OK
		       ? 0
		       : -1;
}

static int teardown(void **state)
{
	(void)state;
	strata_compute_destroy(cpu);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_experts_cpu_same_bits_as_one_at_a_time),
		cmocka_unit_test(test_experts_cpu_exact_keeps_block_types_composed),
		cmocka_unit_test(test_experts_cpu_declines_many_rows),
		cmocka_unit_test(test_experts_rejects_bad_calls),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
