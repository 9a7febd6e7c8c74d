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

// The exact (erf) gelu, safemon.models.activations.gelu_erf_f32 operation for operation:
// 1 + erf(z) as 2 - erfc(z) (z >= 0) or erfc(-z) (z < 0), erfc(a) = t * exp(P(t) - a*a),
// t = 1 / (1 + a/2), P the Numerical Recipes `erfcc` fit (Horner, t^9's coefficient first),
// +0.0 from a >= 9 on. |z| clears the sign bit (an integer operation: no flush).
__device__ __forceinline__ float safemon_gelu_erf_f32(float x) {
    const float z = sm_mul(x, 0x1.6a09e6p-1f);
    const float a = __int_as_float(__float_as_int(z) & 0x7fffffff);
    const float t = sm_div(1.0f, sm_add(1.0f, sm_mul(0.5f, a)));
    float p = 0x1.5df28ap-3f;
    p = sm_add(sm_mul(p, t), -0x1.a4f124p-1f);
    p = sm_add(sm_mul(p, t), 0x1.7d0f6p+0f);
    p = sm_add(sm_mul(p, t), -0x1.229cbap+0f);
    p = sm_add(sm_mul(p, t), 0x1.1d8f98p-2f);
    p = sm_add(sm_mul(p, t), -0x1.7d8498p-3f);
    p = sm_add(sm_mul(p, t), 0x1.8c6d92p-4f);
    p = sm_add(sm_mul(p, t), 0x1.7f11f6p-2f);
    p = sm_add(sm_mul(p, t), 0x1.00018ep+0f);
    p = sm_add(sm_mul(p, t), -0x1.43f89cp+0f);
    const bool tail = sm_gt(9.0f, a);  // false for NaN, as the reference's a < 9
    const float e = safemon_exp_f32(tail ? sm_sub(p, sm_mul(a, a)) : 0.0f);
    const float erfc_a = tail ? sm_mul(t, e) : 0.0f;
    const float one_plus_erf = sm_gt(0.0f, z) ? erfc_a : sm_sub(2.0f, erfc_a);
    return sm_mul(sm_mul(0.5f, x), one_plus_erf);
}

// h: (m, n) row-major, updated in place; bias: (n,) or nullptr; act: 0 identity, 1 relu,
// 2 gelu (tanh form), 3 gelu_erf (exact form).
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
        } else if (act == 3) {
            v = safemon_gelu_erf_f32(v);
        }
        h[i] = v;
    }
}

}  // extern "C"
