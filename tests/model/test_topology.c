/* test_topology.c - tensor names to static roles and execution units, and
 * --exclude globs (DESIGN.md "Parameter topology"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/topology.h"

static void expect_unit(const char *name, const char *group, uint64_t unit)
{
	strata_owner o;
	strata_error err;
	assert_int_equal(strata_topology_owner(name, &o, &err), STRATA_OK);
	assert_int_equal(o.kind, STRATA_OWNER_UNIT);
	assert_int_equal(o.group_len, strlen(group));
	assert_memory_equal(o.group, group, o.group_len);
	assert_true(o.unit == unit);
}

static void expect_static(const char *name, const char *role)
{
	strata_owner o;
	strata_error err;
	assert_int_equal(strata_topology_owner(name, &o, &err), STRATA_OK);
	assert_int_equal(o.kind, STRATA_OWNER_STATIC);
	assert_int_equal(o.role_len, strlen(role));
	assert_memory_equal(o.role, role, o.role_len);
}

static void hf_layers_are_units_of_the_prefix_group(void **state)
{
	(void)state;
	expect_unit("model.layers.3.mlp.up_proj.weight", "model", 3);
	expect_unit("model.vision_tower.layers.0.x", "model.vision_tower", 0);
	expect_unit("transformer.h.11.attn.c_attn.weight", "transformer", 11);
	expect_unit("encoder.blocks.7.norm.weight", "encoder", 7);
	/* the first keyword decides, nested ones are part of the unit */
	expect_unit("model.layers.2.blocks.5.w", "model", 2);
}

static void gguf_blk_is_group_blk(void **state)
{
	(void)state;
	expect_unit("blk.0.attn_q.weight", "blk", 0);
	expect_unit("blk.31.ffn_down.weight", "blk", 31);
	expect_unit("layers.4.attention.wq.weight", "layers", 4);
}

static void unit_indices_are_full_u64(void **state)
{
	(void)state;
	expect_unit("model.layers.9223372036854775808.w", "model",
		    UINT64_C(9223372036854775808));
	expect_unit("model.layers.18446744073709551615.w", "model",
		    UINT64_MAX);
	strata_owner o = {.kind = STRATA_OWNER_STATIC, .unit = 77};
	strata_error err;
	assert_int_equal(strata_topology_owner(
				 "model.layers.18446744073709551616.w", &o, &err),
			 STRATA_E_OVERFLOW);
	assert_non_null(strstr(err.message, "model.layers.18446744073709551616.w"));
	assert_int_equal(o.unit, 77); /* unchanged on error */
}

static void non_index_segments_stay_static(void **state)
{
	(void)state;
	expect_static("model.layers.x.weight", "model.layers.x.weight");
	expect_static("model.h.weight", "model.h.weight");
	expect_static("layers", "layers");
	expect_static("model.layers.", "model.layers.");
	expect_static("model.mylayers.3.w", "model.mylayers.3.w");
}

static void static_roles_come_from_the_name(void **state)
{
	(void)state;
	expect_static("model.embed_tokens.weight", "embedding");
	expect_static("tok_embeddings.weight", "embedding");
	expect_static("token_embd.weight", "embedding");
	expect_static("transformer.wte.weight", "embedding");
	expect_static("lm_head.weight", "output");
	expect_static("output.weight", "output");
	expect_static("embed_out.weight", "output");
	expect_static("model.norm.weight", "norm");
	expect_static("output_norm.weight", "norm");
	expect_static("transformer.ln_f.bias", "norm");
	expect_static("rope.freqs", "rope.freqs");
}

static void empty_name_is_an_error(void **state)
{
	(void)state;
	strata_owner o;
	strata_error err;
	assert_int_equal(strata_topology_owner("", &o, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_topology_owner(NULL, &o, &err),
			 STRATA_E_INVALID_ARG);
}

static void exclude_globs_use_fnmatch(void **state)
{
	(void)state;
	const char *globs[] = {"*.lora_*", "model.layers.1.*"};
	assert_true(strata_topology_excluded("a.b.lora_A.weight", globs, 2));
	assert_true(strata_topology_excluded("model.layers.1.mlp.w", globs, 2));
	assert_false(strata_topology_excluded("model.layers.10.mlp.w", globs, 2));
	assert_false(strata_topology_excluded("model.layers.1.mlp.w", globs, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hf_layers_are_units_of_the_prefix_group),
		cmocka_unit_test(gguf_blk_is_group_blk),
		cmocka_unit_test(unit_indices_are_full_u64),
		cmocka_unit_test(non_index_segments_stay_static),
		cmocka_unit_test(static_roles_come_from_the_name),
		cmocka_unit_test(empty_name_is_an_error),
		cmocka_unit_test(exclude_globs_use_fnmatch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
