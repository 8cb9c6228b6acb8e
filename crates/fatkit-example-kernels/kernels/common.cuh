// Shared by the kernels of saxpy.cu: the grid-stride loop every kernel uses.
#pragma once

#define FOR_EACH(i, n) \
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)
