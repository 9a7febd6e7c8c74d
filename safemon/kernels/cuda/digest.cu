// safemon-digest64 word sum (safemon/digest.py states the definition; the NumPy reference
// there is what this kernel must equal bit for bit).
//
// S = sum_i mix((i << 32) | w_i) mod 2^64. Integer addition is associative, so the grid-
// stride partial sums, the warp shuffles and the one atomicAdd per warp give the same S in
// any order. The host applies the final mix(S + mix(n)) to the 8 bytes it reads back.
//
// safemon_copy_digest also copies the words to `dst` and counts the words that are a
// float32 NaN or infinity (exponent bits all ones): the client's staging of a device-
// resident request and its release check, one kernel each (safemon/device_io.py), and a
// channel's read of x and write of its output slot (DigestBatch, safemon/kernels/model_gpu.py).

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

// out[0] += S of `src`; out[1] += the non-finite float32 words of `src`; dst (when not null)
// receives a copy of the n words. out: two zero-initialised uint64 accumulators.
__global__ void safemon_copy_digest(const unsigned int* __restrict__ src,
                                    unsigned int* __restrict__ dst,
                                    unsigned long long n,
                                    unsigned long long* __restrict__ out) {
    unsigned long long acc = 0ull;
    unsigned long long bad = 0ull;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        unsigned int w = src[i];
        if (dst != nullptr) {
            dst[i] = w;
        }
        acc += safemon_mix64((i << 32) | (unsigned long long)w);
        bad += ((w & 0x7F800000u) == 0x7F800000u) ? 1ull : 0ull;
    }
    for (int off = 16; off > 0; off >>= 1) {
        acc += __shfl_down_sync(0xFFFFFFFFu, acc, off);
        bad += __shfl_down_sync(0xFFFFFFFFu, bad, off);
    }
    if ((threadIdx.x & 31) == 0) {
        if (acc != 0ull) {
            atomicAdd(out, acc);
        }
        if (bad != 0ull) {
            atomicAdd(out + 1, bad);
        }
    }
}

}  // extern "C"
