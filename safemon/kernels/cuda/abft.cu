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
//   safemon_abft_vectors  a_sum/a_abs[by·K + k] = Σ_{r∈tile by} A[r,k] / |A[r,k]| (a thread
//                         each), b_sum/b_abs[bx·K + k] = Σ_{c∈tile bx} B[k,c] / |B[k,c]| (a
//                         warp each). blockDim.x must be a multiple of 32.
//   safemon_abft_check    blocks [0, col_blocks): the column checks, a block per 32 columns
//                         of ABFT_CHUNK tile rows; the rest: the row checks, a warp per
//                         (r, ABFT_CHUNK tile columns). 256 threads per block.

#define ABFT_STATUS_FLAG 6
#define ABFT_STATUS_TILE 7

// float → double without the flush CuPy's -ftz=true would put on a plain conversion
// (cvt.ftz.f64.f32 turns subnormal inputs into 0): written in PTX, like mmm.cu's MAC.
__device__ __forceinline__ double safemon_widen(float x) {
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(x));
    return d;
}

__device__ __forceinline__ double safemon_gamma(double n, double u) { return n * u / (1.0 - n * u); }

__device__ __forceinline__ void safemon_abft_flag(unsigned* status, unsigned tile) {
    atomicOr(&status[ABFT_STATUS_FLAG], 1u);
    atomicMax(&status[ABFT_STATUS_TILE], 0xFFFFFFFFu - tile);
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

// Tiles per thread group: a column group handles ABFT_CHUNK tile rows (by) at once and a row
// warp ABFT_CHUNK tile columns (bx), so each element of B (of A) is read gy/ABFT_CHUNK
// (gx/ABFT_CHUNK) times instead of gy (gx) times.
#define ABFT_CHUNK 4

extern "C" __global__ void __launch_bounds__(256) safemon_abft_check(
    const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ C,
    const double* __restrict__ a_sum, const double* __restrict__ a_abs,
    const double* __restrict__ b_sum, const double* __restrict__ b_abs,
    unsigned* __restrict__ status, int M, int N, int K, int BM, int BN, int gx, int gy,
    int slices, int col_blocks) {
    const double g32 = safemon_gamma((double)K + slices, 0x1p-24);
    const double tiny = (double)K * slices * 0x1p-149;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;  // blockDim.x == 256
    if ((int)blockIdx.x < col_blocks) {
        // Column checks: a block covers 32 columns (lanes) of ABFT_CHUNK tile rows; its 8 warps
        // split K and the rows, then reduce through shared memory.
        __shared__ double part[4][ABFT_CHUNK][8][32];
        const int col_groups = (N + 31) / 32;
        const int by0 = (int)(blockIdx.x / col_groups) * ABFT_CHUNK;
        const int c = (int)(blockIdx.x % col_groups) * 32 + lane;
        double expect[ABFT_CHUNK], bound[ABFT_CHUNK], got[ABFT_CHUNK], got_abs[ABFT_CHUNK];
#pragma unroll
        for (int q = 0; q < ABFT_CHUNK; ++q) expect[q] = bound[q] = got[q] = got_abs[q] = 0.0;
        if (c < N) {
            for (int k = warp; k < K; k += 8) {
                const double b = safemon_widen(B[(long long)k * N + c]);
#pragma unroll
                for (int q = 0; q < ABFT_CHUNK; ++q)
                    if (by0 + q < gy) {
                        expect[q] = fma(a_sum[(long long)(by0 + q) * K + k], b, expect[q]);
                        bound[q] = fma(a_abs[(long long)(by0 + q) * K + k], fabs(b), bound[q]);
                    }
            }
#pragma unroll
            for (int q = 0; q < ABFT_CHUNK; ++q) {
                const int r_end = min(M, (by0 + q + 1) * BM);
                for (int r = (by0 + q) * BM + warp; r < r_end; r += 8) {
                    const double v = safemon_widen(C[(long long)r * N + c]);
                    got[q] += v;
                    got_abs[q] += fabs(v);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < ABFT_CHUNK; ++q) {
            part[0][q][warp][lane] = expect[q];
            part[1][q][warp][lane] = bound[q];
            part[2][q][warp][lane] = got[q];
            part[3][q][warp][lane] = got_abs[q];
        }
        __syncthreads();
        if (warp >= ABFT_CHUNK || c >= N || by0 + warp >= gy) return;
        const int q = warp, by = by0 + q;
        double e = 0.0, bd = 0.0, g = 0.0, ga = 0.0;
        for (int w = 0; w < 8; ++w) {
            e += part[0][q][w][lane];
            bd += part[1][q][w][lane];
            g += part[2][q][w][lane];
            ga += part[3][q][w][lane];
        }
        const int terms = min(M, (by + 1) * BM) - by * BM;
        const double g64 = safemon_gamma((double)terms + K + 7, 0x1p-53);
        const double tol = g32 * bd + g64 * (bd + ga) + terms * tiny;
        if (!(isfinite(g) && fabs(g - e) <= tol)) safemon_abft_flag(status, (unsigned)(by * gx + c / BN));
        return;
    }
    // Row checks: a warp per (r, ABFT_CHUNK tile columns), lanes over k and over the columns.
    const int bx_groups = (gx + ABFT_CHUNK - 1) / ABFT_CHUNK;
    const long long w = (long long)(blockIdx.x - col_blocks) * 8 + warp;
    if (w >= (long long)M * bx_groups) return;  // whole warps leave together
    const int r = (int)(w / bx_groups), bx0 = (int)(w % bx_groups) * ABFT_CHUNK;
    const float* a_row = A + (long long)r * K;
    double expect[ABFT_CHUNK], bound[ABFT_CHUNK], got[ABFT_CHUNK], got_abs[ABFT_CHUNK];
#pragma unroll
    for (int q = 0; q < ABFT_CHUNK; ++q) expect[q] = bound[q] = got[q] = got_abs[q] = 0.0;
    for (int k = lane; k < K; k += 32) {
        const double a = safemon_widen(a_row[k]);
#pragma unroll
        for (int q = 0; q < ABFT_CHUNK; ++q)
            if (bx0 + q < gx) {
                expect[q] = fma(a, b_sum[(long long)(bx0 + q) * K + k], expect[q]);
                bound[q] = fma(fabs(a), b_abs[(long long)(bx0 + q) * K + k], bound[q]);
            }
    }
#pragma unroll
    for (int q = 0; q < ABFT_CHUNK; ++q) {
        const int c_end = min(N, (bx0 + q + 1) * BN);
        for (int c = (bx0 + q) * BN + lane; c < c_end; c += 32) {
            const double v = safemon_widen(C[(long long)r * N + c]);
            got[q] += v;
            got_abs[q] += fabs(v);
        }
    }
#pragma unroll
    for (int q = 0; q < ABFT_CHUNK; ++q) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            expect[q] += __shfl_xor_sync(0xFFFFFFFFu, expect[q], off);
            bound[q] += __shfl_xor_sync(0xFFFFFFFFu, bound[q], off);
            got[q] += __shfl_xor_sync(0xFFFFFFFFu, got[q], off);
            got_abs[q] += __shfl_xor_sync(0xFFFFFFFFu, got_abs[q], off);
        }
    }
    if (lane >= ABFT_CHUNK || bx0 + lane >= gx) return;
    double e = 0.0, bd = 0.0, g = 0.0, ga = 0.0;
#pragma unroll
    for (int q = 0; q < ABFT_CHUNK; ++q)
        if (q == lane) { e = expect[q]; bd = bound[q]; g = got[q]; ga = got_abs[q]; }
    const int bx = bx0 + lane;
    const int terms = min(N, (bx + 1) * BN) - bx * BN;
    const double g64 = safemon_gamma((double)terms + K + 7, 0x1p-53);
    const double tol = g32 * bd + g64 * (bd + ga) + terms * tiny;
    if (!(isfinite(g) && fabs(g - e) <= tol)) safemon_abft_flag(status, (unsigned)((r / BM) * gx + bx));
}
