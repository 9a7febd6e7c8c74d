// One layer's epilogue, in place on an (M, N) float32 product: bias add, then activation.
// safemon/models/activations.py is the NumPy reference; every step here is the same IEEE
// float32 operation in the same order, round to nearest even, subnormals kept.
//
// Every float operation and comparison is written in PTX (float_rn.cuh): CuPy appends
// -ftz=true to every NVRTC compile (after our --ftz=false, so it wins), and C arithmetic
// would then compile to .ftz instructions that flush subnormal operands and results (a
// subnormal bias sum, a subnormal input to relu's comparison). The PTX carries no .ftz and
// is never contracted into an FMA.
#include "float_rn.cuh"

extern "C" {

__device__ __forceinline__ float safemon_gelu_f32(float x) {
    const float x3 = sm_mul(sm_mul(x, x), x);
    const float inner = sm_add(x, sm_mul(0x1.6e4e26p-5f, x3));
    float u = sm_mul(0x1.988454p-1f, inner);
    u = sm_gt(u, 10.0f) ? 10.0f : (sm_gt(-10.0f, u) ? -10.0f : u);
    const float e = safemon_exp_f32(sm_add(u, u));
    const float t = sm_div(sm_sub(e, 1.0f), sm_add(e, 1.0f));
    return sm_mul(sm_mul(0.5f, x), sm_add(1.0f, t));
}

// h: (m, n) row-major, updated in place; bias: (n,) or nullptr; act: 0 identity, 1 relu,
// 2 gelu.
__global__ void safemon_epilogue(float* __restrict__ h, const float* __restrict__ bias,
                                 unsigned long long m, unsigned long long n, int act) {
    const unsigned long long total = m * n;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < total; i += stride) {
        float v = h[i];
        if (bias != nullptr) {
            v = sm_add(v, bias[i % n]);
        }
        if (act == 1) {
            v = sm_gt(v, 0.0f) ? v : 0.0f;
        } else if (act == 2) {
            v = safemon_gelu_f32(v);
        }
        h[i] = v;
    }
}

}  // extern "C"
