// Audit-only contrast (safemon audit determinism): a float32 sum whose result depends on the
// order in which warps arrive, as in seed 003. Never loaded by the runtime; `safemon audit ptx
// --source` flags its float atomic, which is the point.
//
// audit_atomic_sum(x, n, acc, counter, order): every thread sums x[i], x[i + stride], ... in a
// fixed order, each warp folds its 32 partials with shuffles (fixed order), then lane 0 adds
// the warp's partial to *acc with a float atomicAdd and records its arrival rank:
//   order[global warp id] = atomicAdd(counter, 1).
// The caller zeroes *acc and *counter.
extern "C" __global__ void audit_atomic_sum(const float* __restrict__ x, unsigned n,
                                            float* __restrict__ acc, unsigned* __restrict__ counter,
                                            unsigned* __restrict__ order) {
    const unsigned stride = gridDim.x * blockDim.x;
    float s = 0.0f;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) s += x[i];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(acc, s);
        order[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = atomicAdd(counter, 1u);
    }
}
