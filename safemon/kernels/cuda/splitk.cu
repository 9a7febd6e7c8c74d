// Split-K reduction: C[e] = (((P[0][e] + P[1][e]) + P[2][e]) + ... ) + P[S-1][e].
//
// P holds the S partial products of mmm.cu's K-slices, slice z at P + z*MN (MN = M*N
// elements, row-major like C). Every element is summed in slice order z = 0, 1, ..., S-1,
// one IEEE round-to-nearest-even float32 add per slice, with no atomics and no tree, so the
// result is a pure function of the partials and the NumPy reference
// (safemon/kernels/reference.py, `reduce_slices`) reproduces it bit for bit. The add is
// written in PTX for the same reason as mmm.cu's MAC: CuPy's -ftz=true would otherwise flush
// subnormal partial sums. A NaN result is the GPU's canonical 0x7FFFFFFF.
//
// Grid-stride over elements; each thread handles 4 consecutive elements with 16-byte loads
// when MN is a multiple of 4 (the partial buffers are 256-byte aligned), else one at a time.
// A thread loads the slices BATCH at a time before adding them, still in slice order, so that
// their loads are in flight together: a batch-1 layer has few elements (4,096 at
// 1×4096×4096, on 1,024 threads) and many slices (32), and one load after another made the
// reduction a chain of dependent L2 round trips.
#define BATCH 16

__device__ __forceinline__ float safemon_add(float a, float b) {
    float out;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(out) : "f"(a), "f"(b));
    return out;
}
__device__ __forceinline__ float4 safemon_add(float4 a, float4 b) {
    return make_float4(safemon_add(a.x, b.x), safemon_add(a.y, b.y), safemon_add(a.z, b.z),
                       safemon_add(a.w, b.w));
}

// C[e] for e = first, first + stride, ... < n, over T = float (one element) or float4 (four
// consecutive elements) of the S slices P + z*n.
template <typename T>
__device__ __forceinline__ void reduce_units(const T* __restrict__ P, T* __restrict__ C,
                                             long long n, int S, long long first,
                                             long long stride) {
    for (long long e = first; e < n; e += stride) {
        T acc = P[e];
        for (int z = 1; z < S; z += BATCH) {
            T p[BATCH];
#pragma unroll
            for (int q = 0; q < BATCH; ++q)
                if (z + q < S) p[q] = P[(long long)(z + q) * n + e];
#pragma unroll
            for (int q = 0; q < BATCH; ++q)
                if (z + q < S) acc = safemon_add(acc, p[q]);
        }
        C[e] = acc;
    }
}

extern "C" __global__ void safemon_splitk_reduce(const float* __restrict__ P,
                                                 float* __restrict__ C, long long MN, int S) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((MN & 3) == 0)
        reduce_units(reinterpret_cast<const float4*>(P), reinterpret_cast<float4*>(C), MN >> 2, S,
                     first, stride);
    else
        reduce_units(P, C, MN, S, first, stride);
}
