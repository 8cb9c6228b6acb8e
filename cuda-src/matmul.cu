// C[M,N] = A[M,K] * B[K,N], row-major fp32, 16x16 shared-memory tiles. Launch with 16x16 blocks
// and a grid of ceil(N/16) x ceil(M/16).
#define TILE 16

extern "C" __global__ void matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                      int m, int n, int k) {
  __shared__ float ta[TILE][TILE];
  __shared__ float tb[TILE][TILE];
  const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < k; t += TILE) {
    ta[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? a[row * k + t + threadIdx.x] : 0.0f;
    tb[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? b[(t + threadIdx.y) * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TILE; ++i) acc += ta[threadIdx.y][i] * tb[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}
