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

__device__ __forceinline__ float safemon_add(float a, float b) {
    float out;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(out) : "f"(a), "f"(b));
    return out;
}

extern "C" __global__ void safemon_splitk_reduce(const float* __restrict__ P,
                                                 float* __restrict__ C, long long MN, int S) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((MN & 3) == 0) {
        const long long n4 = MN >> 2;
        const float4* P4 = reinterpret_cast<const float4*>(P);
        float4* C4 = reinterpret_cast<float4*>(C);
        for (long long e = first; e < n4; e += stride) {
            float4 acc = P4[e];
            for (int z = 1; z < S; ++z) {
                const float4 p = P4[(long long)z * n4 + e];
                acc.x = safemon_add(acc.x, p.x);
                acc.y = safemon_add(acc.y, p.y);
                acc.z = safemon_add(acc.z, p.z);
                acc.w = safemon_add(acc.w, p.w);
            }
            C4[e] = acc;
        }
    } else {
        for (long long e = first; e < MN; e += stride) {
            float acc = P[e];
            for (int z = 1; z < S; ++z) acc = safemon_add(acc, P[(long long)z * MN + e]);
            C[e] = acc;
        }
    }
}
