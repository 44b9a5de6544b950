/* quant_internal.h - what the block decoder files of base share: one block
 * decoder per type, written from ggml's block definitions, bit-exact
 * against gguf-py's reference dequantizer (tests/checkpoint/
 * test_quant_dequant.c), and the layout helpers (layer: base).
 * Not a public API: names are strata__ and may change. */
#ifndef STRATA_BASE_QUANT_INTERNAL_H
#define STRATA_BASE_QUANT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/base.h"

/* IQ4_NL's and IQ4_XS's 16 non-linear levels (ggml's kvalues_iq4nl). */
extern const int8_t strata__iq4nl_levels[16];

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

/* IEEE half (as its bits) to float, subnormals and specials kept. */
float strata__f16_to_f32(uint16_t h);

/* Little-endian f16 at p, as f32 (subnormals and specials kept). */
static inline float strata__load_f16(const unsigned char *p)
{
	return strata__f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

#endif
