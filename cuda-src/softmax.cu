// Row-wise softmax over a [rows, cols] matrix: one block per row (blockDim.x a multiple of 32).
// fp32, fp16 and bf16 inputs; the arithmetic is fp32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "include/reduce.cuh"

template <typename T>
__device__ __forceinline__ float load(const T* p, int i);
template <>
__device__ __forceinline__ float load<float>(const float* p, int i) { return p[i]; }
template <>
__device__ __forceinline__ float load<__half>(const __half* p, int i) { return __half2float(p[i]); }
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16* p, int i) { return __bfloat162float(p[i]); }

template <typename T>
__device__ __forceinline__ T store(float v);
template <>
__device__ __forceinline__ float store<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half store<__half>(float v) { return __float2half(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename T>
__device__ void softmax_row(const T* __restrict__ x, T* __restrict__ y, int cols) {
  const T* in = x + (size_t)blockIdx.x * cols;
  T* out = y + (size_t)blockIdx.x * cols;
  float m = FATKIT_NEG_INF;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, load(in, i));
  m = block_max(m);
  float s = 0.0f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += __expf(load(in, i) - m);
  s = block_sum(s);
  const float inv = 1.0f / s;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) out[i] = store<T>(__expf(load(in, i) - m) * inv);
}

extern "C" __global__ void softmax_f32(const float* x, float* y, int cols) { softmax_row(x, y, cols); }
extern "C" __global__ void softmax_f16(const __half* x, __half* y, int cols) { softmax_row(x, y, cols); }
extern "C" __global__ void softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, int cols) { softmax_row(x, y, cols); }
