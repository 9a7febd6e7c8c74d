// Register-tiled SIMT matrix multiplication with per-thread execution signatures.
//
// C (M×N) = A (M×K) · B (K×N), float32, row-major. One block computes a BM×BN tile of C;
// thread t owns the TM×TN sub-tile at rows ty*TM.., columns tx*TN.. with ty = t / (BN/TN),
// tx = t % (BN/TN). K is walked in BK-wide k-tiles staged in shared memory. Out-of-range
// elements are zero-padded, and every thread runs every padded MAC and folds it (the edge rule
// of docs/SIGNATURES.md), so no branch sits in the inner loop.
//
// Compile-time parameters (set by safemon/kernels/gpu.py; nvcc_check uses the same):
//   BM BN BK TM TN        tile configuration
//   MODE_FMA              0: exact (separate rounding of product and sum), 1: fmaf
//   SIG_I SIG_M SIG_E     checksum at each of the seed's levels (signature.cuh: SIG_NONE..
//                         SIG_CRC32C): I every MAC, M every middle-loop step, E every outer step
//   SIG_F SIG_T           safemon's stronger levels (default none): F the operand fragments
//                         every k step, T the whole accumulator tile every k-tile
//   TILE_ASYNC            1 for the tiles whose catalog entry copies k-tiles asynchronously
//                         (`async_copy`); ASYNC_COPY / ASYNC_STAGES derive from it (below)
//   RMT_WARP              1 only in intra-warp RMT builds (docs/RMT.md): every logical thread
//                         runs twice, in lanes 2l and 2l+1 of one warp, and the pair compares
//                         its accumulators through __shfl_xor_sync before the store. Builds
//                         without RMT never define it and compile to the same code as before.
//   RMT_BLOCK             1 only in inter-block RMT builds (docs/RMT.md): the grid holds every
//                         block tile twice (gridDim.y = 2·tile rows; copy = blockIdx.y / tile
//                         rows), and the pair compares its C tiles through global memory
//                         (rmt_buf, rmt_count) before anything counts as released.
//   SAFEMON_INJECT        1 only in the fault-injection build (safemon/faults): adds the
//                         injection arguments; production builds never see that code.
//   SAFEMON_RECORD_SM     1 only in the self-test build (safemon/patterns): adds one argument,
//                         SM[block] = %smid of the SM that ran the block; production builds
//                         never see that code.
//
// ES layout: ES[g * ES_WORDS + w], g = ((blockIdx.z * gy + by) * gridDim.x + blockIdx.x) *
// THREADS + t, with gy the tile rows and by the tile row (gridDim.y and blockIdx.y except in
// RMT_BLOCK builds, whose two copies of a tile share its g); words are the I-level
// checksum's, then M's, E's, F's and T's (only the enabled ones).
//
// Split-K (production builds): blockIdx.z is the K-slice. With kt = ceil(K/BK) k-tiles and
// T = ceil(kt / gridDim.z), slice z walks the k-tiles [z*T, min(kt, (z+1)*T)) and stores its
// partial product at C + z*M*N; splitk.cu sums the slices in z order. gridDim.z = 1 is the
// whole product. The injection build keeps blockIdx.z for the injection and walks all of K
// (split 1; docs/SIGNATURES.md, "Split-K").
//
// Status word (production builds): `status` is null or the status block of
// safemon/kernels/checked.py. Words 2-3 (B's ECC check) are written by a check queued before
// this kernel on the same stream; when any of words 0-3 is nonzero at the start the kernel
// computes nothing and stores poison: canonical NaN in C, 0xFFFFFFFF in ES. The finite check
// of the inputs runs after the k loop, from the accumulators: a NaN or infinite element of A
// (B) that a block loads is multiplied into every accumulator of its tile row (column),
// padding included, and in IEEE arithmetic a MAC chain that met a non-finite operand never
// becomes finite again (inf·0 and inf − inf are NaN, NaN stays NaN, inf plus a finite value
// stays inf). So a block whose accumulators are all finite loaded only finite inputs and
// stores its results. A block with a non-finite accumulator (a non-finite input, or an
// overflow of finite inputs, which the reference reproduces and the call releases) reads its
// rows of A and columns of B in its K-slice once more from global memory (`nonfinite_in`);
// if an A (B) element there is NaN or infinite it sets word 0 (1) to 1 and stores poison for
// its tile instead of its results. In a run without hardware faults these are the blocks and
// words of the check at every load that this replaced (`nonfinite_in` says what that cost).
// A fault that turns a loaded word NaN or infinite after its load is no longer caught here:
// the second look reads the clean input and releases the tile. The old check read each word
// back once, from shared memory or a register, so it saw such a fault only between the load
// and that read; ES, RMT and the vote are what watch the MACs. Every input element is loaded
// by at least one block of every K-slice that covers it, so a non-finite input always sets
// its word. Without a status block (bench, self-tests) nothing is checked and the
// accumulators are stored as they are. An RMT build whose replica
// pair disagrees poisons its whole block tile the same way and sets word 4 (RMT mismatch) to 1
// and word 5 to max(word 5, 0xFFFFFFFF − the linear block id (blockIdx.z, y, x)), so that it
// names the lowest failed tile whatever the block order.
#include "signature.cuh"
#include "crc32c_table.cuh"

#ifndef BM
#error "BM, BN, BK, TM, TN, MODE_FMA, SIG_I, SIG_M, SIG_E must be defined"
#endif
#ifndef SAFEMON_INJECT
#define SAFEMON_INJECT 0
#endif
#ifndef SAFEMON_RECORD_SM
#define SAFEMON_RECORD_SM 0
#endif

#ifndef RMT_WARP
#define RMT_WARP 0
#endif
// THREADS: logical threads (one per TM×TN sub-tile; ES rows). BLOCK_THREADS: launched threads.
#define THREADS ((BM / TM) * (BN / TN))
#ifndef RMT_BLOCK
#define RMT_BLOCK 0
#endif
static_assert(!(RMT_WARP && RMT_BLOCK), "one RMT kind per build");
// Status words of both RMT kinds (safemon/kernels/checked.py).
#define STATUS_RMT 4
#define STATUS_RMT_TILE 5
#if RMT_WARP
#define RMT_COPIES 2
#define BLOCK_THREADS (THREADS * 2)
#else
#define BLOCK_THREADS THREADS
#endif
#ifndef SIG_F
#define SIG_F SIG_NONE
#endif
#ifndef SIG_T
#define SIG_T SIG_NONE
#endif
#define ES_WORDS (Sig<SIG_I>::WORDS + Sig<SIG_M>::WORDS + Sig<SIG_E>::WORDS + \
                  Sig<SIG_F>::WORDS + Sig<SIG_T>::WORDS)
#define USES_CRC (SIG_I == SIG_CRC32C || SIG_M == SIG_CRC32C || SIG_E == SIG_CRC32C || \
                  SIG_F == SIG_CRC32C || SIG_T == SIG_CRC32C)
// Row padding of the transposed A tile: breaks the bank conflicts of its column-wise stores
// while keeping rows 16-byte aligned for the float4 fragment reads.
#define A_PAD 4
// Wide register tiles (TN = 8: `large`, `wide`, `wide64`, `half`) load their k-tiles with
// vector loads and swizzle the B tile; the others load element by element into a plain B tile
// (B runs are vector copies when the copies are asynchronous, below). Register staging, measured on the
// H100 (evidence/h100-2026-11-23-kernel/): on `large` both gain (4096³ unprotected 1.11×
// faster), on `small` and `skinny` both lose (skinny 1×4096×4096 1.9× slower with either).
// `wide` follows `large` without its own measurement.
#define WIDE_FRAGMENTS (TN >= 8)
// Asynchronous k-tile copies (`cp.async`, sm_80 and later) for the tiles whose catalog entry
// asks for them (TILE_ASYNC: `skinny`, `wide`, `wide64`): the k-tiles go from global to
// shared memory without passing through registers, ASYNC_STAGES deep, so the next tiles'
// loads are in flight while this one's MACs run. The same elements, zero-padded the same way, reach shared
// memory, so C, ES and the status block are those of the register-staged loop (the GPU
// tests compare them bit for bit with the reference). Measured on the H100 (evidence/h100-2026-11-23-async/): `wide` 1.10-1.44x and
// `skinny` (with BK = 16, the widest k-tile whose stages fit) 1.11-1.28x faster at
// 1 and 8 x 4096 x 4096 (0.96-1.05x at 4 x 1000 x 768); but `large` 0.91-0.99x, `small`
// 0.81-1.01x and a fold at every MAC (level I) on `wide` 0.93-0.95x the speed of register
// staging: those keep the register-staged loop, as does the fault-injection build (its
// input injections flip loaded words in registers).
#ifndef TILE_ASYNC
#define TILE_ASYNC 0
#endif
#ifndef ASYNC_COPY
#define ASYNC_COPY (TILE_ASYNC && !SAFEMON_INJECT && !(WIDE_FRAGMENTS && SIG_I != SIG_NONE))
#endif
// Column swizzle of the B tile: 4 padding words after every 32 columns. A quarter-warp reading
// float4 fragments at tx*TN with TN = 8 would otherwise hit each bank twice; with the pad the
// eight 16-byte reads of a phase fall on 32 different banks. Groups of 4 columns stay
// contiguous and 16-byte aligned (TN and the vector width divide 32).
#define B_COL(n) ((n) + (WIDE_FRAGMENTS ? ((n) >> 5) * 4 : 0))
#define BN_PADDED B_COL(BN)
// Elements of a k-tile each thread loads (rounded up: when a tile has fewer elements than
// the block has threads, as A of `skinny` in an RMT build, the threads past the end load
// nothing; A_PARTIAL / B_PARTIAL say so).
#define A_LOADS ((BM * BK + BLOCK_THREADS - 1) / BLOCK_THREADS)
#define B_LOADS ((BK * BN + BLOCK_THREADS - 1) / BLOCK_THREADS)
#define A_PARTIAL ((BM * BK) % BLOCK_THREADS != 0)
#define B_PARTIAL ((BK * BN) % BLOCK_THREADS != 0)
#ifndef A_KMAJOR
#define A_KMAJOR 0
#endif
#if A_KMAJOR
// A arrives transposed (A_KMAJOR: the host passes Aᵀ, K×M row-major, element (r, k) at
// A[k·M + r]): a k-tile of A is BK rows of BM consecutive words, copied like B's in runs of VA
// along m, straight into the transposed shared tile. Asynchronous copies only.
#define VA (A_LOADS % 4 == 0 ? 4 : A_LOADS % 2 == 0 ? 2 : 1)
#else
#define VA (!WIDE_FRAGMENTS ? 1 : A_LOADS % 4 == 0 && BK % 4 == 0 ? 4 : A_LOADS % 2 == 0 && BK % 2 == 0 ? 2 : 1)
#endif
#define VB (!(WIDE_FRAGMENTS || ASYNC_COPY) ? 1 : B_LOADS % 4 == 0 ? 4 : B_LOADS % 2 == 0 ? 2 : 1)
// Shared-memory stages: two (the next k-tile is stored while this one is read, one barrier per
// k-tile) when both fit in 40 KiB of static shared memory, else one (two barriers per k-tile);
// one in the ABFT campaign build, whose verdict needs the shared memory. The next k-tile is
// loaded after this one's MACs: issuing its loads before them (register prefetch) measured
// slower on every tile (H100), as the registers it holds cost more than the latency it hides
// with two or more blocks per SM. Measured again on 2026-11-24 for `large`
// (evidence/h100-2026-11-24-rmt-block/kernel/): prefetch 0.85x at 4096³, and one block per SM
// with the registers that frees 0.60-0.62x, with or without prefetch or 16-wide k-tiles,
// although Nsight Compute puts a fifth of the stall cycles on these loads.
#define STAGE_BYTES (4 * (BK * (BM + A_PAD) + BK * BN_PADDED))
#if 2 * STAGE_BYTES <= 40960 && !(SAFEMON_INJECT && SAFEMON_ABFT_VERDICT)
#define STAGES 2
#else
#define STAGES 1
#endif
// Blocks per SM the compiler must fit in registers (at most 128 registers per thread for
// 256-thread blocks): the register tile of `large` otherwise grows past 128 and halves
// occupancy. 1 for blocks of 512 threads or more, and for tiles whose threads load more than
// 32 B elements per k-tile (the 32-wide `skinny` of earlier kernels; no catalog tile today)
// or more than 64 accumulators (a register tile that cannot fit 128 registers).
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (BLOCK_THREADS >= 512 || B_LOADS > 32 || TM * TN > 64 ? 1 : 512 / BLOCK_THREADS)
#endif

#if ASYNC_COPY
// Three stages when they fit the 48 KiB of static shared memory (`wide`), else two
// (`skinny`: 17.2 KB each).
#ifndef ASYNC_STAGES
#define ASYNC_STAGES (3 * STAGE_BYTES <= 49152 ? 3 : 2)
#endif
#undef STAGES
#define STAGES ASYNC_STAGES
static_assert(!SAFEMON_INJECT, "the injection build flips loaded words in registers");
static_assert(ASYNC_STAGES == 2 || ASYNC_STAGES == 3, "the k loop is written for 2 or 3 stages");
#endif
#if A_KMAJOR && !ASYNC_COPY
#error "A_KMAJOR needs asynchronous copies (TILE_ASYNC, no injection, no fold at every MAC)"
#endif

// Lane map (LANE_MAP, the catalog's `Variant.kernel_schedule`): which logical thread t
// (the ES row's thread, the owner of sub-tile (ty, tx)) launched thread h runs. The logical
// threads, their sub-tiles, MACs and folds are the same under every map, so C and ES are too;
// only which lane of which warp runs them changes, and with it how many shared-memory
// wavefronts a warp's float4 fragment reads take.
//   0: t = h (a warp runs consecutive logical threads, lanes along a thread row).
//   1: a warp runs 2 thread rows × 16 columns, lane bit 0 picking the row.
//   2: a warp runs 4 thread rows × 8 columns, lane bits 0 and 4 picking the row.
// Under 1 and 2 lanes l and l^1 read the same B fragment (same column) and lanes l and l^2 the
// same A fragment (same row), the pairings that let the shared-memory unit return two
// registers per wavefront for a warp's 16-byte reads (Nsight Compute, `large` at 4096³: 487 M
// shared-load wavefronts under map 0, 352 M under 1 or 2; evidence/h100-2026-11-25-lanemap/).
#ifndef LANE_MAP
#define LANE_MAP 0
#endif
// MAC order (MAC_ORDER, the catalog's `Variant.kernel_schedule`): 0, Algorithm 1's order of
// one k step's MACs, each followed by its folds; 1, rows outer and columns in serpentine
// order, so that consecutive MACs share an operand (the order CUTLASS's SIMT kernels use).
// The same C and ES; the compiler's register allocation and schedule differ (`large` on the
// H100: unprotected 1.06-1.07x and twos/M 1.03-1.04x faster at 2048³ and 4096³;
// evidence/h100-2026-11-25-lanemap/). Builds with a fold at every MAC (level I) and the
// injection build keep order 0. Rows alternate direction; with level M the last row runs
// forward (SERPENTINE_FORWARD_PARITY), so that its folds come in column order.
#ifndef MAC_ORDER
#define MAC_ORDER 0
#endif
static_assert(MAC_ORDER == 0 || (MAC_ORDER == 1 && SIG_I == SIG_NONE),
              "MAC order 1: builds without a fold at every MAC");
#define SERPENTINE_FORWARD_PARITY (SIG_M != SIG_NONE ? (TM - 1) & 1 : 0)
// KSTEP_ROLLED: the k steps of a k-tile run as a loop instead of unrolled. A CRC-32C fold at
// every MAC (level I) chains 12·TM·TN dependent table reads per k step. Fully unrolled over the
// k-tile, ptxas spent up to minutes on one build: nvcc 144 s for crc32c/I/exact/skinny and 43 s
// for crc32c/I/fma/large on a 2-core host, 1.2 s and 3.9 s rolled; on the H100 machine the first
// GPU test of a crc32c/I build took 70–288 s, nearly all compiling
// (evidence/h100-2026-11-25-stop49/). The loop runs the same operations in the same order (C and
// ES are the same bits) and only the k step index becomes a register. Default: rolled exactly for
// crc32c at level I.
#ifndef KSTEP_ROLLED
#define KSTEP_ROLLED (SIG_I == SIG_CRC32C)
#endif
#if KSTEP_ROLLED
#define SAFEMON_KSTEP_UNROLL _Pragma("unroll 1")
#else
#define SAFEMON_KSTEP_UNROLL _Pragma("unroll")
#endif
#define THREADS_X (BN / TN)
#define THREADS_Y (BM / TM)
static_assert(LANE_MAP == 0 || (!RMT_WARP && THREADS % 32 == 0), "lane maps: whole warps, no RMT");
static_assert(LANE_MAP != 1 || (THREADS_X % 16 == 0 && THREADS_Y % 2 == 0), "lane map 1: 2x16 warps");
static_assert(LANE_MAP != 2 || (THREADS_X % 8 == 0 && THREADS_Y % 4 == 0), "lane map 2: 4x8 warps");
__device__ __forceinline__ int logical_thread(int h) {
#if LANE_MAP == 1 || LANE_MAP == 2
    constexpr int WARP_X = LANE_MAP == 1 ? 16 : 8;  // thread columns per warp
    const int w = h >> 5, lane = h & 31;
    const int wx = w % (THREADS_X / WARP_X), wy = w / (THREADS_X / WARP_X);
#if LANE_MAP == 1
    const int row = wy * 2 + (lane & 1), col = wx * 16 + (lane >> 1);
#else
    const int row = wy * 4 + ((lane & 1) | ((lane >> 4) & 1) << 1);
    const int col = wx * 8 + ((lane >> 1) & 7);
#endif
    return row * THREADS_X + col;
#else
    return h;
#endif
}

static_assert(TM % 4 == 0 && TN % 4 == 0, "fragments are read as float4");
static_assert((!A_PARTIAL || BM * BK < BLOCK_THREADS) && (!B_PARTIAL || BK * BN < BLOCK_THREADS),
              "tile loads must split evenly, or take one element per thread");
static_assert(BLOCK_THREADS % 32 == 0 || !RMT_WARP, "RMT pairs lanes of whole warps");

// The multiply-accumulate, written in PTX so that its IEEE semantics do not depend on compiler
// flags: CuPy appends -ftz=true to every NVRTC compile (after our --ftz=false, so it wins), and
// with it the compiler emits .ftz arithmetic that flushes subnormal operands and results to
// zero, while nvcc and the NumPy reference keep them. An instruction written in inline PTX is
// emitted as written: no .ftz, never contracted, round-to-nearest-even.
__device__ __forceinline__ float safemon_mac(float acc, float a, float b) {
    float out;
#if MODE_FMA
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(out) : "f"(a), "f"(b), "f"(acc));
#else
    float p;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(p) : "f"(a), "f"(b));
    asm("add.rn.f32 %0, %1, %2;" : "=f"(out) : "f"(acc), "f"(p));
#endif
    return out;
}

// Whether float bits `u` are NaN or infinite (all exponent bits set): integer instructions
// only, so that exact builds stay free of FMA (the PTX audit's rule) and nothing rounds.
__device__ __forceinline__ bool nonfinite_bits(unsigned u) {
    return (u & 0x7F800000u) == 0x7F800000u;
}

// Load src[at .. at + V) into out[0 .. V): a run of V consecutive elements of one matrix row,
// of which those with `in_row` and q < `left` exist (`left`: elements from the run's start to
// the row's end); the rest are zero padding. With `vector` (the row length is a multiple of V
// and the base V-aligned, so `at` is too) a run whose start exists is whole and takes one
// V-wide load; otherwise every element is loaded alone.
template <int V>
__device__ __forceinline__ void load_run(const float* __restrict__ src, long long at, bool in_row,
                                         int left, bool vector, float* out) {
    if (V > 1 && vector && in_row && left > 0) {
        if (V == 4) {
            const float4 v = *reinterpret_cast<const float4*>(src + at);
            out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
        } else {
            const float2 v = *reinterpret_cast<const float2*>(src + at);
            out[0] = v.x; out[1] = v.y;
        }
    } else {
#pragma unroll
        for (int q = 0; q < V; ++q) out[q] = (in_row && q < left) ? src[at + q] : 0.0f;
    }
}

#if ASYNC_COPY
// cp.async of `bytes` (4, 8 or 16) from global `src` to shared `dst`; with `valid` false
// nothing is read and the bytes are zero-filled (src-size 0). 16-byte copies bypass L1 (.cg).
template <int BYTES>
__device__ __forceinline__ void async_copy(float* dst, const float* src, bool valid) {
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    const int size = valid ? BYTES : 0;
    if (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(src), "r"(size)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(to), "l"(src),
                     "n"(BYTES), "r"(size)
                     : "memory");
}
// Queue the copy of the run of V words at row r, columns c .. c + V − 1 of the row-major
// rows×cols matrix `src` into dst[0 .. V): one V-wide copy when `vector` (cols a multiple of V
// and src V-aligned, so that the run is whole or wholly outside), else one copy per word.
// Words outside the matrix are zero-filled, never read.
template <int V>
__device__ __forceinline__ void async_copy_run(float* dst, const float* src, int r, int c,
                                               int rows, int cols, bool vector) {
    if (vector) {
        const bool valid = r < rows && c < cols;
        async_copy<4 * V>(dst, valid ? src + ((long long)r * cols + c) : src, valid);
    } else {
#pragma unroll
        for (int q = 0; q < V; ++q) {
            const bool valid = r < rows && c + q < cols;
            async_copy<4>(dst + q, valid ? src + ((long long)r * cols + c + q) : src, valid);
        }
    }
}
__device__ __forceinline__ void async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
#endif

#if SAFEMON_INJECT
// Fault-injection arguments (one struct per launch; blockIdx.z selects the injection).
// target: 0 none, 1 operand a, 2 operand b, 3 accumulator, 4 ES word, 5 input A element, 6 input B element
struct Injection {
    int target;
    int thread;   // global thread id g (targets 1-4); -1 with scope 2 means every thread of `block`
    int block;    // linear block id for scope 2
    int kstep;    // padded k step of the fault (targets 1-3), ignored when permanent
    int index;    // i (target 1), j (target 2), i*TN+j (target 3), ES word (target 4), element (5, 6)
    int bit;      // bit to flip (0..31)
    int scope;    // 0 transient (one k step), 1 permanent in one thread, 2 permanent in one block
    int copy;     // RMT builds: the replica (0 or 1) the fault hits, -1 both; others ignore it
};
#ifndef SAFEMON_ABFT_VERDICT
#define SAFEMON_ABFT_VERDICT 0
#endif
#if SAFEMON_ABFT_VERDICT
// ABFT campaign arguments: the golden product's signed column residuals (gy×N), their
// tolerances, the row residuals (M×gx) and theirs (safemon/kernels/abft.py), and per injection
// the largest |ΔC|/max(|C|, 2^-126) of the stored C as float bits.
#define ABFT_ARGS , const double* __restrict__ abft_ref, unsigned* __restrict__ rel_err
#else
#define ABFT_ARGS
#endif
#define INJ_ARGS , const Injection* __restrict__ injections, unsigned* __restrict__ verdicts, \
                 const unsigned* __restrict__ golden_es, const float* __restrict__ golden_c ABFT_ARGS
#define STATUS_ARG
#else
#define INJ_ARGS
#define STATUS_ARG , unsigned* __restrict__ status
#define STATUS_A 0
#define STATUS_B 1
#endif
#if SAFEMON_RECORD_SM
#define SM_ARGS , unsigned* __restrict__ SM
#else
#define SM_ARGS
#endif
#if RMT_BLOCK
// Inter-block RMT buffers. rmt_buf receives the C tiles that are not C's own: in production
// builds copy 1's, laid out like the partial products (gridDim.z × M × N); in the injection
// build both copies' (gridDim.z × 2 × M × N, copy-major, since C is not stored there).
// rmt_count holds one arrival counter per tile, indexed by the tile's linear id over
// (z, by, bx); every counter is zero at launch (the host clears them with each launch).
#define RMT_ARGS , float* __restrict__ rmt_buf, unsigned* __restrict__ rmt_count
#else
#define RMT_ARGS
#endif

#if SAFEMON_INJECT && SAFEMON_ABFT_VERDICT
// Campaign model of abft.cu for one injected copy of the product: a fault reaches one block
// only, so the block sums its C errors per tile column and row and compares golden residual +
// error with the golden tolerance. Returns verdict bit 3 when the device check would fail (or
// C is not finite). The tolerance's Σ|C| term is the golden one: the difference is below 2^-50
// of the error itself. Deterministic: each thread writes the partial sums of its own rows and
// columns to shared memory (no atomics), then one thread per tile column (row) adds them in a
// fixed order. Conversions are written in PTX (CuPy's -ftz=true would flush subnormals).
__device__ __forceinline__ double inj_widen(float x) {
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(x));
    return d;
}
__device__ __forceinline__ unsigned inj_narrow_bits(double x) {  // non-negative x, as float bits
    float f;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(f) : "d"(x));
    return __float_as_uint(f);
}
__device__ unsigned abft_verdict(const float (&acc)[TM][TN], const float* __restrict__ golden_c,
                                 const double* __restrict__ ref, unsigned* __restrict__ rel_err,
                                 int M, int N, int row0, int col0, int tx, int ty, bool stored) {
    __shared__ double col_part[BM / TM][BN];  // [ty][column]: Σ over the thread's TM rows
    __shared__ double row_part[BN / TN][BM];  // [tx][row]: Σ over the thread's TN columns
    __shared__ unsigned bad;
    if (threadIdx.x == 0) bad = 0u;
    double col_sum[TN], row_sum[TM];
#pragma unroll
    for (int j = 0; j < TN; ++j) col_sum[j] = 0.0;
#pragma unroll
    for (int i = 0; i < TM; ++i) row_sum[i] = 0.0;
    unsigned worst = 0u, nonfinite = 0u;
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) {
            const int r = row0 + ty * TM + i, c = col0 + tx * TN + j;
            if (!stored || r >= M || c >= N) continue;
            const float g = golden_c[(long long)r * N + c];
            if (__float_as_uint(acc[i][j]) == __float_as_uint(g)) continue;
            if ((__float_as_uint(acc[i][j]) & 0x7F800000u) == 0x7F800000u) {
                nonfinite = 1u;
                worst = 0x7F800000u;
                continue;
            }
            const double d = inj_widen(acc[i][j]) - inj_widen(g);
            col_sum[j] += d;
            row_sum[i] += d;
            const unsigned rel = inj_narrow_bits(fabs(d) / fmax(fabs(inj_widen(g)), 0x1p-126));
            worst = rel > worst ? rel : worst;
        }
    if (stored) {
#pragma unroll
        for (int j = 0; j < TN; ++j) col_part[ty][tx * TN + j] = col_sum[j];
#pragma unroll
        for (int i = 0; i < TM; ++i) row_part[tx][ty * TM + i] = row_sum[i];
    }
    __syncthreads();
    const int gx = (N + BN - 1) / BN, gy = (M + BM - 1) / BM;
    const double* col_res = ref;
    const double* col_tol = ref + (long long)gy * N;
    const double* row_res = col_tol + (long long)gy * N;
    const double* row_tol = row_res + (long long)M * gx;
    unsigned mine = nonfinite;
    for (int i = threadIdx.x; i < BN; i += BLOCK_THREADS) {
        double e = 0.0;
        for (int q = 0; q < BM / TM; ++q) e += col_part[q][i];
        const int c = col0 + i;
        const long long at = (long long)(row0 / BM) * N + c;
        if (c < N && e != 0.0 && !(fabs(col_res[at] + e) <= col_tol[at])) mine = 1u;
    }
    for (int i = threadIdx.x; i < BM; i += BLOCK_THREADS) {
        double e = 0.0;
        for (int q = 0; q < BN / TN; ++q) e += row_part[q][i];
        const int r = row0 + i;
        const long long at = (long long)r * gx + col0 / BN;
        if (r < M && e != 0.0 && !(fabs(row_res[at] + e) <= row_tol[at])) mine = 1u;
    }
    if (worst) atomicMax(&rel_err[blockIdx.z], worst);
    if (mine) atomicOr(&bad, 1u);
    __syncthreads();
    return bad ? 8u : 0u;
}
#endif

#if !SAFEMON_INJECT
// The second look of the finite check (header), for a block with a non-finite accumulator
// only: sets `bad_a` (`bad_b`) when an element of A (B) that this block loaded is NaN or
// infinite, this thread reading every BLOCK_THREADS-th of the block's A rows × K-slice and
// K-slice × B columns. A arrives as the kernel reads it: Aᵀ (K×M) in A_KMAJOR builds, whose
// transpose moved the same bits. Until 2026-11-25 every loaded element went through an FMA
// (v·0 into a running sum) inside the k loop instead, and with asynchronous copies each
// thread read its copies back from shared memory for it. On the H100
// (evidence/h100-2026-11-25-stop47/, kernel_compare, same C and ES bits) removing that made
// ones/M 1.03-1.05× faster and the unprotected kernel 1.00-1.04× (call 2); the change as it
// stands ran at 0.97-1.09× the speed of the per-load check over 49 shape × variant pairs
// (call 3), 1.10× for the unprotected kernel and 1.07× for ones/M at 4096³ (call 10).
__device__ __forceinline__ void nonfinite_in(const float* __restrict__ A, const float* __restrict__ B,
                                              int M, int N, int K, int row0, int col0, int k_begin,
                                              int k_stop, bool& bad_a, bool& bad_b) {
    const int rows = min(BM, M - row0), cols = min(BN, N - col0), ks = k_stop - k_begin;
    for (int e = threadIdx.x; e < rows * ks; e += BLOCK_THREADS) {
#if A_KMAJOR  // consecutive threads along m: consecutive words of Aᵀ's row k
        const int r = row0 + e % rows, k = k_begin + e / rows;
        const float v = A[(long long)k * M + r];
#else
        const int r = row0 + e / ks, k = k_begin + e % ks;
        const float v = A[(long long)r * K + k];
#endif
        bad_a |= nonfinite_bits(__float_as_uint(v));
    }
    for (int e = threadIdx.x; e < ks * cols; e += BLOCK_THREADS) {
        const int k = k_begin + e / cols, c = col0 + e % cols;
        bad_b |= nonfinite_bits(__float_as_uint(B[(long long)k * N + c]));
    }
}
#endif

extern "C" __global__ void __launch_bounds__(BLOCK_THREADS, MIN_BLOCKS)
safemon_mmm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
            unsigned* __restrict__ ES, int M, int N, int K STATUS_ARG INJ_ARGS SM_ARGS RMT_ARGS) {
    // One array per stage (not one array indexed by the stage), so that the PTX audit sees
    // that a k-tile's reads and the next k-tile's stores touch different shared symbols.
    __shared__ __align__(16) float As0[BK][BM + A_PAD];  // transposed: As[k][m]
    __shared__ __align__(16) float Bs0[BK][BN_PADDED];   // Bs[k][B_COL(n)]
#if STAGES >= 2
    __shared__ __align__(16) float As1[BK][BM + A_PAD];
    __shared__ __align__(16) float Bs1[BK][BN_PADDED];
#endif
#if STAGES >= 3
    __shared__ __align__(16) float As2[BK][BM + A_PAD];
    __shared__ __align__(16) float Bs2[BK][BN_PADDED];
#endif
#if USES_CRC
    __shared__ unsigned crc_table[256];
    for (int i = threadIdx.x; i < 256; i += BLOCK_THREADS) crc_table[i] = SAFEMON_CRC32C_TABLE[i];
    const unsigned* table = crc_table;  // made visible by the first tile's __syncthreads
#else
    const unsigned* table = nullptr;
#endif
#if RMT_WARP
    const int lt = threadIdx.x >> 1;       // logical thread: lanes 2l, 2l+1 are its replicas
    const int copy = threadIdx.x & 1;      // replica 0 stores; replica 1 only checks
    const int t = lt;
#else
    const int t = logical_thread(threadIdx.x);
#endif
    const int tx = t % (BN / TN);
    const int ty = t / (BN / TN);
#if RMT_BLOCK
    // Inter-block RMT: tile row by is computed by block row by (copy 0) and by block row
    // gy + by (copy 1). The pairing is a pure function of the grid; which SMs run the two
    // blocks is the hardware scheduler's choice (docs/RMT.md).
    const unsigned gy = gridDim.y >> 1;
    const int copy = blockIdx.y >= gy;  // copy 0 stores C and ES; copy 1 only checks
    const unsigned by = blockIdx.y - copy * gy;
#else
    const unsigned gy = gridDim.y;  // tile rows
    const unsigned by = blockIdx.y;  // this block's tile row
#endif
    const int row0 = by * BM;
    const int col0 = blockIdx.x * BN;
#if SAFEMON_INJECT
    const long long block_id = (long long)by * gridDim.x + blockIdx.x;
    const int k_begin = 0, k_stop = K;
#else
    const long long block_id = ((long long)blockIdx.z * gy + by) * gridDim.x + blockIdx.x;
    const int ktiles = (K + BK - 1) / BK;
    const int slice_tiles = (ktiles + (int)gridDim.z - 1) / (int)gridDim.z;
    const int k_begin = (int)blockIdx.z * slice_tiles * BK;
    const int k_stop = min(K, k_begin + slice_tiles * BK);
    C += (long long)blockIdx.z * M * N;  // this slice's partial product
#endif
    const long long g = block_id * THREADS + t;
#if SAFEMON_RECORD_SM
    // Self-test coverage: which SM ran this block (PTX special register %smid). Inter-block
    // RMT builds record copy 1's blocks after copy 0's.
    if (t == 0) {
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
#if RMT_BLOCK
        SM[block_id + (long long)copy * gridDim.z * gy * gridDim.x] = smid;
#else
        SM[block_id] = smid;
#endif
    }
#endif

#if !SAFEMON_INJECT
    if (status != nullptr) {
        const uint4 s = *reinterpret_cast<const uint4*>(status);
        if (s.x | s.y | s.z | s.w) {  // an input check failed: release nothing usable
#if RMT_WARP || RMT_BLOCK
            if (copy != 0) return;  // replica 1 stores nothing (no block ever waits on another)
#endif
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j) {
                    const int r = row0 + ty * TM + i, c = col0 + tx * TN + j;
                    if (r < M && c < N) C[(long long)r * N + c] = __uint_as_float(0x7FFFFFFFu);
                }
            for (int w = 0; w < ES_WORDS; ++w) ES[g * ES_WORDS + w] = 0xFFFFFFFFu;
            return;  // uniform over the block, before any barrier
        }
    }
#endif

#if SAFEMON_INJECT
    const Injection inj = injections[blockIdx.z];
#if RMT_WARP || RMT_BLOCK
    const bool inj_copy = inj.copy < 0 || inj.copy == copy;
#else
    const bool inj_copy = true;
#endif
    const bool inj_thread =
        ((inj.scope == 2) ? (block_id == inj.block) : (g == inj.thread)) && inj_copy;
    const unsigned inj_mask = 1u << inj.bit;
    // A block the fault cannot reach computes exactly the golden values (verdict 0), so it
    // leaves at once; the whole block leaves together, before any barrier. An element of A
    // row r is read only by block row r / BM, one of B column c only by block column c / BN.
    if (inj.target == 5 && (inj.index / K) / BM != (int)by) return;
    if (inj.target == 6 && (inj.index % N) / BN != (int)blockIdx.x) return;
    if (inj.target >= 1 && inj.target <= 3 && inj.scope == 2 && inj.block != block_id) return;
    if (((inj.target >= 1 && inj.target <= 3 && inj.scope != 2) || inj.target == 4) &&
        (inj.thread < 0 || inj.thread / THREADS != block_id))
        return;
#endif

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    Sig<SIG_I> sig_i;
    Sig<SIG_M> sig_m;
    Sig<SIG_E> sig_e;
    Sig<SIG_F> sig_f;
    Sig<SIG_T> sig_t;

    // Vector loads need K (N) a multiple of the width and A (B) aligned to it; otherwise every
    // element is loaded alone. Either way the same elements, zero-padded, reach shared memory.
    const bool vec_b = N % VB == 0 && (reinterpret_cast<unsigned long long>(B) % (4 * VB)) == 0;
#if A_KMAJOR
    const bool vec_a = M % VA == 0 && (reinterpret_cast<unsigned long long>(A) % (4 * VA)) == 0;
#endif
#if !ASYNC_COPY
    const bool vec_a = K % VA == 0 && (reinterpret_cast<unsigned long long>(A) % (4 * VA)) == 0;
    float ra[A_LOADS], rb[B_LOADS];  // the next k-tile, between global and shared memory
    // Load the k-tile at k0 from global memory into ra/rb (zero outside A and B), through
    // the input injection in the campaign build.
    auto load_tile = [&](int k0) {
#pragma unroll
        for (int r = 0; r < A_LOADS / VA; ++r) {
            const int e = ((int)threadIdx.x + r * BLOCK_THREADS) * VA;
            if (A_PARTIAL && e >= BM * BK) break;
            const int gr = row0 + e / BK, gk = k0 + e % BK;
            const long long at = (long long)gr * K + gk;
            load_run<VA>(A, at, gr < M, K - gk, vec_a, ra + r * VA);
#if SAFEMON_INJECT
#pragma unroll
            for (int q = 0; q < VA; ++q)
                if (inj.target == 5 && gr < M && gk + q < K && at + q == inj.index)
                    ra[r * VA + q] = __uint_as_float(__float_as_uint(ra[r * VA + q]) ^ inj_mask);
#endif
        }
#pragma unroll
        for (int r = 0; r < B_LOADS / VB; ++r) {
            const int e = ((int)threadIdx.x + r * BLOCK_THREADS) * VB;
            if (B_PARTIAL && e >= BK * BN) break;
            const int gk = k0 + e / BN, gc = col0 + e % BN;
            const long long at = (long long)gk * N + gc;
            load_run<VB>(B, at, gk < K, N - gc, vec_b, rb + r * VB);
#if SAFEMON_INJECT
#pragma unroll
            for (int q = 0; q < VB; ++q)
                if (inj.target == 6 && gk < K && gc + q < N && at + q == inj.index)
                    rb[r * VB + q] = __uint_as_float(__float_as_uint(rb[r * VB + q]) ^ inj_mask);
#endif
        }
    };
    // Store ra/rb into one stage's shared arrays.
    auto store_tile = [&](float (&As)[BK][BM + A_PAD], float (&Bs)[BK][BN_PADDED]) {
#pragma unroll
        for (int r = 0; r < A_LOADS / VA; ++r) {
            const int e = ((int)threadIdx.x + r * BLOCK_THREADS) * VA;
            if (A_PARTIAL && e >= BM * BK) break;
#pragma unroll
            for (int q = 0; q < VA; ++q) As[e % BK + q][e / BK] = ra[r * VA + q];
        }
#pragma unroll
        for (int r = 0; r < B_LOADS / VB; ++r) {
            const int e = ((int)threadIdx.x + r * BLOCK_THREADS) * VB;
            if (B_PARTIAL && e >= BK * BN) break;
            float* dst = &Bs[e / BN][B_COL(e % BN)];
            if (VB == 4) {
                *reinterpret_cast<float4*>(dst) =
                    make_float4(rb[r * VB], rb[r * VB + 1], rb[r * VB + 2], rb[r * VB + 3]);
            } else {
#pragma unroll
                for (int q = 0; q < VB; ++q) dst[q] = rb[r * VB + q];
            }
        }
    };
#endif

    // One k-tile's MACs and folds, from (As, Bs).
    auto macs = [&](int k0, float (&As)[BK][BM + A_PAD], float (&Bs)[BK][BN_PADDED]) {
        SAFEMON_KSTEP_UNROLL
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[kk][ty * TM + i]);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[kk][B_COL(tx * TN + j)]);
                b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
#if SAFEMON_INJECT
            const bool inj_now = inj_thread && (inj.scope != 0 || k0 + kk == inj.kstep);
            if (inj_now && inj.target == 1)
#pragma unroll
                for (int i = 0; i < TM; ++i)
                    if (i == inj.index) a[i] = __uint_as_float(__float_as_uint(a[i]) ^ inj_mask);
            if (inj_now && inj.target == 2)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    if (j == inj.index) b[j] = __uint_as_float(__float_as_uint(b[j]) ^ inj_mask);
#endif
#if SIG_F != SIG_NONE
#pragma unroll
            for (int i = 0; i < TM; ++i) sig_f.fold(__float_as_uint(a[i]), table);
#pragma unroll
            for (int j = 0; j < TN; ++j) sig_f.fold(__float_as_uint(b[j]), table);
#endif
#if MAC_ORDER != 0 && !SAFEMON_INJECT
            // MAC order 1: the step's independent MACs rows outer, columns in serpentine order.
            // Level M folds each column's last accumulator, acc[TM − 1][j], after its MAC, in
            // column order; level E folds acc[TM − 1][TN − 1] after the step (below); no build
            // with order 1 folds at every MAC (I). So the folds see the same values in the same
            // order as under order 0.
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int p = 0; p < TN; ++p) {
                    const int j = ((i ^ SERPENTINE_FORWARD_PARITY) & 1) ? TN - 1 - p : p;
                    acc[i][j] = safemon_mac(acc[i][j], a[i], b[j]);
#if SIG_M != SIG_NONE
                    // Row TM − 1 runs forward: its MACs end the columns in Algorithm 1's order.
                    if (i == TM - 1) sig_m.fold(__float_as_uint(acc[TM - 1][j]), table);
#endif
                }
#else
            // Algorithm 1 of the seed: this k step is one step of the outer loop; the middle
            // loop walks the B-tile columns j, the inner loop the A-tile rows i.
#pragma unroll
            for (int j = 0; j < TN; ++j) {
#pragma unroll
                for (int i = 0; i < TM; ++i) {
                    acc[i][j] = safemon_mac(acc[i][j], a[i], b[j]);
#if SAFEMON_INJECT
                    if (inj_now && inj.target == 3 && i * TN + j == inj.index)
                        acc[i][j] = __uint_as_float(__float_as_uint(acc[i][j]) ^ inj_mask);
#endif
#if SIG_I != SIG_NONE
                    sig_i.fold(__float_as_uint(a[i]), table);
                    sig_i.fold(__float_as_uint(b[j]), table);
                    sig_i.fold(__float_as_uint(acc[i][j]), table);
#endif
                }
#if SIG_M != SIG_NONE
                sig_m.fold(__float_as_uint(acc[TM - 1][j]), table);
#endif
            }
#endif  // MAC_ORDER
#if SIG_E != SIG_NONE
            sig_e.fold(__float_as_uint(acc[TM - 1][TN - 1]), table);
#endif
        }
#if SIG_T != SIG_NONE
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) sig_t.fold(__float_as_uint(acc[i][j]), table);
#endif
        // Bounds the ones' complement policy's wide sum (signature.cuh); nothing for the others.
        sig_i.tile_end();
        sig_m.tile_end();
        sig_e.tile_end();
        sig_f.tile_end();
        sig_t.tile_end();
    };

#if ASYNC_COPY
    // Queue the copies of the k-tile at k0 into (As, Bs), one commit group per k-tile (an
    // empty one past k_stop, so that every thread counts the same groups). A is stored
    // transposed, one word per copy (from Aᵀ with A_KMAJOR, a run of VA words as for B); a B
    // run of VB words is one copy when it may be loaded as a vector (vec_b), else one copy per
    // word.
    auto issue_tile = [&](int k0, float (&As)[BK][BM + A_PAD], float (&Bs)[BK][BN_PADDED]) {
        if (k0 < k_stop) {
#pragma unroll
            for (int r = 0; r < A_LOADS / VA; ++r) {
                const int e = ((int)threadIdx.x + r * BLOCK_THREADS) * VA;
                if (A_PARTIAL && e >= BM * BK) break;
#if A_KMAJOR  // Aᵀ is K×M: row k0 + e / BM, column row0 + e % BM
                async_copy_run<VA>(&As[e / BM][e % BM], A, k0 + e / BM, row0 + e % BM, K, M, vec_a);
#else
                const int gr = row0 + e / BK, gk = k0 + e % BK;
#pragma unroll
                for (int q = 0; q < VA; ++q) {
                    const bool valid = gr < M && gk + q < K;
                    async_copy<4>(&As[e % BK + q][e / BK],
                                  valid ? A + ((long long)gr * K + gk + q) : A, valid);
                }
#endif
            }
#pragma unroll
            for (int r = 0; r < B_LOADS / VB; ++r) {
                const int e = ((int)threadIdx.x + r * BLOCK_THREADS) * VB;
                if (B_PARTIAL && e >= BK * BN) break;
                async_copy_run<VB>(&Bs[e / BN][B_COL(e % BN)], B, k0 + e / BN, col0 + e % BN, K, N,
                                   vec_b);
            }
        }
        async_commit();
    };
    // One k-tile from (As, Bs): wait for this thread's copies of it, meet every thread (their
    // copies have landed, and they are done with the stage read one k-tile ago, which is
    // (As_far, Bs_far)), queue the k-tile STAGES − 1 ahead into that stage and run the MACs.
    // The copies queued here are read only after the next STAGES − 1 barriers, each preceded
    // by its wait.
    auto async_step = [&](int k0, float (&As)[BK][BM + A_PAD], float (&Bs)[BK][BN_PADDED],
                          float (&As_far)[BK][BM + A_PAD], float (&Bs_far)[BK][BN_PADDED]) {
        async_wait<STAGES - 2>();
        __syncthreads();
        issue_tile(k0 + (STAGES - 1) * BK, As_far, Bs_far);
        macs(k0, As, Bs);
    };
    issue_tile(k_begin, As0, Bs0);
#if STAGES == 3
    issue_tile(k_begin + BK, As1, Bs1);
    // Three k-tiles per trip, so that each step's stages are fixed arrays (k-tile t is read
    // from stage t mod 3); the exits are `break`s, as in the register-staged loop below.
    for (int k0 = k_begin; k0 < k_stop; k0 += BK) {
        async_step(k0, As0, Bs0, As2, Bs2);
        k0 += BK;
        if (k0 >= k_stop) break;
        async_step(k0, As1, Bs1, As0, Bs0);
        k0 += BK;
        if (k0 >= k_stop) break;
        async_step(k0, As2, Bs2, As1, Bs1);
    }
#else
    for (int k0 = k_begin; k0 < k_stop; k0 += BK) {
        async_step(k0, As0, Bs0, As1, Bs1);
        k0 += BK;
        if (k0 >= k_stop) break;
        async_step(k0, As1, Bs1, As0, Bs0);
    }
#endif
    async_wait<0>();  // only empty groups can remain; nothing is left in flight at exit
#else
    // One k-tile: run its MACs and folds from (As, Bs), then load the next k-tile and store
    // it into (As_next, Bs_next) (the same arrays with one stage, after a barrier), and wait
    // for every thread.
    auto step = [&](int k0, float (&As)[BK][BM + A_PAD], float (&Bs)[BK][BN_PADDED],
                    float (&As_next)[BK][BM + A_PAD], float (&Bs_next)[BK][BN_PADDED]) {
        const bool has_next = k0 + BK < k_stop;  // block-uniform
        macs(k0, As, Bs);
        if (has_next) {
            if (STAGES == 1) __syncthreads();  // every thread is done reading the only stage
            load_tile(k0 + BK);
            store_tile(As_next, Bs_next);
        }
        __syncthreads();
    };

    if (k_begin < k_stop) {
        load_tile(k_begin);
        store_tile(As0, Bs0);
    }
    __syncthreads();
#if STAGES == 2
    // Two k-tiles per trip, so that each step's stages are fixed arrays: even k-tiles are read
    // from stage 0, odd ones from stage 1. The exit after the first step is a `break`, so that
    // no path leads from it back to another first step (the PTX audit follows every path).
    for (int k0 = k_begin; k0 < k_stop; k0 += BK) {
        step(k0, As0, Bs0, As1, Bs1);
        k0 += BK;
        if (k0 >= k_stop) break;
        step(k0, As1, Bs1, As0, Bs0);
    }
#else
    // One stage: one k-tile per trip (two would only double the unrolled loop body).
    for (int k0 = k_begin; k0 < k_stop; k0 += BK) step(k0, As0, Bs0, As0, Bs0);
#endif
#endif  // ASYNC_COPY

#if !SAFEMON_INJECT
    // The finite check (header): only a block with a non-finite accumulator reads its inputs
    // again. `status` and the barrier's result are uniform over the block, so every thread
    // reaches every barrier below.
    bool nonfinite_acc = false;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) nonfinite_acc |= nonfinite_bits(__float_as_uint(acc[i][j]));
    if (status != nullptr && __syncthreads_or(nonfinite_acc) != 0) {
        bool mine_a = false, mine_b = false;
        nonfinite_in(A, B, M, N, K, row0, col0, k_begin, k_stop, mine_a, mine_b);
        const bool bad_a = __syncthreads_or(mine_a) != 0;
        const bool bad_b = __syncthreads_or(mine_b) != 0;
        if (bad_a || bad_b) {  // a non-finite input: release nothing of this tile, say which
#if RMT_WARP || RMT_BLOCK
            const bool stores = copy == 0;  // replica 1 never stores
#else
            const bool stores = true;
#endif
            if (stores) {
                for (int i = 0; i < TM; ++i)
                    for (int j = 0; j < TN; ++j) {
                        const int r = row0 + ty * TM + i, c = col0 + tx * TN + j;
                        if (r < M && c < N) C[(long long)r * N + c] = __uint_as_float(0x7FFFFFFFu);
                    }
                for (int w = 0; w < ES_WORDS; ++w) ES[g * ES_WORDS + w] = 0xFFFFFFFFu;
                if (t == 0) {
                    if (bad_a) atomicOr(&status[STATUS_A], 1u);
                    if (bad_b) atomicOr(&status[STATUS_B], 1u);
                }
            }
            return;  // the whole block: bad_a and bad_b are block-uniform
        }
    }
#endif

#if RMT_WARP
    // Output comparison of the sphere of replication: each replica sends every accumulator
    // bit pattern to its partner lane; any difference in any lane of the block fails the tile.
    bool pair_differs = false;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const unsigned mine = __float_as_uint(acc[i][j]);
            pair_differs |= mine != __shfl_xor_sync(0xFFFFFFFFu, mine, 1);
        }
    const bool tile_failed = __syncthreads_or(pair_differs) != 0;
#endif
    // This thread's in-range accumulators into `dst` (row-major M×N). A run of 4 columns is
    // one 16-byte store when N is a multiple of 4, `dst` is 16-byte aligned and the run lies
    // inside C (its first column is a multiple of 4, as TN is); otherwise each element is
    // stored alone. Either way the same words reach the same places.
    auto store_c = [&](float* __restrict__ dst) {
        const bool vec_c = N % 4 == 0 && (reinterpret_cast<unsigned long long>(dst) % 16) == 0;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int r = row0 + ty * TM + i;
            if (r >= M) continue;
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const int c = col0 + tx * TN + j;
                float* at = dst + (long long)r * N + c;
                if (vec_c && c + 3 < N) {
                    *reinterpret_cast<float4*>(at) =
                        make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
                } else {
#pragma unroll
                    for (int q = 0; q < 4; ++q)
                        if (c + q < N) at[q] = acc[i][j + q];
                }
            }
        }
    };
    // This thread's ES words into `out` (ES_WORDS of them).
    auto store_es = [&](unsigned* out) {
        int w = 0;
        if (Sig<SIG_I>::WORDS) { sig_i.store(out + w); w += Sig<SIG_I>::WORDS; }
        if (Sig<SIG_M>::WORDS) { sig_m.store(out + w); w += Sig<SIG_M>::WORDS; }
        if (Sig<SIG_E>::WORDS) { sig_e.store(out + w); w += Sig<SIG_E>::WORDS; }
        if (Sig<SIG_F>::WORDS) { sig_f.store(out + w); w += Sig<SIG_F>::WORDS; }
        if (Sig<SIG_T>::WORDS) { sig_t.store(out + w); }
    };
    // Poison for this thread's part of the tile: canonical NaN in C, 0xFFFFFFFF in its ES.
    auto store_poison = [&]() {
        for (int i = 0; i < TM; ++i)
            for (int j = 0; j < TN; ++j) {
                const int r = row0 + ty * TM + i, c = col0 + tx * TN + j;
                if (r < M && c < N) C[(long long)r * N + c] = __uint_as_float(0x7FFFFFFFu);
            }
        for (int w = 0; w < ES_WORDS; ++w) ES[g * ES_WORDS + w] = 0xFFFFFFFFu;
    };
#if RMT_BLOCK
    // Output comparison of inter-block RMT, through global memory. Each copy publishes its
    // tile (production: copy 0 its C and ES, where they belong, copy 1 its C in rmt_buf;
    // injection build: both C tiles in rmt_buf), then counts itself in at its tile's counter.
    // Whichever copy arrives second reads the other's tile back from L2 and compares it with
    // its own accumulators, bit for bit: the verdict is the same whichever copy comes first,
    // and no block ever waits for another (the pair need not be resident together).
#if SAFEMON_INJECT
    float* const own_c = rmt_buf + ((long long)blockIdx.z * 2 + copy) * M * N;
    const float* const other_c = rmt_buf + ((long long)blockIdx.z * 2 + (1 - copy)) * M * N;
    const long long pair_id = (long long)blockIdx.z * gy * gridDim.x + block_id;
#else
    float* const spare_c = rmt_buf + (long long)blockIdx.z * M * N;
    float* const own_c = copy == 0 ? C : spare_c;
    const float* const other_c = copy == 0 ? spare_c : C;
    const long long pair_id = block_id;
    if (copy == 0 && ES_WORDS > 0) store_es(ES + g * ES_WORDS);
#endif
    store_c(own_c);
    __threadfence();  // this thread's tile words are visible device-wide before the count
    __shared__ unsigned rmt_arrived;
    __syncthreads();
    if (t == 0) rmt_arrived = atomicAdd(&rmt_count[pair_id], 1u);
    __syncthreads();
    bool tile_failed = false;
    if (rmt_arrived != 0u) {  // block-uniform: the partner has published its whole tile
        __threadfence();
        bool differs = false;
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int r = row0 + ty * TM + i, c = col0 + tx * TN + j;
                if (r < M && c < N)
                    differs |= __float_as_uint(__ldcg(other_c + (long long)r * N + c)) !=
                               __float_as_uint(acc[i][j]);
            }
        tile_failed = __syncthreads_or(differs) != 0;
    }
#endif
#if SAFEMON_INJECT
    // Campaign mode: compare with the golden run instead of storing, one verdict word per
    // injection: bit 0 = ES differs, bit 1 = C differs (in range only), bit 2 = the RMT
    // replicas disagreed (RMT builds). With RMT, ES is replica 0's (the stored one) and C
    // differs when either replica's accumulators do.
    {
        unsigned es_words[ES_WORDS > 0 ? ES_WORDS : 1];
        store_es(es_words);
        if (inj.target == 4 && g == inj.thread && inj_copy && inj.index < ES_WORDS)
            es_words[inj.index] ^= inj_mask;
        unsigned verdict = 0u;
#if RMT_WARP || RMT_BLOCK
        if (copy == 0)
#endif
        for (int v = 0; v < ES_WORDS; ++v)
            if (es_words[v] != golden_es[g * ES_WORDS + v]) verdict |= 1u;
#if RMT_WARP || RMT_BLOCK
        if (tile_failed) verdict |= 4u;
#endif
#if SAFEMON_ABFT_VERDICT
        verdict |= abft_verdict(acc, golden_c, abft_ref, rel_err, M, N, row0, col0, tx, ty,
#if RMT_WARP || RMT_BLOCK
                                copy == 0
#else
                                true
#endif
                                );
#endif
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int r = row0 + ty * TM + i, c = col0 + tx * TN + j;
                if (r < M && c < N &&
                    __float_as_uint(acc[i][j]) != __float_as_uint(golden_c[(long long)r * N + c]))
                    verdict |= 2u;
            }
        if (verdict) atomicOr(&verdicts[blockIdx.z], verdict);
        if (C == nullptr) return;
    }
#endif
#if RMT_WARP
    if (copy != 0) return;  // replica 1 never stores
#endif
#if (RMT_WARP || RMT_BLOCK) && !SAFEMON_INJECT
    // Release nothing of a failed tile and say which tile failed. Inter-block: only the copy
    // that arrived second knows; it poisons C and the ES its partner stored before arriving.
    if (tile_failed) {
        store_poison();
        if (t == 0 && status != nullptr) {
            atomicOr(&status[STATUS_RMT], 1u);
            atomicMax(&status[STATUS_RMT_TILE], 0xFFFFFFFFu - (unsigned)block_id);
        }
        return;
    }
#endif
#if RMT_BLOCK
    return;  // C and ES were stored before the comparison
#endif

    store_c(C);
    if (ES_WORDS > 0) store_es(ES + g * ES_WORDS);
}
