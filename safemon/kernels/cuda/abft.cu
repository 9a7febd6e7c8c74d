// ABFT check of C = A·B, Huang–Abraham checksums per block tile (docs/RMT.md, "ABFT").
//
// For the tiling BM×BN of the product (gx = ceil(N/BN), gy = ceil(M/BM) tiles), tile (by, bx)
// passes when, for every column c of the tile and every row r of the tile,
//   | Σ_{r∈tile} C[r,c] − Σ_k (Σ_{r∈tile} A[r,k]) B[k,c] | ≤ tol_col(by, c)   and
//   | Σ_{c∈tile} C[r,c] − Σ_k A[r,k] (Σ_{c∈tile} B[k,c]) | ≤ tol_row(r, bx),
// all sums in float64. The tolerance is the float32 rounding bound of the MMM kernel plus the
// float64 rounding of this check (safemon/kernels/abft.py derives it):
//   tol = g32 · Σ|A||B| + g64 · (Σ|A||B| + Σ|C|) + n_terms · KS · 2^-149,
//   g32 = γ_{k_S+S} in float32 (u = 2^-24), g64 = γ_{n_terms+K+7} in float64 (u = 2^-53),
// with S the K-slices of the product, k_S the most k of any slice (the host passes
// roundings = k_S + S) and n_terms the tile rows (column check) or columns (row check). A non-finite sum of C fails, and so does a comparison that is not true (NaN).
//
// The row-only check ("rows", safemon/kernels/abft.py) applies the second rule alone: it runs
// safemon_abft_b_vectors (or takes a weight's vectors computed once), the row products and
// safemon_abft_verify_rows, never the A vectors or the column products.
//
// A failure sets status word 6 to 1 and word 7 to max(word 7, 0xFFFFFFFF − tile) with tile =
// by·gx + bx, so word 7 names the lowest failing tile whatever the block order.
//
// Kernels (in this order; the first three read only A and B, and launch_checked queues them,
// for products of at least ABFT_OVERLAP_MIN_MACS multiply-adds, on a side stream beside the
// MMM kernel, else after it; the verify kernel on the MMM kernel's stream after both; every
// sum in a fixed order, so a decision never depends on scheduling):
//   safemon_abft_a_vectors  a_sum/a_abs[k·gy + by] = Σ_{r∈tile by} A[r,k] / |A[r,k]|.
//   safemon_abft_cols_Y     the column checksum products over K-slice z (blockIdx.z):
//                           col_part[z][by][c] = (Σ_k a_sum[by,k]·B[k,c], Σ_k a_abs[by,k]·|B[k,c]|),
//                           a thread per column c and Y tile rows (Y = 1, 2, 4, 8), the
//                           vectors staged in shared memory ABFT_KC k at a time (Y = 16: on
//                           the float64 tensor cores, a warp per 32 columns, B staged in
//                           shared memory too); the first
//                           tile-row group's blocks also write b_sum/b_abs[k·gx + bx] =
//                           Σ_{c∈tile bx} B[k,c] / |B[k,c]| from the same loads (a thread
//                           per 32 columns and k, then the tile's parts in order; BN a
//                           multiple of 32). 256 threads.
//   safemon_abft_b_vectors  "rows" only: b_sum/b_abs alone, by the column kernel's own code
//                           (a block per 256 columns × ABFT_KC k), so bit for bit its sums.
//   safemon_abft_rows_NT    the row checksum products: row_part[z][bx][r] =
//                           (Σ_k A[r,k]·b_sum[bx,k], Σ_k |A[r,k]|·b_abs[bx,k]) on the float64
//                           tensor cores (mma.m8n8k4), a block per 64 rows (8 per warp) × 8·NT
//                           tile columns (NT = 1, 2, 4), A and the vectors staged in shared
//                           memory. 256 threads.
//   safemon_abft_verify_RW_CG  the sums of C per tile column and tile row, the slices'
//                           products added, the tolerance and the flag: a block per tile, C
//                           read once. First RP = min(8, 256 / (8·RW)) threads per tile row
//                           add every RP-th of its S slice products, and one thread adds the RP
//                           parts in order (threads on consecutive rows). Then warp p takes
//                           every 8th row of the tile from p (at most RW rows) over its column
//                           groups of 32 (at most CG): each row's sum (lanes over the columns,
//                           then a shuffle tree) is checked by the warp, and each column's part
//                           p, with every 8th slice from p, goes through shared memory to warp
//                           0, which adds the eight parts in order. 256 threads. Every sum in
//                           a fixed order (no atomics), so a decision never depends on
//                           scheduling.
//   safemon_abft_verify_rows  "rows" only: a warp per (row r, tile column bx), eight per
//                           block, no barrier. Lane l adds C[r, c0 + l + 32j] (j in order)
//                           and the slice products of every 32nd slice from l, then a
//                           shuffle tree adds the lanes; lane 0 checks. The row sum of C
//                           sees at most ⌈BN/32⌉ + 4 roundings, the slices at most S − 1.
// B is read once (cols), A twice (a_vectors, rows), C once (verify).
// Rounding: a checksum vector (a tile's n rows of A added in order, or its n columns of B in
// parts of 32 added in order, then the parts in order) takes at most n − 1 float64 roundings.
// A product term sees at most kslice in its slice, then at most
// ⌈S/8⌉ − 1 + min(7, S − 1) (columns: a part without slices adds an exact zero) or
// ⌈S/RP⌉ − 1 + min(RP − 1, S − 1) ≤ S − 1 (rows) adding the S slices; launch_abft keeps every slice ≥ 64 k, so the total
// stays ≤ K + 7 (tests/kernels/test_abft.py checks it for every split it makes).
// A sum of C sees at most ⌈n/8⌉ + 7 ≤ n + 7 (columns) or ⌈BN/32⌉ + 5 ≤ n + 7 (rows): all
// within the γ_{n+K+7} of the tolerance.

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

// a_sum/a_abs[k·gy + by]: a thread per k (consecutive threads on consecutive k, coalesced
// rows), blockIdx.y = by, the tile's rows summed in order.
extern "C" __global__ void safemon_abft_a_vectors(
    const float* __restrict__ A, double* __restrict__ a_sum, double* __restrict__ a_abs, int M,
    int K, int BM) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x, by = blockIdx.y;
    if (k >= K) return;
    const int r_end = min(M, (by + 1) * BM);
    double s = 0.0, s_abs = 0.0;
    for (int r = by * BM; r < r_end; ++r) {
        const double v = safemon_widen(A[(long long)r * K + k]);
        s += v;
        s_abs += fabs(v);
    }
    a_sum[(long long)k * gridDim.y + by] = s;
    a_abs[(long long)k * gridDim.y + by] = s_abs;
}

#define ABFT_KC 32          // k per shared-memory stage
#define ABFT_COL_THREADS 256
#define ABFT_COL_Y_MAX 16   // most tile rows (by) per column block
#define ABFT_ROW_R 64       // rows per row block (8 per warp)

// Stage vectors q0 .. q0+count−1 (of `total`; element k of vector q at k·total + q, so that
// the vectors of one k are adjacent) at k0 .. k_end into shared [ABFT_KC][W] arrays, zeros
// past the ends; consecutive threads take consecutive q, then k: the loads are contiguous and
// the stores hit consecutive banks.
template <int W, int THREADS>
__device__ __forceinline__ void safemon_abft_stage(
    double (*s_sum)[W], double (*s_abs)[W], const double* __restrict__ v_sum,
    const double* __restrict__ v_abs, int q0, int count, int total, int k0, int k_end) {
    for (int i = threadIdx.x; i < count * ABFT_KC; i += THREADS) {
        const int q = i % count, kk = i / count;
        const bool ok = q0 + q < total && k0 + kk < k_end;
        const long long at = (long long)(k0 + kk) * total + q0 + q;
        s_sum[kk][q] = ok ? v_sum[at] : 0.0;
        s_abs[kk][q] = ok ? v_abs[at] : 0.0;
    }
}

// One float64 tensor-core step, D = A·B + D for an 8×4 A and a 4×8 B held one element per
// lane (A: row lane/4, column lane%4; B: row lane%4, column lane/4; D: row lane/4, columns
// 2·(lane%4) + 0, 1; PTX ISA, mma.m8n8k4 .f64). NVIDIA describes its FP64 tensor cores, since
// the A100, as IEEE-compliant binary64 arithmetic: whatever order the hardware adds an element's
// four products in, a product sees at most its own rounding and one per later addition, so a
// chain of these steps over kslice k still rounds each product at most kslice times.
__device__ __forceinline__ void safemon_dmma(double (&d)[2], double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d[0]), "+d"(d[1])
        : "d"(a), "d"(b));
}

// B's vectors of one k-stage: s_b holds kn ≤ ABFT_KC rows of the block's 256 columns as loaded
// (column j at j + j/32; zeros past N). A thread per (k, 32 columns) adds its part in order;
// then a thread per (tile, k) adds its tile's parts in order and stores
// b_sum/b_abs[(k0 + kk)·gx + bx] (BN a multiple of 32 dividing 256: the caller checks). A b
// vector sees at most 31 + BN/32 − 1 ≤ BN − 1 roundings. Every thread of the block calls it
// (it has a barrier); it ends after its first barrier, so the caller's next barrier must come
// before s_b or s_part are written again.
__device__ __forceinline__ void safemon_abft_b_stage(
    const float (*s_b)[ABFT_COL_THREADS + ABFT_COL_THREADS / 32],
    double (*s_part)[ABFT_KC][ABFT_COL_THREADS / 32], double* __restrict__ b_sum,
    double* __restrict__ b_abs, int k0, int kn, int BN, int gx) {
    const int tiles = ABFT_COL_THREADS / BN, per_tile = BN / 32;
    constexpr int parts = ABFT_COL_THREADS / 32;
    static_assert(ABFT_COL_THREADS / parts == ABFT_KC, "a thread per (k, part)");
    {
        const int kk = threadIdx.x / parts, part = threadIdx.x % parts;
        if (kk < kn) {
            double ws = 0.0, wa = 0.0;
#pragma unroll 8
            for (int j = 0; j < 32; ++j) {
                const double v = safemon_widen(s_b[kk][part * 33 + j]);
                ws += v;
                wa += fabs(v);
            }
            s_part[0][kk][part] = ws;
            s_part[1][kk][part] = wa;
        }
    }
    __syncthreads();
    // Written k-major, the block's tiles of one k side by side.
    for (int i = threadIdx.x; i < tiles * kn; i += ABFT_COL_THREADS) {
        const int kk = i / tiles, t = i % tiles, bx = blockIdx.x * tiles + t;
        const int q0 = t * per_tile;
        double ws = s_part[0][kk][q0], wa = s_part[1][kk][q0];
        for (int q = q0 + 1; q < q0 + per_tile; ++q) {
            ws += s_part[0][kk][q];
            wa += s_part[1][kk][q];
        }
        if (bx < gx) {
            b_sum[(long long)(k0 + kk) * gx + bx] = ws;
            b_abs[(long long)(k0 + kk) * gx + bx] = wa;
        }
    }
}

// Y: tile rows per column block (a power of two ≤ ABFT_COL_Y_MAX, the smallest ≥ gy up to it:
// launch_abft picks the instance), each thread accumulating 2·Y doubles (Y = ABFT_COL_Y_MAX:
// its warp's tensor-core fragments, te/tb; each instance leaves the other's unused). The
// blocks of the first tile-row group (blockIdx.y == 0) also write b_sum/b_abs[k·gx + bx] for their columns
// and K-slice: they keep each k-stage of B in shared memory as loaded, a thread per (k, 32
// columns) adds its part in order and a thread per (tile, k) the tile's parts in order (BN a
// multiple of 32 dividing the block's 256 columns), so B is read once for both.
template <int Y>
__device__ __forceinline__ void safemon_abft_cols_impl(
    const float* __restrict__ B, const double* __restrict__ a_sum,
    const double* __restrict__ a_abs, double* __restrict__ col_part, double* __restrict__ b_sum,
    double* __restrict__ b_abs, int N, int K, int BN, int gx, int gy, int kslice) {
    // The largest instance (16 tile rows: large products) runs its products on the float64
    // tensor cores: a warp per 32 columns, two m-tiles of 8 tile rows, 4 n-tiles of 8 columns.
    constexpr bool TC = Y == ABFT_COL_Y_MAX;
    static_assert(!TC || (Y == 16 && ABFT_COL_THREADS == 8 * 32),
                  "the tensor-core path: 8 warps × 32 columns × 16 tile rows");
    constexpr int W = Y < 2 ? 2 : Y;  // 16-byte rows for the double2 loads
    __shared__ __align__(16) double s_sum[ABFT_KC][W];
    __shared__ __align__(16) double s_abs[ABFT_KC][W];
    // B's k-stage as loaded, for the b vectors: column j of the block at j + j/32, so that the
    // eight threads summing the 32-column parts of one k read different banks.
    __shared__ float s_b[ABFT_KC][ABFT_COL_THREADS + ABFT_COL_THREADS / 32];
    __shared__ double s_part[2][ABFT_KC][ABFT_COL_THREADS / 32];  // the 32-column parts of a k
    const int c = blockIdx.x * ABFT_COL_THREADS + threadIdx.x;
    const int by0 = blockIdx.y * Y;
    const bool with_b = blockIdx.y == 0;
    const int z = blockIdx.z;
    const int k_begin = z * kslice, k_end = min(K, k_begin + kslice);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tg = lane & 3;  // the fragment's group and thread in group
    double e[Y], bd[Y];
    double te[2][4][2], tb[2][4][2];  // TC: (m-tile, n-tile) fragments of the sums and bounds
#pragma unroll
    for (int q = 0; q < Y; ++q) e[q] = bd[q] = 0.0;
#pragma unroll
    for (int i = 0; i < 16; ++i) (&te[0][0][0])[i] = (&tb[0][0][0])[i] = 0.0;
    for (int k0 = k_begin; k0 < k_end; k0 += ABFT_KC) {
        safemon_abft_stage<W, ABFT_COL_THREADS>(s_sum, s_abs, a_sum, a_abs, by0, Y, gy, k0,
                                                k_end);
        const int kn = min(ABFT_KC, k_end - k0);
        if constexpr (TC) {
            // B's stage into s_b first (zeros past N and past the stage: the steps take whole
            // groups of 4 k), 8 loads in flight per thread.
#pragma unroll
            for (int kb = 0; kb < ABFT_KC; kb += 8) {
                float bv[8];
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    bv[j] = c < N && kb + j < kn ? B[(long long)(k0 + kb + j) * N + c] : 0.0f;
#pragma unroll
                for (int j = 0; j < 8; ++j) s_b[kb + j][threadIdx.x + threadIdx.x / 32] = bv[j];
            }
            __syncthreads();
            for (int kk = 0; kk < kn; kk += 4) {
                double bf[4], ba[4];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    const int j = warp * 32 + nt * 8 + g;
                    bf[nt] = safemon_widen(s_b[kk + tg][j + j / 32]);
                    ba[nt] = fabs(bf[nt]);
                }
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    const double as = s_sum[kk + tg][mt * 8 + g];
                    const double aa = s_abs[kk + tg][mt * 8 + g];
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt) {
                        safemon_dmma(te[mt][nt], as, bf[nt]);
                        safemon_dmma(tb[mt][nt], aa, ba[nt]);
                    }
                }
            }
        } else {
            __syncthreads();
            // LB loads of B in flight per thread, then their products in k order. With four (an
            // unrolled loop of dependent products), the few-row instances were bound by load
            // latency at a third of the H100's DRAM bandwidth (64×4096×4096, Y = 2: 59 µs for
            // 67 MB); the many-row ones keep fewer for their registers.
            constexpr int LB = Y <= 4 ? 16 : 8;
            for (int kb = 0; kb < kn; kb += LB) {
                float bv[LB];
#pragma unroll
                for (int j = 0; j < LB; ++j)  // zeros past N and past the stage
                    bv[j] = c < N && kb + j < kn ? B[(long long)(k0 + kb + j) * N + c] : 0.0f;
#pragma unroll
                for (int j = 0; j < LB; ++j) {
                    const int kk = kb + j;
                    if (kk >= kn) break;
                    const float bf = bv[j];
                    if (with_b) s_b[kk][threadIdx.x + threadIdx.x / 32] = bf;
                    const double b = safemon_widen(bf);
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
        }
        __syncthreads();
        if (with_b) safemon_abft_b_stage(s_b, s_part, b_sum, b_abs, k0, kn, BN, gx);
        __syncthreads();  // s_b and the staged vectors are rewritten next stage
    }
    if constexpr (TC) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int q = by0 + mt * 8 + g;
                    const int cc = blockIdx.x * ABFT_COL_THREADS + warp * 32 + nt * 8 + 2 * tg + h;
                    if (q < gy && cc < N) {
                        const long long o = (((long long)z * gy + q) * N + cc) * 2;
                        col_part[o] = te[mt][nt][h];
                        col_part[o + 1] = tb[mt][nt][h];
                    }
                }
        return;
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

// Blocks per SM the registers must allow: 4 for the few-row instances (their loads need
// warps to hide behind), 2 for the others (their 2·Y accumulators).
#define ABFT_COL_MIN_BLOCKS(Y) ((Y) <= 4 ? 4 : 2)
#define SAFEMON_ABFT_COLS(Y)                                                                  \
    extern "C" __global__ void __launch_bounds__(ABFT_COL_THREADS, ABFT_COL_MIN_BLOCKS(Y))    \
        safemon_abft_cols_##Y(                                                                \
        const float* __restrict__ B, const double* __restrict__ a_sum,                       \
        const double* __restrict__ a_abs, double* __restrict__ col_part,                     \
        double* __restrict__ b_sum, double* __restrict__ b_abs, int N, int K, int BN, int gx, \
        int gy, int kslice) {                                                                 \
        safemon_abft_cols_impl<Y>(B, a_sum, a_abs, col_part, b_sum, b_abs, N, K, BN, gx, gy,  \
                                  kslice);                                                    \
    }
SAFEMON_ABFT_COLS(1)
SAFEMON_ABFT_COLS(2)
SAFEMON_ABFT_COLS(4)
SAFEMON_ABFT_COLS(8)
SAFEMON_ABFT_COLS(16)

// B's vectors alone, for the row-only check ("rows"): a block per 256 columns × ABFT_KC k,
// its stage of B loaded like the column kernel's (zeros past N) and summed by the same
// safemon_abft_b_stage, so the vectors equal the column kernel's bit for bit.
extern "C" __global__ void __launch_bounds__(ABFT_COL_THREADS) safemon_abft_b_vectors(
    const float* __restrict__ B, double* __restrict__ b_sum, double* __restrict__ b_abs, int N,
    int K, int BN, int gx) {
    __shared__ float s_b[ABFT_KC][ABFT_COL_THREADS + ABFT_COL_THREADS / 32];
    __shared__ double s_part[2][ABFT_KC][ABFT_COL_THREADS / 32];
    const int c = blockIdx.x * ABFT_COL_THREADS + threadIdx.x;
    const int k0 = blockIdx.y * ABFT_KC, kn = min(ABFT_KC, K - k0);
    float bv[ABFT_KC];
#pragma unroll
    for (int j = 0; j < ABFT_KC; ++j)  // every load in flight before the first store
        bv[j] = c < N && j < kn ? B[(long long)(k0 + j) * N + c] : 0.0f;
#pragma unroll
    for (int j = 0; j < ABFT_KC; ++j) s_b[j][threadIdx.x + threadIdx.x / 32] = bv[j];
    __syncthreads();
    safemon_abft_b_stage(s_b, s_part, b_sum, b_abs, k0, kn, BN, gx);
}

#define ABFT_ROW_PAD 4  // doubles / floats per shared row beyond the data: conflict-free reads

// The row checksum products on the float64 tensor cores. A block of 8 warps takes 64 rows
// (a warp per 8) × 8·NT tile columns (NT = 1, 2, 4 n-tiles per warp) of K-slice z; A's rows and
// the b vectors are staged in shared memory ABFT_KC k at a time, and every k-step of 4 is one
// mma per n-tile for the sums and one for the bounds (|A| against b_abs).
template <int NT>
__device__ __forceinline__ void safemon_abft_rows_impl(
    const float* __restrict__ A, const double* __restrict__ b_sum,
    const double* __restrict__ b_abs, double* __restrict__ row_part, int M, int K, int gx,
    int kslice) {
    constexpr int X = 8 * NT;
    __shared__ float s_a[ABFT_ROW_R][ABFT_KC + ABFT_ROW_PAD];
    __shared__ __align__(16) double s_sum[ABFT_KC][X + ABFT_ROW_PAD];
    __shared__ __align__(16) double s_abs[ABFT_KC][X + ABFT_ROW_PAD];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;  // the fragment's group and thread in group
    const int r0 = blockIdx.x * ABFT_ROW_R, bx0 = blockIdx.y * X;
    const int z = blockIdx.z;
    const int k_begin = z * kslice, k_end = min(K, k_begin + kslice);
    double e[NT][2], bd[NT][2];
#pragma unroll
    for (int j = 0; j < NT; ++j) e[j][0] = e[j][1] = bd[j][0] = bd[j][1] = 0.0;
    for (int k0 = k_begin; k0 < k_end; k0 += ABFT_KC) {
        for (int i = threadIdx.x; i < ABFT_ROW_R * ABFT_KC; i += 256) {
            const int rr = i / ABFT_KC, kk = i % ABFT_KC;
            const bool ok = r0 + rr < M && k0 + kk < k_end;
            s_a[rr][kk] = ok ? A[(long long)(r0 + rr) * K + k0 + kk] : 0.0f;
        }
        for (int i = threadIdx.x; i < X * ABFT_KC; i += 256) {  // zeros past gx and k_end
            const int q = i % X, kk = i / X;
            const bool ok = bx0 + q < gx && k0 + kk < k_end;
            const long long at = (long long)(k0 + kk) * gx + bx0 + q;
            s_sum[kk][q] = ok ? b_sum[at] : 0.0;
            s_abs[kk][q] = ok ? b_abs[at] : 0.0;
        }
        __syncthreads();
        const int kn = min(ABFT_KC, k_end - k0);  // zeros staged up to the next multiple of 4
#pragma unroll 4
        for (int kk = 0; kk < kn; kk += 4) {
            const double a = safemon_widen(s_a[warp * 8 + g][kk + t]);
            const double aa = fabs(a);
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                safemon_dmma(e[j], a, s_sum[kk + t][j * 8 + g]);
                safemon_dmma(bd[j], aa, s_abs[kk + t][j * 8 + g]);
            }
        }
        __syncthreads();
    }
    const int r = r0 + warp * 8 + g;
    if (r >= M) return;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int bx = bx0 + j * 8 + 2 * t + h;
            if (bx < gx) {
                const long long o = (((long long)z * gx + bx) * M + r) * 2;
                row_part[o] = e[j][h];
                row_part[o + 1] = bd[j][h];
            }
        }
    }
}

#define SAFEMON_ABFT_ROWS(NT)                                                                 \
    extern "C" __global__ void __launch_bounds__(256) safemon_abft_rows_##NT(                \
        const float* __restrict__ A, const double* __restrict__ b_sum,                       \
        const double* __restrict__ b_abs, double* __restrict__ row_part, int M, int K,       \
        int gx, int kslice) {                                                                 \
        safemon_abft_rows_impl<NT>(A, b_sum, b_abs, row_part, M, K, gx, kslice);              \
    }
SAFEMON_ABFT_ROWS(1)
SAFEMON_ABFT_ROWS(2)
SAFEMON_ABFT_ROWS(4)

#define ABFT_VERIFY_PARTS 8  // warps of a block: warp p sums every 8th row and slice from p

// safemon_abft_verify_RW_CG: a block per tile (blockIdx.x = by·gx + bx), 8 warps, C read once
// (the header above says what each step sums). The column sums and their slices are added in
// the order of the two-kernel verify this replaced; the row sums of C too; the rows' slice
// products now in RP parts (at most S − 1 roundings, within the same budget).
template <int RW, int CG>
__device__ __forceinline__ void safemon_abft_verify_impl(
    const float* __restrict__ C, const double* __restrict__ col_part,
    const double* __restrict__ row_part, unsigned* __restrict__ status, int M, int N, int K,
    int BM, int BN, int gx, int gy, int slices, int col_slices, int row_slices, int roundings) {
    __shared__ double s_part[ABFT_VERIFY_PARTS][4][32];
    // RP threads per tile row add its slices' products (RP parts: thread part q takes every
    // RP-th slice from q; threads on consecutive rows, coalesced), then one thread adds the
    // RP parts in order.
    constexpr int RP = 256 / (8 * RW) < 8 ? 256 / (8 * RW) : 8;
    __shared__ double s_rowp[RP][8 * RW][2];
    __shared__ double s_row[8 * RW][2];
    const double g32 = safemon_gamma((double)roundings, 0x1p-24);
    const double tiny = (double)K * slices * 0x1p-149;
    const int lane = threadIdx.x & 31, part = threadIdx.x >> 5;
    const int by = (int)(blockIdx.x / gx), bx = (int)(blockIdx.x % gx);
    if (by >= gy) return;  // whole blocks leave together
    const int r0 = by * BM, r_end = min(M, r0 + BM);
    const int c0 = bx * BN, c_end = min(N, c0 + BN);
    const unsigned tile = (unsigned)(by * gx + bx);
    // The columns' checksum products, part p: every 8th slice from p, before C is read.
    double cg[CG], cga[CG], ce[CG], cbd[CG];
#pragma unroll
    for (int j = 0; j < CG; ++j) {
        const int c = c0 + 32 * j + lane;
        cg[j] = cga[j] = ce[j] = cbd[j] = 0.0;
        if (c < c_end) {
#pragma unroll 4
            for (int z = part; z < col_slices; z += ABFT_VERIFY_PARTS) {
                const long long o = (((long long)z * gy + by) * N + c) * 2;
                ce[j] += col_part[o];
                cbd[j] += col_part[o + 1];
            }
        }
    }
    if ((int)threadIdx.x < RP * 8 * RW) {
        const int t = (int)threadIdx.x % (8 * RW), q = (int)threadIdx.x / (8 * RW);
        double e = 0.0, bd = 0.0;
        if (t < r_end - r0) {
#pragma unroll 4
            for (int z = q; z < row_slices; z += RP) {
                const long long o = (((long long)z * gx + bx) * M + r0 + t) * 2;
                e += row_part[o];
                bd += row_part[o + 1];
            }
        }
        s_rowp[q][t][0] = e;
        s_rowp[q][t][1] = bd;
    }
    __syncthreads();
    if ((int)threadIdx.x < r_end - r0) {
        const int t = (int)threadIdx.x;
        double e = s_rowp[0][t][0], bd = s_rowp[0][t][1];
        for (int q = 1; q < RP; ++q) {
            e += s_rowp[q][t][0];
            bd += s_rowp[q][t][1];
        }
        s_row[t][0] = e;
        s_row[t][1] = bd;
    }
    __syncthreads();
    const int row_terms = c_end - c0;
    const double g64_row = safemon_gamma((double)row_terms + K + 7, 0x1p-53);
#pragma unroll 4
    for (int i = 0; i < RW; ++i) {
        const int r = r0 + part + ABFT_VERIFY_PARTS * i;
        const bool row_in = r < r_end;  // warp-uniform
        double g = 0.0, ga = 0.0;
#pragma unroll
        for (int j = 0; j < CG; ++j) {
            const int c = c0 + 32 * j + lane;
            if (row_in && c < c_end) {
                const double v = safemon_widen(C[(long long)r * N + c]);
                g += v;
                ga += fabs(v);
                cg[j] += v;
                cga[j] += fabs(v);
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            g += __shfl_xor_sync(0xFFFFFFFFu, g, off);
            ga += __shfl_xor_sync(0xFFFFFFFFu, ga, off);
        }
        if (row_in && lane == 0) {
            const double e = s_row[r - r0][0], bd = s_row[r - r0][1];
            const double tol = g32 * bd + g64_row * (bd + ga) + row_terms * tiny;
            if (!(isfinite(g) && fabs(g - e) <= tol)) safemon_abft_flag(status, tile);
        }
    }
    const int terms = r_end - r0;
    const double g64 = safemon_gamma((double)terms + K + 7, 0x1p-53);
#pragma unroll
    for (int j = 0; j < CG; ++j) {
        const int c = c0 + 32 * j + lane;
        double e = ce[j], bd = cbd[j];
        if (j > 0) __syncthreads();  // warp 0 has read the previous group's parts
        s_part[part][0][lane] = cg[j];
        s_part[part][1][lane] = cga[j];
        s_part[part][2][lane] = e;
        s_part[part][3][lane] = bd;
        __syncthreads();
        if (part == 0 && c < c_end) {
            double g = cg[j], ga = cga[j];
            for (int p = 1; p < ABFT_VERIFY_PARTS; ++p) {
                g += s_part[p][0][lane];
                ga += s_part[p][1][lane];
                e += s_part[p][2][lane];
                bd += s_part[p][3][lane];
            }
            const double tol = g32 * bd + g64 * (bd + ga) + terms * tiny;
            if (!(isfinite(g) && fabs(g - e) <= tol)) safemon_abft_flag(status, tile);
        }
    }
}

#define SAFEMON_ABFT_VERIFY(RW, CG)                                                             \
    extern "C" __global__ void __launch_bounds__(256) safemon_abft_verify_##RW##_##CG(          \
        const float* __restrict__ C, const double* __restrict__ col_part,                      \
        const double* __restrict__ row_part, unsigned* __restrict__ status, int M, int N,     \
        int K, int BM, int BN, int gx, int gy, int slices, int col_slices, int row_slices,   \
        int roundings) {                                                                      \
        safemon_abft_verify_impl<RW, CG>(C, col_part, row_part, status, M, N, K, BM, BN, gx,  \
                                         gy, slices, col_slices, row_slices, roundings);      \
    }
SAFEMON_ABFT_VERIFY(1, 8)
SAFEMON_ABFT_VERIFY(4, 1)
SAFEMON_ABFT_VERIFY(4, 4)
SAFEMON_ABFT_VERIFY(16, 4)
SAFEMON_ABFT_VERIFY(16, 8)

// The row-only verify ("rows"): a warp per (row r, tile column bx), warp w = r·gx + bx, eight
// warps per block (the header above says what each lane adds). C's row part is read once,
// coalesced; a failure flags tile (r / BM)·gx + bx. No shared memory and no barrier, so a
// warp past the end simply leaves.
extern "C" __global__ void __launch_bounds__(256) safemon_abft_verify_rows(
    const float* __restrict__ C, const double* __restrict__ row_part,
    unsigned* __restrict__ status, int M, int N, int K, int BM, int BN, int gx, int slices,
    int row_slices, int roundings) {
    const int lane = threadIdx.x & 31;
    const long long w = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (w >= (long long)M * gx) return;
    const int r = (int)(w / gx), bx = (int)(w % gx);
    const int c0 = bx * BN, c_end = min(N, c0 + BN);
    double g = 0.0, ga = 0.0, e = 0.0, bd = 0.0;
    for (int c = c0 + lane; c < c_end; c += 32) {
        const double v = safemon_widen(C[(long long)r * N + c]);
        g += v;
        ga += fabs(v);
    }
    for (int z = lane; z < row_slices; z += 32) {
        const long long o = (((long long)z * gx + bx) * M + r) * 2;
        e += row_part[o];
        bd += row_part[o + 1];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        g += __shfl_xor_sync(0xFFFFFFFFu, g, off);
        ga += __shfl_xor_sync(0xFFFFFFFFu, ga, off);
        e += __shfl_xor_sync(0xFFFFFFFFu, e, off);
        bd += __shfl_xor_sync(0xFFFFFFFFu, bd, off);
    }
    if (lane == 0) {
        const int terms = c_end - c0;
        const double g32 = safemon_gamma((double)roundings, 0x1p-24);
        const double g64 = safemon_gamma((double)terms + K + 7, 0x1p-53);
        const double tol = g32 * bd + g64 * (bd + ga) + terms * ((double)K * slices * 0x1p-149);
        if (!(isfinite(g) && fabs(g - e) <= tol))
            safemon_abft_flag(status, (unsigned)((r / BM) * gx + bx));
    }
}
