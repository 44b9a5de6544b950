/* qgemv_q8_0_wide.cuh - the wide-load lanes of the 8-bit-activation
 * decode GEMV for Q8_0, taken where strata__cuda_q8gemv_wide_q8_0 is 1
 * and the rows start on 16-byte boundaries (layer: backend). Included by
 * kernels_qgemv_q8.cu after qgemv_q8_kquants.cuh (xq16, dot16, bytes_at)
 * and before its kernel, which runs this type as it runs the others: the
 * same parts, row splits over warps, steps of loads in flight and decode
 * chain.
 *
 * Why: Q8_0's 34-byte blocks start on any even byte, so today's lanes
 * (Q8Q8_0A in q8gemv_blocks.cuh) take 4 lanes a block and two 8-byte
 * loads each for 8 codes: per 16 weights two lanes issue four weight
 * loads, a shuffle, two x loads and two factor products. The decode of
 * the 7.5 GB llama on the H200 reaches ~2 TB/s of weights with them where
 * bf16 GEMV reaches 3.6. Here a lane takes one whole 16-element run of a
 * block (2 lanes a block, 16 blocks a warp step): the two aligned 16-byte
 * words around its 16 codes, one 16-byte load of x's codes, one dx, 4
 * __dp4a: half the instructions per weight byte, and the warp's loads of
 * a step cover 544 contiguous bytes (17 words of 8 blocks, twice).
 *
 * Alignment: 8 blocks are 272 bytes, 17 words; on rows of a multiple of
 * 256 elements that start on a 16-byte boundary every group of 8 blocks
 * does too, and every word a lane loads holds a byte of its group (a run
 * that starts on a word, o 0, takes one word only), so no load passes the
 * row's end. Other weights keep today's lanes.
 *
 * Numerics: codes and factors are today's (and the CPU's, qdot.c); each
 * run's integer sum is whole in one lane as chunk_dot sums it, then
 * (d x dx) x sum as there; only the f32 order of the runs' terms differs
 * from today's lanes, so outputs agree to f32 rounding
 * (test_backend_cuda_kernels_q8 holds them to the wide K-quants'
 * tolerances).
 */
#ifndef STRATA_BACKEND_CUDA_QGEMV_Q8_0_WIDE_CUH
#define STRATA_BACKEND_CUDA_QGEMV_Q8_0_WIDE_CUH

/* One of 4 words by a 2-bit index, by selects (the lanes of a warp hold
 * every index: a dynamic array index would go to local memory). */
static __device__ __forceinline__ unsigned word_of(const uint4 &v, unsigned i)
{
	const unsigned lo = i & 1 ? v.y : v.x, hi = i & 1 ? v.w : v.z;
	return i & 2 ? hi : lo;
}

/* Q8_0: 16 blocks a step, 2 lanes a block; lane j holds the codes of
 * elements 16 (j % 2) .. + 16 of block 16 s + j / 2, bytes [34 b + 2 +
 * 16 (j % 2), + 16) of the row. The block's f16 d sits 2 bytes before
 * its first run: in the word of that run's lane (j even), except for the
 * last block of a group of 8 (that run starts on a word), whose d is the
 * top of the second word of the lane before (lane 13 of the 16 over the
 * group); dot() hands each block's d to both its lanes by a shuffle. */
struct Q8Q8_0W {
	enum { STEP = 512 };
	struct regs {
		uint4 a, b; /* the aligned words around the run (b = a for o 0) */
		unsigned o; /* the run's byte offset in a: even, 0 .. 14 */
		bool ok;
	};
	static __device__ __forceinline__ void load(regs &g, const uint8_t *row,
						    uint32_t s, unsigned lane,
						    uint32_t in, bool live)
	{
		const uint32_t b = 16 * s + lane / 2;
		g.ok = live && b < in / 32;
		g.o = 0;
		g.a = g.b = make_uint4(0u, 0u, 0u, 0u); /* what the shuffle reads */
		if (!g.ok)
			return;
		const uint64_t at = (uint64_t)b * 34 + 2 + 16 * (lane % 2);
		const uint4 *p = (const uint4 *)(row + (at & ~(uint64_t)15));
		g.o = (unsigned)(at & 15);
		g.a = __ldcs(p);
		/* a run on a word needs no second one, which may lie past
		 * the group's (and the row's) end */
		g.b = g.o ? __ldcs(p + 1) : g.a;
	}
	template <int NR>
	static __device__ __forceinline__ void dot(const regs &g, const q8x &x,
						   uint32_t s, unsigned lane,
						   uint32_t n, float (&acc)[NR])
	{
		/* every lane takes part in the shuffle, loaded or not */
		const unsigned j = lane % 16, k = j / 2; /* block k of the group */
		const unsigned e = (g.o + 14) & 15;	 /* o - 2, for o >= 2 */
		const unsigned mine = (word_of(g.a, e / 4) >> (8 * (e & 3))) & 0xffffu;
		const unsigned give = j == 13 ? g.b.w >> 16 : mine;
		const unsigned dh = __shfl_sync(STRATA__FULL_MASK, give,
						(lane & ~15u) | (k == 7 ? 13u : 2 * k));
		if (!g.ok)
			return;
		const float d = __half2float(__ushort_as_half((unsigned short)dh));
		unsigned w[4];
		bytes_at(g.a, g.b, g.o, w);
		const int c[4] = {(int)w[0], (int)w[1], (int)w[2], (int)w[3]};
		const uint32_t col = 512 * s + 16 * lane;
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const int t = dot16(c, xq16(x, r, col));
			acc[r] += __fmul_rn(d, xd(x, r, col)) * (float)t;
		}
	}
};

#endif
