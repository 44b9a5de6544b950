/* quantize_types.c - strata quantize's presets and the type each tensor
 * gets under one: llama.cpp's llama-quantize mixes, restated as rules
 * (docs/quantize.md lists them) (layer: model). */
#include <stdio.h>
#include <string.h>

#include "model/quantize_internal.h"

/* X(NAME, base dtype, llama.cpp's ftype id): the --type values. */
#define PRESET_MAP(X)                                                          \
	X(F32, F32, 0)                                                         \
	X(F16, F16, 1)                                                         \
	X(BF16, BF16, 32)                                                      \
	X(Q8_0, Q8_0, 7)                                                       \
	X(Q4_0, Q4_0, 2)                                                       \
	X(Q4_1, Q4_1, 3)                                                       \
	X(Q5_0, Q5_0, 8)                                                       \
	X(Q5_1, Q5_1, 9)                                                       \
	X(Q2_K, Q2_K, 10)                                                      \
	X(Q3_K_M, Q3_K, 12)                                                    \
	X(Q4_K_M, Q4_K, 15)                                                    \
	X(Q5_K_M, Q5_K, 17)                                                    \
	X(Q6_K, Q6_K, 18)                                                      \
	X(IQ4_XS, IQ4_XS, 30)

static const strata__quant_preset presets[] = {
#define ROW(n, base, ftype) {#n, STRATA_DTYPE_##base, ftype},
	PRESET_MAP(ROW)
#undef ROW
};

const strata__quant_preset *strata__quant_preset_find(const char *name)
{
	for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
		if (!strcmp(presets[i].name, name))
			return &presets[i];
	return NULL;
}

const char *strata_quantize_type_names(void)
{
	return "F32|F16|BF16|Q8_0|Q4_0|Q4_1|Q5_0|Q5_1|Q2_K|Q3_K_M|Q4_K_M|"
	       "Q5_K_M|Q6_K|IQ4_XS";
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third one between. */
static bool more_bits(uint64_t i, uint64_t n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i >= n / 8 && (i - n / 8) % 3 == 2);
}

static bool has(const char *name, const char *part)
{
	return strstr(name, part) != NULL;
}

static uint32_t block_of(strata_dtype t)
{
	const strata_dtype_info *i = strata_dtype_get(t);
	return i ? i->block_elements : 1;
}

/* The mixes' changes for the tensors of layer i of n (Q2_K, Q3_K_M,
 * Q4_K_M, Q5_K_M, IQ4_XS; the others keep their base type). */
static strata_dtype mix(const strata__quant_preset *p,
			const strata__quant_tensor *t, strata_dtype base)
{
	const char *nm = p->name, *name = t->name;
	bool q2 = !strcmp(nm, "Q2_K"), q3 = !strcmp(nm, "Q3_K_M");
	bool q4 = !strcmp(nm, "Q4_K_M"), q5 = !strcmp(nm, "Q5_K_M");
	bool iq4 = !strcmp(nm, "IQ4_XS");
	uint64_t i = t->layer, n = t->layers;
	if (has(name, "attn_v.weight")) {
		if (q2)
			return t->gqa >= 4 ? STRATA_DTYPE_Q4_K : STRATA_DTYPE_Q3_K;
		if (q3)
			return i < 2 ? STRATA_DTYPE_Q5_K : STRATA_DTYPE_Q4_K;
		if (iq4 && t->gqa >= 4)
			return STRATA_DTYPE_Q5_K;
		if ((q4 || q5) && more_bits(i, n))
			return STRATA_DTYPE_Q6_K;
	} else if (has(name, "ffn_down")) {
		if (q2)
			return STRATA_DTYPE_Q3_K;
		if (q3)
			return i < n / 16 ? STRATA_DTYPE_Q5_K : STRATA_DTYPE_Q4_K;
		if ((q4 || q5) && more_bits(i, n))
			return STRATA_DTYPE_Q6_K;
		if (iq4 && i < n / 8)
			return STRATA_DTYPE_Q5_K;
	} else if (has(name, "attn_output.weight")) {
		if (q2)
			return STRATA_DTYPE_Q3_K;
		if (q3)
			return STRATA_DTYPE_Q4_K;
	} else if (has(name, "attn_qkv.weight")) {
		if (q3)
			return STRATA_DTYPE_Q4_K;
		if (q4)
			return STRATA_DTYPE_Q5_K;
		if (q5)
			return STRATA_DTYPE_Q6_K;
	}
	return base;
}

/* A row length that is not whole blocks of t: llama.cpp's fallback
 * (Q2_K, Q3_K, IQ4_XS -> IQ4_NL; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K ->
 * Q8_0), then F16 when the row is not whole 32-blocks either. llama.cpp
 * refuses such a tensor for the 32-element types; strata writes F16. */
static strata_dtype fallback(strata_dtype t, uint64_t row, bool *fell)
{
	if (row % block_of(t) == 0)
		return t;
	*fell = true;
	switch (t) {
	case STRATA_DTYPE_Q2_K: case STRATA_DTYPE_Q3_K:
	case STRATA_DTYPE_IQ4_XS:
		t = STRATA_DTYPE_IQ4_NL;
		break;
	case STRATA_DTYPE_Q4_K: t = STRATA_DTYPE_Q5_0; break;
	case STRATA_DTYPE_Q5_K: t = STRATA_DTYPE_Q5_1; break;
	case STRATA_DTYPE_Q6_K: t = STRATA_DTYPE_Q8_0; break;
	default: t = STRATA_DTYPE_F16; break;
	}
	return row % block_of(t) == 0 ? t : STRATA_DTYPE_F16;
}

strata_dtype strata__quant_tensor_type(const strata__quant_preset *p,
				       const strata__quant_tensor *t,
				       bool *fell_back)
{
	*fell_back = false;
	/* 1-D tensors (norms, biases, rope factors) stay f32: llama.cpp
	 * quantizes only tensors of two or more dimensions */
	if (t->n_dims < 2)
		return STRATA_DTYPE_F32;
	/* the router stays f32 in every preset, as llama.cpp's converter
	 * and llama-quantize keep ffn_gate_inp */
	if (has(t->name, "ffn_gate_inp.weight"))
		return STRATA_DTYPE_F32;
	strata_dtype base = p->base;
	if (!strata__quant_preset_is_block(p))
		return base;
	bool head = !strcmp(t->name, "output.weight") ||
		    (!t->has_output && !strcmp(t->name, "token_embd.weight"));
	if (head) {
		/* the output head (or the embedding that doubles as it) */
		if (t->row % block_of(base) != 0)
			return fallback(STRATA_DTYPE_Q8_0, t->row, fell_back);
		return fallback(base == STRATA_DTYPE_Q8_0 ? base
							  : STRATA_DTYPE_Q6_K,
				t->row, fell_back);
	}
	if (!strcmp(t->name, "token_embd.weight"))
		return fallback(base, t->row, fell_back);
	return fallback(mix(p, t, base), t->row, fell_back);
}

bool strata__quant_preset_is_block(const strata__quant_preset *p)
{
	return p->base != STRATA_DTYPE_F32 && p->base != STRATA_DTYPE_F16 &&
	       p->base != STRATA_DTYPE_BF16;
}
