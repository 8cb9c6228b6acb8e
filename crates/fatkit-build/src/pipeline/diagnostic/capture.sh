#!/bin/sh
# Captures the real compiler output the tests of `pipeline::diagnostic` read: nvcc 12.4 with
# --verbose (and -Xptxas -v) on three failing sources, paths made stable.
# Run from this directory with NVCC pointing at nvcc 12.4 (~/.cache/fatkit/toolchains/cuda-12.4/cuda/bin/nvcc).
set -u
tmp=$(mktemp -d)
cat > "$tmp/bad.cu" <<'CU'
template <typename T>
__global__ void dequant_kernel(T* out, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = undefined_name;
}
template __global__ void dequant_kernel<float>(float*, int);
CU
cat > "$tmp/ptx.cu" <<'CU'
__global__ void big_kernel(float* out) {
    __shared__ float tile[200000];
    tile[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x + 1];
}
__global__ void fine_kernel(float* out) { out[0] = 1.0f; }
CU
cat > "$tmp/pp.cu" <<'CU'
#if !defined(NEEDED_FLAG)
#error NEEDED_FLAG must be set
#endif
__global__ void k(float* o) { o[0] = 1; }
CU
root=$(dirname "$(dirname "$NVCC")")
stable() { sed -e "s|$root|/cuda|g" -e "s|$tmp|/src|g" -e 's|tmpxft_[0-9a-f_]*-|tmpxft-|g' -e "s|PATH=.*|PATH=/cuda/bin:/usr/bin|"; }
(cd "$tmp" && "$NVCC" --verbose -cubin -arch=sm_70 bad.cu -o bad.cubin 2>&1) | stable > nvcc-verbose-edg.txt
(cd "$tmp" && "$NVCC" --verbose -Xptxas -v -cubin -arch=sm_70 ptx.cu -o ptx.cubin 2>&1) | stable > nvcc-verbose-ptxas.txt
(cd "$tmp" && "$NVCC" --verbose -cubin -arch=sm_70 pp.cu -o pp.cubin 2>&1) | stable > nvcc-verbose-gcc.txt
rm -rf "$tmp"
