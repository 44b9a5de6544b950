/* cuda_common.cuh - device helpers the CUDA kernel files share: weight
 * element conversion, warp and block reductions and launch sizing
 * (layer: backend). */
#ifndef STRATA_BACKEND_CUDA_COMMON_CUH
#define STRATA_BACKEND_CUDA_COMMON_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define STRATA__FULL_MASK 0xffffffffu

/* A weight element as f32 (exact for every type), and f32 rounded to a
 * half type, nearest even. */
__device__ __forceinline__ float strata__to_float(float v) { return v; }
__device__ __forceinline__ float strata__to_float(__nv_bfloat16 v)
{
	return __bfloat162float(v);
}
__device__ __forceinline__ float strata__to_float(__half v)
{
	return __half2float(v);
}

template <typename T> __device__ __forceinline__ T strata__from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 strata__from_float(float v)
{
	return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half strata__from_float(float v)
{
	return __float2half_rn(v);
}

template <typename T> __device__ __forceinline__ T strata__warp_sum(T v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(STRATA__FULL_MASK, v, o);
	return v;
}

__device__ __forceinline__ float strata__warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(STRATA__FULL_MASK, v, o));
	return v;
}

/* Sum (or max) over the block, returned to every thread. `red` holds one
 * value per warp; the trailing barrier lets the caller reuse it at once.
 * Every thread of the block must call it. */
template <typename T>
__device__ __forceinline__ T strata__block_sum(T v, T *red)
{
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const unsigned warps = (blockDim.x + 31) >> 5;
	v = strata__warp_sum(v);
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	T t = 0;
	for (unsigned i = 0; i < warps; i++)
		t += red[i]; /* the same order in every thread */
	__syncthreads();
	return t;
}

__device__ __forceinline__ float strata__block_max(float v, float *red)
{
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const unsigned warps = (blockDim.x + 31) >> 5;
	v = strata__warp_max(v);
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	float t = -INFINITY;
	for (unsigned i = 0; i < warps; i++)
		t = fmaxf(t, red[i]);
	__syncthreads();
	return t;
}

/* Programmatic dependent launch (Hopper), for the chain of small kernels
 * a decode step is: a kernel launched by strata__launch_chained may be
 * scheduled while the kernel before it still runs, so neither the launch
 * gap nor the predecessor's last blocks leave the device idle.
 * strata__chain_wait blocks until the predecessor has finished and its
 * writes are visible: a chained kernel calls it before it reads anything
 * the predecessor writes or writes anything it reads (its first statement,
 * unless it has reads of its own to start, as the GEMVs' weights).
 * strata__chain_next lets the next chained kernel be scheduled. Without a
 * programmatic launch both return at once. */
__device__ __forceinline__ void strata__chain_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void strata__chain_next()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Chained launches on (1) or off (0: every launch waits for the kernel
 * before it, as usual); tests compare the two. cuda_launch.h. */
extern "C" int strata__cuda_pdl;

/* kernel<<<grid, block, smem, s>>>(args...) as a programmatic dependent of
 * the kernel before it in s where strata__cuda_pdl allows (a launch the
 * runtime refuses is made the ordinary way). The kernel must call
 * strata__chain_wait before touching its predecessor's memory. */
template <typename... P, typename... A>
static inline cudaError_t strata__launch_chained(void (*kernel)(P...),
						 dim3 grid, dim3 block,
						 size_t smem, cudaStream_t s,
						 A... args)
{
	if (strata__cuda_pdl) {
		cudaLaunchAttribute at[1];
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		cudaLaunchConfig_t c = {};
		c.gridDim = grid;
		c.blockDim = block;
		c.dynamicSmemBytes = smem;
		c.stream = s;
		c.attrs = at;
		c.numAttrs = 1;
		if (cudaLaunchKernelEx(&c, kernel, args...) == cudaSuccess)
			return cudaSuccess;
		(void)cudaGetLastError(); /* not taken: the ordinary launch */
	}
	kernel<<<grid, block, smem, s>>>(args...);
	return cudaGetLastError();
}

/* Blocks for `work` items at `per_block` each, capped: kernels loop with a
 * grid stride past the cap. */
static inline unsigned strata__grid(uint64_t work, uint64_t per_block)
{
	uint64_t b = (work + per_block - 1) / per_block;
	if (b == 0)
		b = 1;
	return b > (1u << 20) ? (1u << 20) : (unsigned)b;
}

#endif
