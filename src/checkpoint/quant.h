/* quant.h - the GGUF block formats strata decodes: one block decoder per
 * type, written from ggml's block definitions, bit-exact against gguf-py's
 * reference dequantizer (tests/checkpoint/test_quant_dequant.c), and the
 * block layout facts the kernels and the quantizer share (layer: checkpoint).
 * Not a public API: names are strata__ and may change. */
#ifndef STRATA_CHECKPOINT_QUANT_H
#define STRATA_CHECKPOINT_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/checkpoint.h"

/* Sentinel of strata__quant_dequant: every block was finite. */
#define STRATA_QUANT_ALL_FINITE UINT64_MAX

/* IQ4_NL's and IQ4_XS's 16 non-linear levels (ggml's kvalues_iq4nl). */
extern const int8_t strata__iq4nl_levels[16];

/* True for the types strata__quant_dequant decodes: F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS. */
bool strata__quant_supported(strata_dtype t);

/* Decodes `elements` elements of type t (a whole number of blocks, which the
 * caller checks) from src (little-endian file bytes, any alignment) into
 * dst (elements floats). The result equals gguf-py's dequantization bit for
 * bit. Returns the index of the first block whose scales or values are NaN
 * or infinite (its output is written anyway), or STRATA_QUANT_ALL_FINITE.
 * A type strata__quant_supported rejects writes nothing and returns 0. */
uint64_t strata__quant_dequant(strata_dtype t, const void *src, float *dst,
			       uint64_t elements);

/* Per-family block decoders (quant_legacy.c, quant_kquants.c): decode one
 * block at b into y; false when one of its scales is not finite. */
bool strata__dq_q4_0(const unsigned char *b, float *y);
bool strata__dq_q4_1(const unsigned char *b, float *y);
bool strata__dq_q5_0(const unsigned char *b, float *y);
bool strata__dq_q5_1(const unsigned char *b, float *y);
bool strata__dq_q8_0(const unsigned char *b, float *y);
bool strata__dq_iq4_nl(const unsigned char *b, float *y);
bool strata__dq_q2_k(const unsigned char *b, float *y);
bool strata__dq_q3_k(const unsigned char *b, float *y);
bool strata__dq_q4_k(const unsigned char *b, float *y);
bool strata__dq_q5_k(const unsigned char *b, float *y);
bool strata__dq_q6_k(const unsigned char *b, float *y);
bool strata__dq_iq4_xs(const unsigned char *b, float *y);

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's
 * 12 packed scale bytes. */
void strata__q4k_scale_min(const unsigned char *s, int j, uint8_t *sc,
			   uint8_t *m);

/* Little-endian f16 at p, as f32 (subnormals and specials kept). */
static inline float strata__load_f16(const unsigned char *p)
{
	return strata_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

#endif
