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
// Kernels (all on the stream of the MMM kernel, after it; every sum in a fixed order, so a
// decision never depends on scheduling):
//   safemon_abft_vectors  a_sum/a_abs[by·K + k] = Σ_{r∈tile by} A[r,k] / |A[r,k]| (a thread
//                         each), b_sum/b_abs[bx·K + k] = Σ_{c∈tile bx} B[k,c] / |B[k,c]| (a
//                         warp each). blockDim.x must be a multiple of 32.
//   safemon_abft_products_Y_XW   both checksum products, each split over K-slices z, in one
//                         launch (256 threads):
//                         col_part[z][by][c] = (Σ_k a_sum[by,k]·B[k,c], Σ_k a_abs[by,k]·|B[k,c]|),
//                         a thread per column c and Y tile rows (Y = 1, 2, 4, 8, 16), the vectors
//                         staged in shared memory ABFT_KC k at a time (B is read once per Y tile
//                         rows); row_part[z][r][bx] = (Σ_k A[r,k]·b_sum[bx,k], Σ_k |A[r,k]|·
//                         b_abs[bx,k]), a block per 32 rows × 8·XW tile columns (XW = 1, 2, 4 per
//                         warp) with A and the vectors staged in shared memory.
//   safemon_abft_verify   the sums of C per tile column and tile row, the slices' products added
//                         in z order, the tolerance and the flag: a thread per (by, c) in the
//                         first col_blocks blocks, then a warp per (r, bx). 256 threads.
// Rounding: a product term sees at most kslice + slices ≤ K + 7 float64 roundings in the
// products (launch_abft keeps every slice ≥ 64 k), and a sum of C at most n (columns) or
// ⌈BN/32⌉ + 5 ≤ n + 7 (rows): within the γ_{n+K+7} of the tolerance.

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

#define ABFT_KC 32          // k per shared-memory stage
#define ABFT_COL_THREADS 256
#define ABFT_COL_Y_MAX 16   // most tile rows (by) per column block
#define ABFT_ROW_R 32       // rows per row block (a lane each)

// Y: tile rows per column block (a power of two ≤ ABFT_COL_Y_MAX, the smallest ≥ gy up to it:
// launch_abft picks the instance), each thread accumulating 2·Y doubles.
template <int Y>
__device__ __forceinline__ void safemon_abft_cols(
    const float* __restrict__ B, const double* __restrict__ a_sum,
    const double* __restrict__ a_abs, double* __restrict__ col_part, int N, int K, int gy,
    int kslice, int block_x, int block_y, int z) {
    __shared__ __align__(16) double s_sum[ABFT_KC][Y < 2 ? 2 : Y];
    __shared__ __align__(16) double s_abs[ABFT_KC][Y < 2 ? 2 : Y];
    const int c = block_x * ABFT_COL_THREADS + threadIdx.x;
    const int by0 = block_y * Y;
    const int k_begin = z * kslice, k_end = min(K, k_begin + kslice);
    double e[Y], bd[Y];
#pragma unroll
    for (int q = 0; q < Y; ++q) e[q] = bd[q] = 0.0;
    for (int k0 = k_begin; k0 < k_end; k0 += ABFT_KC) {
        for (int i = threadIdx.x; i < Y * ABFT_KC; i += ABFT_COL_THREADS) {
            const int q = i / ABFT_KC, kk = i % ABFT_KC;  // consecutive threads: consecutive k
            const bool ok = by0 + q < gy && k0 + kk < k_end;
            const long long at = (long long)(by0 + q) * K + k0 + kk;
            s_sum[kk][q] = ok ? a_sum[at] : 0.0;
            s_abs[kk][q] = ok ? a_abs[at] : 0.0;
        }
        __syncthreads();
        const int kn = min(ABFT_KC, k_end - k0);
        if (c < N) {
#pragma unroll 4
            for (int kk = 0; kk < kn; ++kk) {
                const double b = safemon_widen(B[(long long)(k0 + kk) * N + c]);
                const double ab = fabs(b);
                if (Y == 1) {
                    e[0] = fma(s_sum[kk][0], b, e[0]);
                    bd[0] = fma(s_abs[kk][0], ab, bd[0]);
                } else {
#pragma unroll
                    for (int q = 0; q < Y; q += 2) {  // one 16-byte broadcast load per pair
                        const double2 s = *reinterpret_cast<const double2*>(&s_sum[kk][q]);
                        const double2 t = *reinterpret_cast<const double2*>(&s_abs[kk][q]);
                        e[q] = fma(s.x, b, e[q]);
                        e[q + 1] = fma(s.y, b, e[q + 1]);
                        bd[q] = fma(t.x, ab, bd[q]);
                        bd[q + 1] = fma(t.y, ab, bd[q + 1]);
                    }
                }
            }
        }
        __syncthreads();
    }
    if (c >= N) return;
#pragma unroll
    for (int q = 0; q < Y; ++q) {
        if (by0 + q < gy) {
            const long long o = (((long long)z * gy + by0 + q) * N + c) * 2;
            col_part[o] = e[q];
            col_part[o + 1] = bd[q];
        }
    }
}

// XW: tile columns per warp (1, 2 or 4; a block covers 8·XW), each thread accumulating
// 2·XW doubles for its row.
template <int XW>
__device__ __forceinline__ void safemon_abft_rows(
    const float* __restrict__ A, const double* __restrict__ b_sum,
    const double* __restrict__ b_abs, double* __restrict__ row_part, int M, int K, int gx,
    int kslice, int block_x, int block_y, int z) {
    constexpr int X = 8 * XW;
    __shared__ float s_a[ABFT_ROW_R][ABFT_KC + 1];  // +1: lanes read 32 rows, no conflict
    __shared__ __align__(16) double s_sum[ABFT_KC][X];
    __shared__ __align__(16) double s_abs[ABFT_KC][X];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = block_x * ABFT_ROW_R, bx0 = block_y * X;
    const int k_begin = z * kslice, k_end = min(K, k_begin + kslice);
    double e[XW], bd[XW];
#pragma unroll
    for (int q = 0; q < XW; ++q) e[q] = bd[q] = 0.0;
    for (int k0 = k_begin; k0 < k_end; k0 += ABFT_KC) {
        for (int i = threadIdx.x; i < ABFT_ROW_R * ABFT_KC; i += 256) {
            const int rr = i / ABFT_KC, kk = i % ABFT_KC;
            const bool ok = r0 + rr < M && k0 + kk < k_end;
            s_a[rr][kk] = ok ? A[(long long)(r0 + rr) * K + k0 + kk] : 0.0f;
        }
        for (int i = threadIdx.x; i < X * ABFT_KC; i += 256) {
            const int q = i / ABFT_KC, kk = i % ABFT_KC;
            const bool ok = bx0 + q < gx && k0 + kk < k_end;
            const long long at = (long long)(bx0 + q) * K + k0 + kk;
            s_sum[kk][q] = ok ? b_sum[at] : 0.0;
            s_abs[kk][q] = ok ? b_abs[at] : 0.0;
        }
        __syncthreads();
        const int kn = min(ABFT_KC, k_end - k0);
#pragma unroll 4
        for (int kk = 0; kk < kn; ++kk) {
            const double a = safemon_widen(s_a[lane][kk]);
            const double aa = fabs(a);
            if (XW == 1) {
                e[0] = fma(a, s_sum[kk][warp], e[0]);
                bd[0] = fma(aa, s_abs[kk][warp], bd[0]);
            } else {
#pragma unroll
                for (int q = 0; q < XW; q += 2) {  // one 16-byte broadcast load per pair
                    const double2 s = *reinterpret_cast<const double2*>(&s_sum[kk][warp * XW + q]);
                    const double2 t = *reinterpret_cast<const double2*>(&s_abs[kk][warp * XW + q]);
                    e[q] = fma(a, s.x, e[q]);
                    e[q + 1] = fma(a, s.y, e[q + 1]);
                    bd[q] = fma(aa, t.x, bd[q]);
                    bd[q + 1] = fma(aa, t.y, bd[q + 1]);
                }
            }
        }
        __syncthreads();
    }
    const int r = r0 + lane;
    if (r >= M) return;
#pragma unroll
    for (int q = 0; q < XW; ++q) {
        const int bx = bx0 + warp * XW + q;
        if (bx < gx) {
            const long long o = (((long long)z * M + r) * gx + bx) * 2;
            row_part[o] = e[q];
            row_part[o + 1] = bd[q];
        }
    }
}

// Both checksum products in one launch: the first cg.x·cg.y·cg.z blocks compute the column
// products (block (x, y, z) of that grid, x fastest), the rest the row products (grid rg).
#define SAFEMON_ABFT_PRODUCTS(Y, XW)                                                          \
    extern "C" __global__ void __launch_bounds__(256) safemon_abft_products_##Y##_##XW(      \
        const float* __restrict__ A, const float* __restrict__ B,                            \
        const double* __restrict__ a_sum, const double* __restrict__ a_abs,                  \
        const double* __restrict__ b_sum, const double* __restrict__ b_abs,                  \
        double* __restrict__ col_part, double* __restrict__ row_part, int M, int N, int K,    \
        int gx, int gy, int col_kslice, int row_kslice, int cgx, int cgy, int cgz, int rgx,  \
        int rgy) {                                                                            \
        int b = (int)blockIdx.x;                                                              \
        if (b < cgx * cgy * cgz) {                                                            \
            safemon_abft_cols<Y>(B, a_sum, a_abs, col_part, N, K, gy, col_kslice, b % cgx,   \
                                 (b / cgx) % cgy, b / (cgx * cgy));                           \
            return;                                                                           \
        }                                                                                     \
        b -= cgx * cgy * cgz;                                                                 \
        safemon_abft_rows<XW>(A, b_sum, b_abs, row_part, M, K, gx, row_kslice, b % rgx,      \
                              (b / rgx) % rgy, b / (rgx * rgy));                              \
    }
#define SAFEMON_ABFT_PRODUCTS_XW(Y) \
    SAFEMON_ABFT_PRODUCTS(Y, 1) SAFEMON_ABFT_PRODUCTS(Y, 2) SAFEMON_ABFT_PRODUCTS(Y, 4)
SAFEMON_ABFT_PRODUCTS_XW(1)
SAFEMON_ABFT_PRODUCTS_XW(2)
SAFEMON_ABFT_PRODUCTS_XW(4)
SAFEMON_ABFT_PRODUCTS_XW(8)
SAFEMON_ABFT_PRODUCTS_XW(16)

extern "C" __global__ void __launch_bounds__(256) safemon_abft_verify(
    const float* __restrict__ C, const double* __restrict__ col_part,
    const double* __restrict__ row_part, unsigned* __restrict__ status, int M, int N, int K,
    int BM, int BN, int gx, int gy, int slices, int col_slices, int row_slices, int col_blocks) {
    const double g32 = safemon_gamma((double)K + slices, 0x1p-24);
    const double tiny = (double)K * slices * 0x1p-149;
    if ((int)blockIdx.x < col_blocks) {
        // A thread per (by, c): consecutive threads on consecutive columns (coalesced rows).
        const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= (long long)gy * N) return;
        const int by = (int)(i / N), c = (int)(i % N);
        const int r_end = min(M, (by + 1) * BM);
        double g = 0.0, ga = 0.0;
        for (int r = by * BM; r < r_end; ++r) {
            const double v = safemon_widen(C[(long long)r * N + c]);
            g += v;
            ga += fabs(v);
        }
        double e = 0.0, bd = 0.0;
        for (int z = 0; z < col_slices; ++z) {
            const long long o = (((long long)z * gy + by) * N + c) * 2;
            e += col_part[o];
            bd += col_part[o + 1];
        }
        const int terms = r_end - by * BM;
        const double g64 = safemon_gamma((double)terms + K + 7, 0x1p-53);
        const double tol = g32 * bd + g64 * (bd + ga) + terms * tiny;
        if (!(isfinite(g) && fabs(g - e) <= tol)) safemon_abft_flag(status, (unsigned)(by * gx + c / BN));
        return;
    }
    // A warp per (r, bx): lanes over the tile's columns (coalesced), shuffle sums.
    const int lane = threadIdx.x & 31;
    const long long w = ((long long)(blockIdx.x - col_blocks) * blockDim.x + threadIdx.x) >> 5;
    if (w >= (long long)M * gx) return;  // whole warps leave together
    const int r = (int)(w / gx), bx = (int)(w % gx);
    const int c_end = min(N, (bx + 1) * BN);
    double g = 0.0, ga = 0.0;
    for (int c = bx * BN + lane; c < c_end; c += 32) {
        const double v = safemon_widen(C[(long long)r * N + c]);
        g += v;
        ga += fabs(v);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        g += __shfl_xor_sync(0xFFFFFFFFu, g, off);
        ga += __shfl_xor_sync(0xFFFFFFFFu, ga, off);
    }
    if (lane != 0) return;
    double e = 0.0, bd = 0.0;
    for (int z = 0; z < row_slices; ++z) {
        const long long o = (((long long)z * M + r) * gx + bx) * 2;
        e += row_part[o];
        bd += row_part[o + 1];
    }
    const int terms = c_end - bx * BN;
    const double g64 = safemon_gamma((double)terms + K + 7, 0x1p-53);
    const double tol = g32 * bd + g64 * (bd + ga) + terms * tiny;
    if (!(isfinite(g) && fabs(g - e) <= tol)) safemon_abft_flag(status, (unsigned)((r / BM) * gx + bx));
}
