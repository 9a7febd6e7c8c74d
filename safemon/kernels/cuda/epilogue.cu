// One layer's epilogue, in place on an (M, N) float32 product: bias add, then activation.
// safemon/models/activations.py is the NumPy reference; every step here is the same IEEE
// float32 operation in the same order, round to nearest even, subnormals kept.
//
// Every float operation and comparison is written in PTX: CuPy appends -ftz=true to every
// NVRTC compile (after our --ftz=false, so it wins), and C arithmetic would then compile to
// .ftz instructions that flush subnormal operands and results (a subnormal bias sum, a
// subnormal input to relu's comparison). The PTX below carries no .ftz and is never
// contracted into an FMA. ldexp is an exponent-field add, exact for the normal results
// exp_f32 produces (|k| <= 29, p in [0.7, 1.5]).

extern "C" {

__device__ __forceinline__ float sm_add(float a, float b) {
    float r; asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
__device__ __forceinline__ float sm_sub(float a, float b) {
    float r; asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
__device__ __forceinline__ float sm_mul(float a, float b) {
    float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
__device__ __forceinline__ float sm_div(float a, float b) {
    float r; asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
__device__ __forceinline__ float sm_rint(float a) {
    float r; asm("cvt.rni.f32.f32 %0, %1;" : "=f"(r) : "f"(a)); return r;
}
// a > b as IEEE compares (false when either is NaN), subnormals not flushed.
__device__ __forceinline__ bool sm_gt(float a, float b) {
    unsigned r;
    asm("{\n\t.reg .pred p;\n\tsetp.gt.f32 p, %1, %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(r) : "f"(a), "f"(b));
    return r != 0u;
}

__device__ __forceinline__ float safemon_exp_f32(float y) {
    const float k = sm_rint(sm_mul(y, 0x1.715476p+0f));
    float r = sm_sub(y, sm_mul(k, 0x1.62e4p-1f));
    r = sm_sub(r, sm_mul(k, 0x1.7f7d1cp-20f));
    float p = 0x1.6c16c2p-10f;
    p = sm_add(sm_mul(p, r), 0x1.111112p-7f);
    p = sm_add(sm_mul(p, r), 0x1.555556p-5f);
    p = sm_add(sm_mul(p, r), 0x1.555556p-3f);
    p = sm_add(sm_mul(p, r), 0x1p-1f);
    p = sm_add(sm_mul(p, r), 1.0f);
    p = sm_add(sm_mul(p, r), 1.0f);
    int ki;
    asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(ki) : "f"(k));  // k is integral: exact
    return __int_as_float(__float_as_int(p) + (ki << 23));
}

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
