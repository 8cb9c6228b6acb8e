// RMS norm over the rows of [rows, cols]: y = x / sqrt(mean(x^2) + eps) * weight.
// One block per row (blockDim.x a multiple of 32); fp32, fp16 and bf16, fp32 arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "include/reduce.cuh"

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void from_f32(float v, float* out) { *out = v; }
__device__ __forceinline__ void from_f32(float v, __half* out) { *out = __float2half(v); }
__device__ __forceinline__ void from_f32(float v, __nv_bfloat16* out) { *out = __float2bfloat16(v); }

template <typename T>
__device__ void rmsnorm_row(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y, int cols, float eps) {
  const T* in = x + (size_t)blockIdx.x * cols;
  T* out = y + (size_t)blockIdx.x * cols;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = to_f32(in[i]);
    ss += v * v;
  }
  ss = block_sum(ss);
  const float scale = rsqrtf(ss / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) from_f32(to_f32(in[i]) * scale * to_f32(weight[i]), &out[i]);
}

extern "C" __global__ void rmsnorm_f32(const float* x, const float* w, float* y, int cols, float eps) {
  rmsnorm_row(x, w, y, cols, eps);
}
extern "C" __global__ void rmsnorm_f16(const __half* x, const __half* w, __half* y, int cols, float eps) {
  rmsnorm_row(x, w, y, cols, eps);
}
extern "C" __global__ void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int cols,
                                        float eps) {
  rmsnorm_row(x, w, y, cols, eps);
}
