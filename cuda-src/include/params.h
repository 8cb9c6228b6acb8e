// Kernel parameters shared by host and device. bindgen turns this header into Rust types for
// the host, and fatkit has nvcc check, at build time, that the device lays every struct out
// the same way (size, alignment, each field's offset). Plain C: no CUDA-only types, nothing
// under #ifdef __CUDACC__.
#pragma once

typedef struct {
  float alpha;
  int n;
} SaxpyParams;
