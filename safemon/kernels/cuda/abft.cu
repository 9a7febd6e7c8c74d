// ABFT check of C = A·B, Huang–Abraham checksums per block tile (docs/RMT.md, "ABFT").
//
// For the tiling BM×BN of the product (gx = ceil(N/BN), gy = ceil(M/BM) tiles), tile (by, bx)
// passes when, for every column c of the tile and every row r of the tile,
//   | Σ_{r∈tile} C[r,c] − Σ_k (Σ_{r∈tile} A[r,k]) B[k,c] | ≤ tol_col(by, c)   and
//   | Σ_{c∈tile} C[r,c] − Σ_k A[r,k] (Σ_{c∈tile} B[k,c]) | ≤ tol_row(r, bx),
// all sums in float64. The tolerance is the float32 rounding bound of the MMM kernel plus the
// float64 rounding of this check (safemon/kernels/abft.py derives it):
//   tol = g32 · Σ|A||B| + g64 · (Σ|A||B| + Σ|C|) + n_terms · KS · 2^-149,
//   g32 = γ_{K+S} in float32 (u = 2^-24), g64 = γ_{n_terms+K+7} in float64 (u = 2^-53),
// with S the K-slices of the product and n_terms the tile rows (column check) or columns (row
// check). A non-finite sum of C fails, and so does a comparison that is not true (NaN).
//
// A failure sets status word 6 to 1 and word 7 to max(word 7, 0xFFFFFFFF − tile) with tile =
// by·gx + bx, so word 7 names the lowest failing tile whatever the block order.
//
// Kernels (all on the stream of the MMM kernel, after it):
//   safemon_abft_vectors  a_sum/a_abs[by·K + k] = Σ_{r∈tile by} A[r,k] / |A[r,k]|,
//                         b_sum/b_abs[bx·K + k] = Σ_{c∈tile bx} B[k,c] / |B[k,c]|.
//   safemon_abft_check    blocks [0, col_blocks): one thread per (by, c), the column checks;
//                         the rest: one warp per (r, bx), the row checks.

#define ABFT_STATUS_FLAG 6
#define ABFT_STATUS_TILE 7

__device__ __forceinline__ double safemon_gamma(double n, double u) { return n * u / (1.0 - n * u); }

__device__ __forceinline__ void safemon_abft_flag(unsigned* status, unsigned tile) {
    atomicOr(&status[ABFT_STATUS_FLAG], 1u);
    atomicMax(&status[ABFT_STATUS_TILE], 0xFFFFFFFFu - tile);
}

extern "C" __global__ void safemon_abft_vectors(
    const float* __restrict__ A, const float* __restrict__ B, double* __restrict__ a_sum,
    double* __restrict__ a_abs, double* __restrict__ b_sum, double* __restrict__ b_abs, int M,
    int N, int K, int BM, int BN, int gx, int gy) {
    const long long na = (long long)gy * K, total = na + (long long)gx * K;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        double s = 0.0, s_abs = 0.0;
        if (i < na) {
            const int by = (int)(i / K), k = (int)(i % K);
            const int r_end = min(M, (by + 1) * BM);
            for (int r = by * BM; r < r_end; ++r) {
                const double v = A[(long long)r * K + k];
                s += v;
                s_abs += fabs(v);
            }
            a_sum[i] = s;
            a_abs[i] = s_abs;
        } else {
            const long long j = i - na;
            const int bx = (int)(j / K), k = (int)(j % K);
            const int c_end = min(N, (bx + 1) * BN);
            for (int c = bx * BN; c < c_end; ++c) {
                const double v = B[(long long)k * N + c];
                s += v;
                s_abs += fabs(v);
            }
            b_sum[j] = s;
            b_abs[j] = s_abs;
        }
    }
}

extern "C" __global__ void safemon_abft_check(
    const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ C,
    const double* __restrict__ a_sum, const double* __restrict__ a_abs,
    const double* __restrict__ b_sum, const double* __restrict__ b_abs,
    unsigned* __restrict__ status, int M, int N, int K, int BM, int BN, int gx, int gy,
    int slices, int col_blocks) {
    const double g32 = safemon_gamma((double)K + slices, 0x1p-24);
    const double tiny = (double)K * slices * 0x1p-149;
    if ((int)blockIdx.x < col_blocks) {  // column checks: thread per (by, c)
        const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i >= (long long)gy * N) return;
        const int by = (int)(i / N), c = (int)(i % N);
        const double* as = a_sum + (long long)by * K;
        const double* aa = a_abs + (long long)by * K;
        double expect = 0.0, bound = 0.0, got = 0.0, got_abs = 0.0;
        for (int k = 0; k < K; ++k) {
            const double b = B[(long long)k * N + c];
            expect = fma(as[k], b, expect);
            bound = fma(aa[k], fabs(b), bound);
        }
        const int r_end = min(M, (by + 1) * BM);
        for (int r = by * BM; r < r_end; ++r) {
            const double v = C[(long long)r * N + c];
            got += v;
            got_abs += fabs(v);
        }
        const int terms = r_end - by * BM;
        const double g64 = safemon_gamma((double)terms + K + 7, 0x1p-53);
        const double tol = g32 * bound + g64 * (bound + got_abs) + terms * tiny;
        if (!(isfinite(got) && fabs(got - expect) <= tol)) safemon_abft_flag(status, (unsigned)(by * gx + c / BN));
        return;
    }
    // row checks: warp per (r, bx), lanes over k and over the tile's columns
    const long long w = ((long long)(blockIdx.x - col_blocks) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= (long long)M * gx) return;  // whole warps leave together
    const int r = (int)(w / gx), bx = (int)(w % gx);
    const float* a_row = A + (long long)r * K;
    const double* bs = b_sum + (long long)bx * K;
    const double* ba = b_abs + (long long)bx * K;
    double expect = 0.0, bound = 0.0, got = 0.0, got_abs = 0.0;
    for (int k = lane; k < K; k += 32) {
        const double a = a_row[k];
        expect = fma(a, bs[k], expect);
        bound = fma(fabs(a), ba[k], bound);
    }
    const int c_end = min(N, (bx + 1) * BN);
    for (int c = bx * BN + lane; c < c_end; c += 32) {
        const double v = C[(long long)r * N + c];
        got += v;
        got_abs += fabs(v);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        expect += __shfl_xor_sync(0xFFFFFFFFu, expect, off);
        bound += __shfl_xor_sync(0xFFFFFFFFu, bound, off);
        got += __shfl_xor_sync(0xFFFFFFFFu, got, off);
        got_abs += __shfl_xor_sync(0xFFFFFFFFu, got_abs, off);
    }
    if (lane != 0) return;
    const int terms = c_end - bx * BN;
    const double g64 = safemon_gamma((double)terms + K + 7, 0x1p-53);
    const double tol = g32 * bound + g64 * (bound + got_abs) + terms * tiny;
    if (!(isfinite(got) && fabs(got - expect) <= tol)) safemon_abft_flag(status, (unsigned)((r / BM) * gx + bx));
}
