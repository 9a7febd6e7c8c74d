// safemon-digest64 word sum (safemon/digest.py states the definition; the NumPy reference
// there is what this kernel must equal bit for bit).
//
// S = sum_i mix((i << 32) | w_i) mod 2^64. Integer addition is associative, so the grid-
// stride partial sums, the warp shuffles and the one atomicAdd per warp give the same S in
// any order. The host applies the final mix(S + mix(n)) to the 8 bytes it reads back.

extern "C" {

__device__ __forceinline__ unsigned long long safemon_mix64(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// words: n little-endian uint32 words; out: one zero-initialised uint64 accumulator.
__global__ void safemon_digest_sum(const unsigned int* __restrict__ words,
                                   unsigned long long n,
                                   unsigned long long* __restrict__ out) {
    unsigned long long acc = 0ull;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        acc += safemon_mix64((i << 32) | (unsigned long long)words[i]);
    }
    for (int off = 16; off > 0; off >>= 1) {
        acc += __shfl_down_sync(0xFFFFFFFFu, acc, off);
    }
    if ((threadIdx.x & 31) == 0 && acc != 0ull) {
        atomicAdd(out, acc);
    }
}

}  // extern "C"
