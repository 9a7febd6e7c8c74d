// IEEE float32 arithmetic in PTX, round to nearest even, subnormals kept, never contracted:
// the helpers every bit-exact non-product kernel (epilogue.cu, ops.cu) is written with.
//
// CuPy appends -ftz=true to every NVRTC compile (after safemon's --ftz=false, so it wins),
// and C arithmetic would then compile to .ftz instructions that flush subnormal operands
// and results. The PTX below carries no .ftz, and an asm statement is never fused into an
// FMA whatever --fmad says. ldexp (in safemon_exp_f32) is an exponent-field add, exact for
// the normal results exp_f32 produces on its callers' ranges (p in [0.7, 1.5], and
// k in [-120, 29]: gelu's |y| <= 20, gelu_erf's y in [-83, 0], attention's clamp at -80; see
// safemon/models/activations.py and safemon/models/ops.py).
#pragma once

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
__device__ __forceinline__ float sm_sqrt(float a) {
    float r; asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(a)); return r;
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

// safemon.models.activations.exp_f32, operation for operation.
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
