// Warp and block reductions shared by the reduction, softmax and RMS norm kernels.
#pragma once

#define FATKIT_WARP 32

// -inf without <math.h>: NVRTC compiles these sources too, and it has no host headers.
#define FATKIT_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = FATKIT_WARP / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = FATKIT_WARP / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block; every thread gets the result. blockDim.x must be a multiple of 32, <= 1024.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[FATKIT_WARP];
  const int lane = threadIdx.x % FATKIT_WARP, warp = threadIdx.x / FATKIT_WARP;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / FATKIT_WARP;
  v = lane < n_warps ? partial[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[FATKIT_WARP];
  const int lane = threadIdx.x % FATKIT_WARP, warp = threadIdx.x / FATKIT_WARP;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / FATKIT_WARP;
  v = lane < n_warps ? partial[lane] : FATKIT_NEG_INF;
  return warp_max(v);
}
