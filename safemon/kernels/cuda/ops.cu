// The steps of a model besides its products: layer norm, multi-head attention and the
// residual add. safemon/models/ops.py holds the float32 NumPy references and, in its module
// docstring, the arithmetic contract; every step here is the same IEEE float32 operation in
// the same order (sums strictly in index order, round to nearest even, subnormals kept, no
// fused multiply-add), so the outputs match bit for bit.
//
// Every float operation and comparison is written in PTX (float_rn.cuh): CuPy's -ftz=true
// would otherwise flush subnormals, and an asm statement is never contracted into an FMA.
// Integer-to-float conversions are avoided: N as a float32 (layer norm's divisor) and the
// attention scale come from the host, rounded there exactly as the references round them.
#include "float_rn.cuh"

#if !defined(SAFEMON_STORED_TOKENS) || !defined(SAFEMON_ATTENTION_CHUNK)
#error "SAFEMON_STORED_TOKENS and SAFEMON_ATTENTION_CHUNK (safemon.models.ops) must be defined"
#endif

extern "C" {

// x: (rows, n) row-major; w, b: (n,); out: (rows, n). nf is float32(n) (numpy's
// np.float32(n)), eps the float32 ε. One thread per row, grid-stride:
//   s = x_0 + ... + x_{n-1}; mu = s / nf; d_j = x_j - mu; v = d_0*d_0 + ... ; v = v / nf;
//   r = 1 / sqrt(v + eps); y_j = (d_j * r) * w_j + b_j.
// d_j is recomputed (x_j - mu, the same single rounding) rather than stored.
__global__ void safemon_layer_norm(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ out,
                                   unsigned long long rows, unsigned long long n, float nf,
                                   float eps) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long row = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         row < rows; row += stride) {
        const float* xr = x + row * n;
        float* yr = out + row * n;
        float s = xr[0];
        for (unsigned long long j = 1; j < n; ++j) {
            s = sm_add(s, xr[j]);
        }
        const float mu = sm_div(s, nf);
        float d = sm_sub(xr[0], mu);
        float v = sm_mul(d, d);
        for (unsigned long long j = 1; j < n; ++j) {
            d = sm_sub(xr[j], mu);
            v = sm_add(v, sm_mul(d, d));
        }
        v = sm_div(v, nf);
        const float r = sm_div(1.0f, sm_sqrt(sm_add(v, eps)));
        for (unsigned long long j = 0; j < n; ++j) {
            d = sm_sub(xr[j], mu);
            yr[j] = sm_add(sm_mul(sm_mul(d, r), w[j]), b[j]);
        }
    }
}

// One score s_j = (q_0*k_0 + q_1*k_1 + ... in c order) * scale. Both attention paths below
// compute every score with this one function, so a score recomputed has the stored one's bits.
__device__ __forceinline__ float safemon_score(const float* __restrict__ q,
                                               const float* __restrict__ k, int dh,
                                               float scale) {
    float a = sm_mul(q[0], k[0]);
    for (int c = 1; c < dh; ++c) {
        a = sm_add(a, sm_mul(q[c], k[c]));
    }
    return sm_mul(a, scale);
}

// e_j = exp_f32(max(s_j - m, floor)), the clamp as `floor > t`.
__device__ __forceinline__ float safemon_clamped_exp(float s, float m) {
    const float floor_ = -80.0f;  // safemon.models.ops.ATTENTION_EXP_FLOOR
    float t = sm_sub(s, m);
    t = sm_gt(floor_, t) ? floor_ : t;
    return safemon_exp_f32(t);
}

// h: (groups * tokens, 3 * heads * dh) row-major, columns [q | k | v], head hd in columns
// hd*dh .. hd*dh + dh - 1 of each part; out: (groups * tokens, heads * dh). One thread per
// (group, head, query row i), grid-stride, i fastest (the threads of a warp share k and v):
//   a_j = q_i0*k_j0 + q_i1*k_j1 + ... (c order); s_j = a_j * scale;
//   m = s_0, then s_j > m replaces (j order); t = max(s_j - m, floor) as `floor > t`;
//   e_j = exp_f32(t); z = e_0 + ... (j order); p_j = e_j / z;
//   o_c = p_0*v_0c + p_1*v_1c + ... (j order).
// With `causal` nonzero, query i sees keys 0 .. i only: every loop over j stops after i.
// A sequence of at most SAFEMON_STORED_TOKENS tokens keeps its s_j, then p_j, in a
// per-thread array. A longer one (up to safemon.models.ops.MAX_TOKENS, which the launcher
// checks) stores nothing: it recomputes s_j in each pass, and in the last pass walks the
// columns c in chunks of SAFEMON_ATTENTION_CHUNK accumulators, each chunk a pass over j
// that recomputes p_j. The operations and their order per output value are the same in
// both paths, so are the bits.
__global__ void safemon_attention(const float* __restrict__ h, float* __restrict__ out,
                                  unsigned long long groups, int tokens, int heads, int dh,
                                  float scale, int causal) {
    if (tokens < 1 || heads < 1 || dh < 1) {
        return;
    }
    const unsigned long long T = (unsigned long long)tokens;
    const unsigned long long d = (unsigned long long)heads * (unsigned long long)dh;
    const unsigned long long width = 3ull * d;
    const unsigned long long total = groups * (unsigned long long)heads * T;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const bool stored = tokens <= SAFEMON_STORED_TOKENS;
    float p[SAFEMON_STORED_TOKENS];
    for (unsigned long long idx = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         idx < total; idx += stride) {
        const unsigned long long i = idx % T;
        const unsigned long long gh = idx / T;
        const unsigned long long hd = gh % (unsigned long long)heads;
        const unsigned long long g = gh / (unsigned long long)heads;
        const unsigned long long row0 = g * T;                   // the sequence's first row
        const unsigned long long col = hd * (unsigned long long)dh;
        const float* q = h + (row0 + i) * width + col;
        const float* k0 = h + row0 * width + d + col;            // k of token 0, this head
        const float* v0 = h + row0 * width + 2ull * d + col;     // v of token 0, this head
        float* o = out + (row0 + i) * d + col;
        const int seen = causal ? (int)i + 1 : tokens;  // keys 0 .. seen - 1
        // scores s_j and their maximum
        float m = 0.0f;
        for (int j = 0; j < seen; ++j) {
            const float s = safemon_score(q, k0 + (unsigned long long)j * width, dh, scale);
            if (stored) {
                p[j] = s;
            }
            if (j == 0 || sm_gt(s, m)) {
                m = s;
            }
        }
        // e_j and their sum z
        float z = 0.0f;
        for (int j = 0; j < seen; ++j) {
            const float e = safemon_clamped_exp(
                stored ? p[j] : safemon_score(q, k0 + (unsigned long long)j * width, dh, scale),
                m);
            if (stored) {
                p[j] = e;
            }
            z = (j == 0) ? e : sm_add(z, e);
        }
        if (stored) {
            for (int j = 0; j < seen; ++j) {
                p[j] = sm_div(p[j], z);
            }
            // o_c = sum_j p_j * v_jc
            for (int c = 0; c < dh; ++c) {
                float acc = sm_mul(p[0], v0[c]);
                for (int j = 1; j < seen; ++j) {
                    acc = sm_add(acc, sm_mul(p[j], v0[(unsigned long long)j * width + c]));
                }
                o[c] = acc;
            }
            continue;
        }
        // o_c = sum_j p_j * v_jc, SAFEMON_ATTENTION_CHUNK columns at a time, p_j recomputed
        for (int c0 = 0; c0 < dh; c0 += SAFEMON_ATTENTION_CHUNK) {
            const int cn = (dh - c0 < SAFEMON_ATTENTION_CHUNK) ? dh - c0 : SAFEMON_ATTENTION_CHUNK;
            float acc[SAFEMON_ATTENTION_CHUNK];
            for (int j = 0; j < seen; ++j) {
                const float* kj = k0 + (unsigned long long)j * width;
                const float* vj = v0 + (unsigned long long)j * width + c0;
                const float pj = sm_div(safemon_clamped_exp(safemon_score(q, kj, dh, scale), m), z);
                // constant trip counts (here and below), so that acc stays in registers
#pragma unroll
                for (int cc = 0; cc < SAFEMON_ATTENTION_CHUNK; ++cc) {
                    if (cc < cn) {
                        acc[cc] = (j == 0) ? sm_mul(pj, vj[cc]) : sm_add(acc[cc], sm_mul(pj, vj[cc]));
                    }
                }
            }
#pragma unroll
            for (int cc = 0; cc < SAFEMON_ATTENTION_CHUNK; ++cc) {
                if (cc < cn) {
                    o[c0 + cc] = acc[cc];
                }
            }
        }
    }
}

// out = a + b elementwise over n float32 values, grid-stride.
__global__ void safemon_add(const float* __restrict__ a, const float* __restrict__ b,
                            float* __restrict__ out, unsigned long long n) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        out[i] = sm_add(a[i], b[i]);
    }
}

}  // extern "C"
