// Host code using the CUDA runtime: scales a host array on the GPU.
#include <cuda_runtime.h>

__global__ void scale_kernel(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

// Host code: nvcc compiles it; NVRTC, which builds a target no nvcc found here builds (sm_70
// after CUDA 13), skips it.
#ifndef __CUDACC_RTC__
// Returns cudaSuccess (0) or the CUDA error; `message` gets cudaGetErrorString's text.
extern "C" int fatkit_scale(float* host, int n, float s, const char** message) {
  float* dev = nullptr;
  cudaError_t err = cudaMalloc(&dev, n * sizeof(float));
  if (err == cudaSuccess) err = cudaMemcpy(dev, host, n * sizeof(float), cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    scale_kernel<<<(n + 255) / 256, 256>>>(dev, s, n);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost);
  if (dev) cudaFree(dev);
  *message = cudaGetErrorString(err);
  return static_cast<int>(err);
}
#endif  // __CUDACC_RTC__
