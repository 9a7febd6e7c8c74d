// ABFT fused into the MMM kernel (docs/RMT.md, "ABFT"): included by mmm.cu in ABFT_FUSED builds
// only. safemon/kernels/abft.py derives the rule and its tolerance; abft.cu computes the
// checksum vectors this code reads (a_sum/a_abs[by·K + k] = Σ_{r∈tile row by} A[r,k] / |A[r,k]|,
// b_sum/b_abs[bx·K + k] = Σ_{c∈tile column bx} B[k,c] / |B[k,c]|, float64).
//
// Items: the block's BN tile columns (items 0..BN−1) and BM tile rows (items BN..BN+BM−1),
// spread over the launched threads (item = threadIdx.x + q·BLOCK_THREADS). In the k loop, while
// the block's A and B tiles sit in shared memory, the thread of column c accumulates in float64
//   e_c += a_sum[by·K + k]·B[k,c],   p_c += a_abs[by·K + k]·|B[k,c]|
// and the thread of row r
//   e_r += A[r,k]·b_sum[bx·K + k],   p_r += |A[r,k]|·b_abs[bx·K + k]
// over the block's k range (its K-slice: a split product is checked slice by slice, each
// partial tile against its own range). In the epilogue the block sums its accumulators per tile
// column and row in float64, in a fixed order through shared memory (no atomics), and a column
// or row fails when its sum is not finite or
//   |Σ Ĉ − e| > γ_{Kz+1}·p + γ⁽⁶⁴⁾_{n+Kz+7}·(2 + γ_{Kz+1})·p + n·Kz·2⁻¹⁴⁹
// (Kz the slice's K length, n the tile's real rows (columns)). A failed tile sets status word 6
// to 1 and word 7 to max(word 7, 0xFFFFFFFF − (by·gx + bx)). C and ES are never changed.
#pragma once

#define ABFT_STATUS_FLAG 6
#define ABFT_STATUS_TILE 7
#define ABFT_ITEMS (BN + BM)
#define ABFT_PER_THREAD ((ABFT_ITEMS + BLOCK_THREADS - 1) / BLOCK_THREADS)

// float → double without the flush CuPy's -ftz=true puts on a plain conversion (PTX).
__device__ __forceinline__ double abft_widen(float x) {
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(x));
    return d;
}

__device__ __forceinline__ double abft_gamma(double n, double u) { return n * u / (1.0 - n * u); }

// A thread's checksum-product accumulators: expected sum e and absolute product p per item.
struct AbftAcc {
    double e[ABFT_PER_THREAD];
    double p[ABFT_PER_THREAD];
};

__device__ __forceinline__ void abft_init(AbftAcc& s) {
#pragma unroll
    for (int q = 0; q < ABFT_PER_THREAD; ++q) s.e[q] = s.p[q] = 0.0;
}

// One k-tile: the block's tiles As (transposed) and Bs are in shared memory and synchronised.
__device__ __forceinline__ void abft_kstep(
    AbftAcc& s, const float (*As)[BM + A_PAD], const float (*Bs)[BN],
    const double* __restrict__ a_sum, const double* __restrict__ a_abs,
    const double* __restrict__ b_sum, const double* __restrict__ b_abs, int K, int k0) {
    const long long a_at = (long long)blockIdx.y * K, b_at = (long long)blockIdx.x * K;
#pragma unroll
    for (int q = 0; q < ABFT_PER_THREAD; ++q) {
        const int item = (int)threadIdx.x + q * BLOCK_THREADS;
        if (item < ABFT_ITEMS) {
            const bool col = item < BN;
            const double* vs = col ? a_sum + a_at : b_sum + b_at;
            const double* va = col ? a_abs + a_at : b_abs + b_at;
#pragma unroll
            for (int kk = 0; kk < BK; ++kk) {
                const int k = k0 + kk;
                if (k < K) {  // padded steps hold zeros and have no vector entry
                    const double x = abft_widen(col ? Bs[kk][item] : As[kk][item - BN]);
                    // Plain float64 products and sums (fused only where the build's --fmad
                    // allows it); the bound covers either rounding.
                    s.e[q] += vs[k] * x;
                    s.p[q] += va[k] * fabs(x);
                }
            }
        }
    }
}

// The epilogue: `holder` threads (every thread; replica 0 in RMT builds) hold the logical
// thread (tx, ty)'s accumulators. Every thread of the block must call it (it synchronises).
// With a null `status` (no check asked for) it writes nothing.
__device__ __forceinline__ void abft_epilogue(
    const AbftAcc& s, const float (&acc)[TM][TN], bool holder, int tx, int ty, int M, int N,
    int row0, int col0, int kz, unsigned* __restrict__ status) {
    __shared__ double col_part[BM / TM][BN];  // [ty][column]: Σ over the thread's TM rows
    __shared__ double row_part[BN / TN][BM];  // [tx][row]: Σ over the thread's TN columns
    if (holder) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            double sum = 0.0;
#pragma unroll
            for (int i = 0; i < TM; ++i)
                if (row0 + ty * TM + i < M) sum += abft_widen(acc[i][j]);
            col_part[ty][tx * TN + j] = sum;
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            double sum = 0.0;
#pragma unroll
            for (int j = 0; j < TN; ++j)
                if (col0 + tx * TN + j < N) sum += abft_widen(acc[i][j]);
            row_part[tx][ty * TM + i] = sum;
        }
    }
    __syncthreads();
    const double g32 = abft_gamma((double)kz + 1.0, 0x1p-24);
    const double tiny = (double)kz * 0x1p-149;
    bool bad = false;
#pragma unroll
    for (int q = 0; q < ABFT_PER_THREAD; ++q) {
        const int item = (int)threadIdx.x + q * BLOCK_THREADS;
        if (item >= ABFT_ITEMS) continue;
        const bool col = item < BN;
        const int idx = col ? item : item - BN;
        if (col ? col0 + idx >= N : row0 + idx >= M) continue;
        double got = 0.0;
        if (col) {
            for (int w = 0; w < BM / TM; ++w) got += col_part[w][idx];
        } else {
            for (int w = 0; w < BN / TN; ++w) got += row_part[w][idx];
        }
        const int terms = col ? min(M, row0 + BM) - row0 : min(N, col0 + BN) - col0;
        const double g64 = abft_gamma((double)terms + kz + 7, 0x1p-53);
        const double tol = g32 * s.p[q] + g64 * (2.0 + g32) * s.p[q] + terms * tiny;
        if (!(isfinite(got) && fabs(got - s.e[q]) <= tol)) bad = true;
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0 && status != nullptr) {
        atomicOr(&status[ABFT_STATUS_FLAG], 1u);
        atomicMax(&status[ABFT_STATUS_TILE],
                  0xFFFFFFFFu - (unsigned)(blockIdx.y * gridDim.x + blockIdx.x));
    }
}
