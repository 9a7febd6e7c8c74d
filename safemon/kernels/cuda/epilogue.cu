// One layer's epilogue, in place on an (M, N) float32 product: bias add, then activation.
// safemon/models/activations.py is the NumPy reference; every step here is the same IEEE
// float32 operation in the same order: __fadd_rn / __fmul_rn / __fdiv_rn are never
// contracted into an FMA, rintf rounds half to even like numpy.rint, ldexpf is exact for
// normal results like numpy.ldexp. Built with --fmad=false as well, for the comparisons.

extern "C" {

__device__ __forceinline__ float safemon_exp_f32(float y) {
    const float k = rintf(__fmul_rn(y, 0x1.715476p+0f));
    float r = __fsub_rn(y, __fmul_rn(k, 0x1.62e4p-1f));
    r = __fsub_rn(r, __fmul_rn(k, 0x1.7f7d1cp-20f));
    float p = 0x1.6c16c2p-10f;
    p = __fadd_rn(__fmul_rn(p, r), 0x1.111112p-7f);
    p = __fadd_rn(__fmul_rn(p, r), 0x1.555556p-5f);
    p = __fadd_rn(__fmul_rn(p, r), 0x1.555556p-3f);
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    return ldexpf(p, (int)k);
}

__device__ __forceinline__ float safemon_gelu_f32(float x) {
    const float x3 = __fmul_rn(__fmul_rn(x, x), x);
    const float inner = __fadd_rn(x, __fmul_rn(0x1.6e4e26p-5f, x3));
    float u = __fmul_rn(0x1.988454p-1f, inner);
    u = u > 10.0f ? 10.0f : (u < -10.0f ? -10.0f : u);
    const float e = safemon_exp_f32(__fadd_rn(u, u));
    const float t = __fdiv_rn(__fsub_rn(e, 1.0f), __fadd_rn(e, 1.0f));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t));
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
            v = __fadd_rn(v, bias[i % n]);
        }
        if (act == 1) {
            v = v > 0.0f ? v : 0.0f;
        } else if (act == 2) {
            v = safemon_gelu_f32(v);
        }
        h[i] = v;
    }
}

}  // extern "C"
