// All-finite check of a float32 buffer: one kernel, the same code for every shape.
//
// safemon rejects NaN and infinity in inputs (NaN payloads differ between CPU and GPU). CuPy's
// isfinite(x).all() would compile an elementwise and a reduction kernel whose code depends on
// the array's size, so a channel's first request of a new shape paid NVRTC time inside its
// deadline. This kernel is compiled once (in the channel's warm-up) and serves every shape.
//
// safemon_any_nonfinite(x, n, flag): grid-stride over the n words of x; any word whose
// exponent field is all ones (±inf or NaN) sets *flag to 1. The caller zeroes *flag first.
// Mirrors numpy.isfinite on float32 bit for bit (the test is on the bits, no float compare).

extern "C" __global__ void safemon_any_nonfinite(const unsigned int* __restrict__ x,
                                                 unsigned long long n,
                                                 unsigned int* __restrict__ flag) {
    unsigned int seen = 0u;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        seen |= (unsigned int)((x[i] & 0x7F800000u) == 0x7F800000u);
    }
    if (seen) {
        atomicOr(flag, 1u);
    }
}

// safemon_inputs_nonfinite(a, na, b, nb, status): both operands of a product in one launch
// (safemon/kernels/checked.py). Grid-stride over the na + nb words; a non-finite word of a
// sets status[0] to 1, one of b sets status[1]. The caller zeroes the status block first.
extern "C" __global__ void safemon_inputs_nonfinite(const unsigned int* __restrict__ a,
                                                    unsigned long long na,
                                                    const unsigned int* __restrict__ b,
                                                    unsigned long long nb,
                                                    unsigned int* __restrict__ status) {
    unsigned int seen_a = 0u, seen_b = 0u;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < na + nb; i += (unsigned long long)gridDim.x * blockDim.x) {
        if (i < na) {
            seen_a |= (unsigned int)((a[i] & 0x7F800000u) == 0x7F800000u);
        } else {
            seen_b |= (unsigned int)((b[i - na] & 0x7F800000u) == 0x7F800000u);
        }
    }
    if (seen_a) atomicOr(status, 1u);
    if (seen_b) atomicOr(status + 1, 1u);
}
