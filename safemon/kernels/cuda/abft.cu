// Checksum vectors of the ABFT check of C = A·B (docs/RMT.md, "ABFT"). The check itself is
// fused into the MMM kernel's epilogue (abft_fused.cuh), which reads these vectors.
//
// The rule and its tolerance: safemon/kernels/abft.py; the fused check: abft_fused.cuh.
//
// Kernel (on the stream of the MMM kernel, before it):
//   safemon_abft_vectors  a_sum/a_abs[by·K + k] = Σ_{r∈tile by} A[r,k] / |A[r,k]| (a thread
//                         each), b_sum/b_abs[bx·K + k] = Σ_{c∈tile bx} B[k,c] / |B[k,c]| (a
//                         warp each). blockDim.x must be a multiple of 32.

// float → double without the flush CuPy's -ftz=true would put on a plain conversion
// (cvt.ftz.f64.f32 turns subnormal inputs into 0): written in PTX, like mmm.cu's MAC.
__device__ __forceinline__ double safemon_widen(float x) {
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(x));
    return d;
}

extern "C" __global__ void safemon_abft_vectors(
    const float* __restrict__ A, const float* __restrict__ B, double* __restrict__ a_sum,
    double* __restrict__ a_abs, double* __restrict__ b_sum, double* __restrict__ b_abs, int M,
    int N, int K, int BM, int BN, int gx, int gy) {
    // A part: a thread per (by, k), consecutive threads on consecutive k (coalesced rows).
    const long long na = (long long)gy * K;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < na; i += stride) {
        const int by = (int)(i / K), k = (int)(i % K);
        const int r_end = min(M, (by + 1) * BM);
        double s = 0.0, s_abs = 0.0;
        for (int r = by * BM; r < r_end; ++r) {
            const double v = safemon_widen(A[(long long)r * K + k]);
            s += v;
            s_abs += fabs(v);
        }
        a_sum[i] = s;
        a_abs[i] = s_abs;
    }
    // B part: a warp per (bx, k), lanes over the tile's columns (coalesced), shuffle sums.
    const int lane = threadIdx.x & 31;
    const long long nb = (long long)gx * K;
    for (long long j = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5; j < nb;
         j += stride >> 5) {
        const int bx = (int)(j / K), k = (int)(j % K);
        const int c_end = min(N, (bx + 1) * BN);
        double s = 0.0, s_abs = 0.0;
        for (int c = bx * BN + lane; c < c_end; c += 32) {
            const double v = safemon_widen(B[(long long)k * N + c]);
            s += v;
            s_abs += fabs(v);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
            s_abs += __shfl_xor_sync(0xFFFFFFFFu, s_abs, off);
        }
        if (lane == 0) {
            b_sum[j] = s;
            b_abs[j] = s_abs;
        }
    }
}
