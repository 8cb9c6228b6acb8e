// Element-wise vector kernels. Every kernel is extern "C" (the same name for nvcc and NVRTC)
// and guarded by FATKIT_SKIP_<name>, which fatkit defines in the compiles a per-kernel
// override excludes the kernel from.

#ifndef FATKIT_SKIP_vector_add_f32
extern "C" __global__ void vector_add_f32(const float* __restrict__ a, const float* __restrict__ b,
                                          float* __restrict__ out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
#endif

#ifndef FATKIT_SKIP_vector_scale_f32
extern "C" __global__ void vector_scale_f32(float* __restrict__ x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
#endif
