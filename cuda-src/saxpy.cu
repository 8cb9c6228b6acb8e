#include "include/params.h"

// y = a * x + y
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}

// The same, with the scalars in a struct the host builds from the bindgen type.
extern "C" __global__ void saxpy_params(SaxpyParams p, const float* __restrict__ x, float* __restrict__ y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += blockDim.x * gridDim.x) y[i] = p.alpha * x[i] + y[i];
}
