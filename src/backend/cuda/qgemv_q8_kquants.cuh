/* qgemv_q8_kquants.cuh - the wide-load lanes of the 8-bit-activation
 * decode GEMV for Q4_K, Q5_K and Q6_K, taken where
 * strata__cuda_q8gemv_wide is 1 (layer: backend). Included by
 * kernels_qgemv_q8.cu after its quantized x (q8x, xds) and before its
 * kernel, which runs these types as it runs its own: the same parts,
 * row splits over warps, steps of loads in flight and decode chain.
 *
 * Why: the narrow lanes of kernels_qgemv_q8.cu (Q8K45, Q8Q6_K) take 4 or
 * 8 bytes of codes a lane a step, every one of a super-block's 16 lanes
 * loads its 16-byte head and decodes two 6-bit scales from it, and a
 * 16-element run of x is split over two lanes (two loads of its codes,
 * two of its factors, two float products); ncu/bench_cuda_quant put them
 * at 854 (Q4_K), 914 (Q5_K) and 1167 (Q6_K) GB/s of weights on the H200,
 * where Q8_0 and bf16 reach 3000-3500. Here, as llama.cpp's MMVQ lays its
 * threads over a block, 8 lanes take a super-block and each lane two
 * whole 16-element runs of it: one 16-byte load of its codes (Q5_K: and
 * one of the fifth bits; Q6_K: 16 bytes of low nibbles and 16 of high
 * bits), one 16-byte load of x's codes and one 8-byte (dx, s) load a run
 * and row, 4 __dp4a a run, and the two scales (and mins) its runs need,
 * decoded from the head once per lane (a quarter of a super-block's 32
 * narrow lanes). A warp step is 4 super-blocks; with 4 steps of loads in
 * flight a lane has 64 bytes of codes outstanding.
 *
 * Numerics: the codes and factors are the narrow lanes' (and the CPU's:
 * qdot.c), each run's integer sum whole in one lane as the CPU's
 * chunk_dot sums it, then (weight factor x dx) x sum and min x s as
 * there; the f32 order of the runs' terms differs from both, so outputs
 * agree with them to f32 rounding (test_backend_cuda_kernels_q8 holds
 * them to 1e-4 of rms, and to the scheme's bound of the exact product).
 *
 * Loads: Q4_K (144 bytes) and Q5_K (176) super-blocks start on 16-byte
 * boundaries when the weights do, and only such weights take these lanes
 * (others keep the narrow ones). Q6_K's 210-byte super-blocks start on
 * any even byte, so a lane loads the two aligned 16-byte words around
 * each of its 16-byte runs of codes and shifts them into place; every
 * word it loads holds a byte of its own super-block, so no load passes
 * the weights' end.
 */
#ifndef STRATA_BACKEND_CUDA_QGEMV_Q8_KQUANTS_CUH
#define STRATA_BACKEND_CUDA_QGEMV_Q8_KQUANTS_CUH

/* x's 16 codes from column col (a multiple of 16) of row r. */
static __device__ __forceinline__ uint4 xq16(const q8x &x, uint32_t r,
					     uint32_t col)
{
	return __ldg((const uint4 *)(x.q + (uint64_t)r * x.in + col));
}

/* The integer dot product of 16 codes (4 words of signed bytes) and x's
 * 16, in element order. */
static __device__ __forceinline__ int dot16(const int (&c)[4], const uint4 &a)
{
	return __dp4a(c[3], (int)a.w,
		      __dp4a(c[2], (int)a.z,
			     __dp4a(c[1], (int)a.y, __dp4a(c[0], (int)a.x, 0))));
}

/* Sub-blocks 2 g and 2 g + 1's scales (dl = d x sc) and mins (ml = dmin
 * x m) from a Q4_K/Q5_K head h (f16 d, f16 dmin, then the 12 bytes
 * strata__q4k_scale_min reads, s[0 .. 11], in h.y .. h.w): the same
 * values as head_scale_min(h, 2 g) and (h, 2 g + 1), both of a pair from
 * one 16-bit half of a word. g < 2: sc = s[j] & 63, m = s[j + 4] & 63;
 * g >= 2: sc = s[j + 4] & 15 | (s[j - 4] >> 6) << 4, m = s[j + 4] >> 4 |
 * (s[j] >> 6) << 4. Selects, not branches: the lanes of a warp hold
 * every g. */
static __device__ __forceinline__ void pair_scale_min(const uint4 &h,
						      unsigned g, float (&dl)[2],
						      float (&ml)[2])
{
	const unsigned hs = 16 * (g & 1);
	const unsigned pa = ((g & 2 ? h.z : h.y) >> hs) & 0xffffu; /* s[2g], s[2g+1] */
	const unsigned pb = ((g & 2 ? h.w : h.z) >> hs) & 0xffffu; /* s[2g+4], .. */
	const unsigned pc = (h.y >> hs) & 0xffffu; /* s[2g-4], .. (g >= 2) */
	const bool low = g < 2;
	const unsigned sc = low ? pa & 0x3f3fu
				: (pb & 0x0f0fu) | ((pc & 0xc0c0u) >> 2);
	const unsigned m = low ? pb & 0x3f3fu
			       : ((pb >> 4) & 0x0f0fu) | ((pa & 0xc0c0u) >> 2);
	const float d = __half2float(__ushort_as_half((unsigned short)(h.x & 0xffffu)));
	const float dmin = __half2float(__ushort_as_half((unsigned short)(h.x >> 16)));
	dl[0] = __fmul_rn(d, (float)(sc & 0xffu));
	dl[1] = __fmul_rn(d, (float)(sc >> 8));
	ml[0] = __fmul_rn(dmin, (float)(m & 0xffu));
	ml[1] = __fmul_rn(dmin, (float)(m >> 8));
}

/* Q4_K and Q5_K: 4 super-blocks a step, 8 lanes each; lane k of one holds
 * qs bytes 16 k .. + 16, whose low nibbles are elements 64 g + 16 (k % 2)
 * .. + 16 (g = k / 2: sub-block 2 g) and high nibbles the 16 at + 32
 * (sub-block 2 g + 1); Q5_K's fifth bits of both are bits 2 g and 2 g + 1
 * of qh bytes 16 (k % 2) .. + 16. Weights on 16-byte boundaries only. */
template <bool FIVE> struct Q8K45W {
	enum { STEP = 1024, BYTES = FIVE ? 176 : 144, QS = FIVE ? 48 : 16 };
	struct regs {
		uint4 h, q, qh;
		bool ok;
	};
	static __device__ __forceinline__ void load(regs &g, const uint8_t *row,
						    uint32_t s, unsigned lane,
						    uint32_t in, bool live)
	{
		const uint32_t sb = 4 * s + lane / 8, k = lane % 8;
		g.ok = live && sb < in / 256;
		if (!g.ok)
			return;
		const uint8_t *b = row + (uint64_t)sb * BYTES;
		g.h = __ldcs((const uint4 *)b);
		g.q = __ldcs((const uint4 *)(b + QS) + k);
		if (FIVE)
			g.qh = __ldcs((const uint4 *)(b + 16) + k % 2);
	}
	/* Four codes (0 .. 31, a byte each) of sub-block `sub` from nibbles
	 * (shifted down by 0 or 4) and fifth bits. */
	static __device__ __forceinline__ int codes(unsigned q, unsigned qh,
						    unsigned sub)
	{
		unsigned c = q & 0x0f0f0f0fu;
		if (FIVE)
			c |= ((qh >> sub) & 0x01010101u) << 4;
		return (int)c;
	}
	template <int NR>
	static __device__ __forceinline__ void dot(const regs &g, const q8x &x,
						   uint32_t s, unsigned lane,
						   uint32_t n, float (&acc)[NR])
	{
		if (!g.ok)
			return;
		const uint32_t sb = 4 * s + lane / 8, k = lane % 8, grp = k / 2;
		float dl[2], ml[2];
		pair_scale_min(g.h, grp, dl, ml);
		const unsigned q[4] = {g.q.x, g.q.y, g.q.z, g.q.w};
		const unsigned qh[4] = {g.qh.x, g.qh.y, g.qh.z, g.qh.w};
		int lo[4], hi[4];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			lo[i] = codes(q[i], FIVE ? qh[i] : 0u, 2 * grp);
			hi[i] = codes(q[i] >> 4, FIVE ? qh[i] : 0u, 2 * grp + 1);
		}
		const uint32_t col = 256 * sb + 64 * grp + 16 * (k % 2);
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const uint4 a = xq16(x, r, col), b = xq16(x, r, col + 32);
			const float2 da = xds(x, r, col), db = xds(x, r, col + 32);
			const int ta = dot16(lo, a), tb = dot16(hi, b);
			float v = __fmul_rn(dl[0], da.x) * (float)ta +
				  __fmul_rn(dl[1], db.x) * (float)tb;
			v -= ml[0] * da.y + ml[1] * db.y;
			acc[r] += v;
		}
	}
};

/* The 16 bytes from byte o (even, < 16) of the 32 in a then b, as words:
 * whole words by two stages of selects (o / 4 is 0 .. 3), then the
 * half-word shift. */
static __device__ __forceinline__ void bytes_at(const uint4 &a, const uint4 &b,
						unsigned o, unsigned (&w)[4])
{
	const unsigned v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
	unsigned t[7], u[5];
#pragma unroll
	for (int j = 0; j < 7; j++)
		t[j] = o & 4 ? v[j + 1] : v[j];
#pragma unroll
	for (int j = 0; j < 5; j++)
		u[j] = o & 8 ? t[j + 2] : t[j];
	const unsigned sh = 8 * (o & 3);
#pragma unroll
	for (int j = 0; j < 4; j++)
		w[j] = __funnelshift_r(u[j], u[j + 1], sh);
}

/* Q6_K: 4 super-blocks a step, 8 lanes each; lane k of one (half hf = k
 * / 4 of the super-block, c = k % 4) holds ql bytes 16 k .. + 16, whose
 * low nibbles are elements 128 hf + 16 c .. + 16 (scale 8 hf + c) and
 * high nibbles the 16 at + 64 (scale 8 hf + 4 + c), and qh bytes 32 hf +
 * 16 (c % 2) .. + 16, whose bits 2 (c / 2) .. + 2 are the first run's
 * high bits and bits 4 + 2 (c / 2) .. the second's; codes - 32 as signed
 * bytes. The raw aligned words are kept until dot(), so that every
 * step's loads are issued before any is waited on. */
struct Q8Q6_KW {
	enum { STEP = 1024 };
	struct regs {
		uint4 l0, l1, h0, h1; /* the aligned words around ql's, qh's run */
		unsigned o;	      /* the runs' byte offset in l0, h0 */
		unsigned short d;     /* the super-block's f16 d */
		signed char s0, s1;   /* the runs' 8-bit scales */
		bool ok;
	};
	static __device__ __forceinline__ void load(regs &g, const uint8_t *row,
						    uint32_t s, unsigned lane,
						    uint32_t in, bool live)
	{
		const uint32_t sb = 4 * s + lane / 8, k = lane % 8;
		const uint32_t hf = k / 4, c = k % 4;
		g.ok = live && sb < in / 256;
		if (!g.ok)
			return;
		const uint8_t *b = row + (uint64_t)sb * 210;
		/* both runs sit a multiple of 16 bytes past b */
		const uintptr_t pl = (uintptr_t)(b + 16 * k);
		const uintptr_t ph = (uintptr_t)(b + 128 + 32 * hf + 16 * (c % 2));
		const uint4 *al = (const uint4 *)(pl & ~(uintptr_t)15);
		const uint4 *ah = (const uint4 *)(ph & ~(uintptr_t)15);
		g.o = (unsigned)(pl & 15);
		g.l0 = __ldcs(al);
		g.l1 = __ldcs(al + 1);
		g.h0 = __ldcs(ah);
		g.h1 = __ldcs(ah + 1);
		g.d = __ldcs((const unsigned short *)(b + 208));
		g.s0 = __ldcs((const signed char *)(b + 192 + 8 * hf + c));
		g.s1 = __ldcs((const signed char *)(b + 196 + 8 * hf + c));
	}
	template <int NR>
	static __device__ __forceinline__ void dot(const regs &g, const q8x &x,
						   uint32_t s, unsigned lane,
						   uint32_t n, float (&acc)[NR])
	{
		if (!g.ok)
			return;
		const uint32_t sb = 4 * s + lane / 8, k = lane % 8;
		const uint32_t hf = k / 4, c = k % 4;
		unsigned ql[4], qh[4];
		bytes_at(g.l0, g.l1, g.o, ql);
		bytes_at(g.h0, g.h1, g.o, qh);
		const unsigned sh = 2 * (c / 2);
		int lo[4], hi[4];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			lo[i] = (int)__vsub4((ql[i] & 0x0f0f0f0fu) |
						     ((qh[i] >> sh) & 0x03030303u) << 4,
					     0x20202020u);
			hi[i] = (int)__vsub4(((ql[i] >> 4) & 0x0f0f0f0fu) |
						     ((qh[i] >> (sh + 4)) & 0x03030303u)
							     << 4,
					     0x20202020u);
		}
		const float d = __half2float(__ushort_as_half(g.d));
		const float d0 = __fmul_rn(d, (float)g.s0);
		const float d1 = __fmul_rn(d, (float)g.s1);
		const uint32_t col = 256 * sb + 128 * hf + 16 * c;
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const uint4 a = xq16(x, r, col), b = xq16(x, r, col + 64);
			const float2 da = xds(x, r, col), db = xds(x, r, col + 64);
			const int ta = dot16(lo, a), tb = dot16(hi, b);
			acc[r] += __fmul_rn(d0, da.x) * (float)ta +
				  __fmul_rn(d1, db.x) * (float)tb;
		}
	}
};

#endif
