// Sum of n floats into *out (zero it first), using Hopper's thread block clusters and
// distributed shared memory on sm_90 and later: the blocks of a cluster combine their partial
// sums through each other's shared memory and one atomic per cluster reaches global memory.
// Older GPUs (and clusters of one block, the default launch) take one atomic per block.
// blockDim.x must be a multiple of 32.
#include <cooperative_groups.h>

#include "include/reduce.cuh"

namespace cg = cooperative_groups;

extern "C" __global__ void cluster_sum_f32(const float* __restrict__ x, float* __restrict__ out, int n) {
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += x[i];
  v = block_sum(v);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ float block_total;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) block_total = v;
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    float total = 0.0f;
    for (unsigned r = 0; r < cluster.num_blocks(); ++r) total += *cluster.map_shared_rank(&block_total, r);
    atomicAdd(out, total);
  }
  cluster.sync();  // keep every block's shared memory alive until rank 0 has read it
#else
  if (threadIdx.x == 0) atomicAdd(out, v);
#endif
}
