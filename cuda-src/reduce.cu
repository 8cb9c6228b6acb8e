// Sum of n floats: each block reduces a grid-stride slice and adds it to *out (zero it first).
#include "include/reduce.cuh"

extern "C" __global__ void reduce_sum_f32(const float* __restrict__ x, float* __restrict__ out, int n) {
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += x[i];
  v = block_sum(v);
  if (threadIdx.x == 0) atomicAdd(out, v);
}
