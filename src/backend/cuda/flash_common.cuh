/* flash_common.cuh - what the two tensor-core prefill attention kernels
 * share: their arguments, the causal and windowed key range, exp2, cp.async
 * and the row-to-query map of grouped-query attention; and the direct
 * kernel's entry points for kernels_flash.cu, which picks the kernel
 * (layer: backend). */
#ifndef STRATA_BACKEND_CUDA_FLASH_COMMON_CUH
#define STRATA_BACKEND_CUDA_FLASH_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

typedef struct fa_args {
	float *out;
	const float *q;
	const void *k, *v; /* elements of the kernel's E */
	uint32_t n, pos0, heads, kv_heads, window;
	float scale; /* times log2(e): the softmax runs on exp2 */
	int vec4;    /* keys and values 16-byte aligned: cp.async of 16 */
} fa_args;

/* 2^x in one instruction (relative error ~2^-22; 2^-inf is 0). */
__device__ __forceinline__ float fast_exp2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

/* First key a query at position p sees. */
__device__ __forceinline__ uint64_t first_key(uint64_t p, uint32_t window)
{
	return window && p + 1 > window ? p + 1 - window : 0;
}

/* 16 bytes global -> shared without passing through registers; bytes 0
 * fills the 16 with zeros (keys past the last). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src,
					   int bytes)
{
	const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d),
		     "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

__device__ __forceinline__ void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group 0;\n" ::);
}

/* A row's query index in q and out (units of D floats): row r of kv head
 * kvh is query r / group of query head kvh * group + r % group. */
__device__ __forceinline__ uint64_t row_at(const fa_args &a, uint64_t r,
					   uint32_t kvh, uint32_t group)
{
	return (r / group) * a.heads + (uint64_t)kvh * group + r % group;
}

/* kernels_flash_direct.cu: 1 (the default) sends calls at one rounding
 * (terms 1) over a 16-byte aligned f16 or bf16 cache to the direct
 * kernel, 2 the same with three blocks per multiprocessor at head size
 * 128 instead of two (fewer registers, a small spill), 0 keeps them on
 * kernels_flash.cu's (to compare). */
extern "C" int strata__cuda_flash_direct;

/* The direct kernel's block: FD_WARPS warps of 16 rows. */
#define FD_WARPS 4
#define FD_ROWS (FD_WARPS * 16)

/* The direct kernel's shared memory per block at head size 64 or 128
 * (bytes; 0 for any other). */
size_t strata__cuda_flash_direct_bytes(uint32_t head_dim);

/* Queues the direct kernel for a: kv_type STRATA__CUDA_KV_F16 or _BF16,
 * head size 64 or 128, a.vec4 set (cudaErrorInvalidValue otherwise). */
cudaError_t strata__cuda_flash_direct_launch(cudaStream_t s, const fa_args &a,
					     int kv_type, uint32_t head_dim);

#endif
