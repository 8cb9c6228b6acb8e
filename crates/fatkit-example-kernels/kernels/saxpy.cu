// y = a*x + y in f32 on every GPU, and in bf16 on Ampere and newer: the bf16 kernel is left
// out of the images for older GPUs by the arch guard, as declared in Cargo.toml
// ("*_bf16" = { targets = "sm_80+" }).
#include <cuda_bf16.h>

#include "common.cuh"

extern "C" __global__ void saxpy_f32(int n, float a, const float* __restrict__ x,
                                     float* __restrict__ y) {
  FOR_EACH(i, n) { y[i] = a * x[i] + y[i]; }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
extern "C" __global__ void saxpy_bf16(int n, __nv_bfloat16 a, const __nv_bfloat16* __restrict__ x,
                                      __nv_bfloat16* __restrict__ y) {
  FOR_EACH(i, n) { y[i] = __hfma(a, x[i], y[i]); }
}
#endif
