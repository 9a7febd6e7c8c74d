// Execution-signature folds, one policy per checksum (docs/SIGNATURES.md).
// Each policy holds its running state in registers and folds one 32-bit word at a time.
// The NumPy reference (safemon/kernels/signatures.py) reproduces every word bit for bit.
#pragma once

#define SIG_NONE 0
#define SIG_XOR 1
#define SIG_TWOS 2
#define SIG_ONES 3
#define SIG_FLETCHER 4
#define SIG_CRC32C 5

// The end-around-carry (ones' complement) arithmetic of the seed, on an exact 64-bit sum S of
// words. Folding w_1 .. w_n one by one from 0 with the seed's end-around-carry add (PTX
// add.cc.u32 then addc.u32) gives
//   f(S) = 0 when S = 0, else ((S − 1) mod (2^32 − 1)) + 1,   S = w_1 + ... + w_n exactly
// (by induction: each step keeps the value in 1 .. 2^32 − 1 once any word was nonzero, and
// congruent to the exact sum modulo 2^32 − 1, because 2^32 ≡ 1). `safemon_ones_word` is f;
// `safemon_ones_bound` replaces S by (S mod 2^32) + ⌊S / 2^32⌋, which has the same residue and
// is zero only when S is, so a sum bounded once per k-tile never overflows whatever K.
__device__ __forceinline__ unsigned long long safemon_ones_bound(unsigned long long s) {
    return (s & 0xFFFFFFFFull) + (s >> 32);
}

__device__ __forceinline__ unsigned safemon_ones_word(unsigned long long s) {
    return s == 0ull ? 0u : (unsigned)((s - 1ull) % 0xFFFFFFFFull) + 1u;
}

template <int KIND> struct Sig;

// Every policy has `tile_end()`, which the kernel calls once per k-tile (after the k-tile's
// folds); only the ones' complement policy does something there.
template <> struct Sig<SIG_NONE> {
    static constexpr int WORDS = 0;
    __device__ __forceinline__ void fold(unsigned, const unsigned*) {}
    __device__ __forceinline__ void tile_end() {}
    __device__ __forceinline__ void store(unsigned*) const {}
};

// xor and the twos' complement sum fold into two lanes: a policy's 1st, 3rd, 5th, ... word into
// s0, its 2nd, 4th, ... into s1, combined once at the store. Both operations are
// associative and commutative, so the ES word is the one-by-one fold's bit for bit (the NumPy
// reference folds word by word). The lanes halve the chain of dependent adds that every
// freshly computed accumulator joins: on the H100, twos/M and xor/M on `large` 1.04-1.07x and
// T-level folds on `wide64` 1.04x faster, T and I on `large` 0.97-0.98x
// (evidence/h100-2026-11-25-lanes/).
// Every call site folds an even number of words per loop trip, so `odd` is a compile-time
// constant at each fold once the loops are unrolled; were it not, the branch would cost
// time, never bits. The ones' complement policy below keeps one lane: with two its 64-bit
// sums measured 0.96x (ones/M) and 0.95x (ones/F) on `large`.
template <> struct Sig<SIG_XOR> {
    static constexpr int WORDS = 1;
    unsigned s0 = 0u, s1 = 0u;
    bool odd = false;
    __device__ __forceinline__ void fold(unsigned w, const unsigned*) {
        if (odd) s1 ^= w; else s0 ^= w;
        odd = !odd;
    }
    __device__ __forceinline__ void tile_end() {}
    __device__ __forceinline__ void store(unsigned* out) const { out[0] = s0 ^ s1; }
};

template <> struct Sig<SIG_TWOS> {
    static constexpr int WORDS = 1;
    unsigned s0 = 0u, s1 = 0u;
    bool odd = false;
    __device__ __forceinline__ void fold(unsigned w, const unsigned*) {
        if (odd) s1 += w; else s0 += w;
        odd = !odd;
    }
    __device__ __forceinline__ void tile_end() {}
    __device__ __forceinline__ void store(unsigned* out) const { out[0] = s0 + s1; }
};

// The ones' complement sum without a carry per word: the words are summed exactly in 64 bits
// (the compiler adds two words per three-input add), bounded after every k-tile (a k-tile
// folds at most 3·TM·TN·BK words) and mapped through f once, at the store. The ES word is
// bit for bit the word-by-word fold's (the NumPy reference folds word by word); the seed's
// sequential form takes two dependent instructions per word.
template <> struct Sig<SIG_ONES> {
    static constexpr int WORDS = 1;
    unsigned long long s = 0ull;
    __device__ __forceinline__ void fold(unsigned w, const unsigned*) { s += w; }
    __device__ __forceinline__ void tile_end() { s = safemon_ones_bound(s); }
    __device__ __forceinline__ void store(unsigned* out) const { out[0] = safemon_ones_word(s); }
};

// Fletcher with end-around-carry adds instead of `% 65535`-style modulo (the seed measured
// the modulo as the slow part on GPUs), in the 64-bit form of the ones' complement policy
// above: s2 folds the successive s1 states, and only their residues modulo 2^32 − 1 and
// whether each is zero matter to it, so s1 and s2 are exact 64-bit sums of which s2 adds
// s1's running (residue-keeping, zero-keeping) value; `tile_end` bounds both, `store` maps
// both through f. Bit for bit the word-by-word words.
template <> struct Sig<SIG_FLETCHER> {
    static constexpr int WORDS = 2;
    unsigned long long s1 = 0ull, s2 = 0ull;
    __device__ __forceinline__ void fold(unsigned w, const unsigned*) {
        s1 += w;
        s2 += s1;
    }
    __device__ __forceinline__ void tile_end() {
        s1 = safemon_ones_bound(s1);
        s2 = safemon_ones_bound(s2);
    }
    __device__ __forceinline__ void store(unsigned* out) const {
        out[0] = safemon_ones_word(s1);
        out[1] = safemon_ones_word(s2);
    }
};

// CRC-32C over the word's little-endian bytes, byte-wise through a 256-entry table that the
// kernel keeps in shared memory (four shared-memory reads per word, as in the seed).
template <> struct Sig<SIG_CRC32C> {
    static constexpr int WORDS = 1;
    unsigned c = 0xFFFFFFFFu;
    __device__ __forceinline__ void fold(unsigned w, const unsigned* table) {
        c ^= w;
#pragma unroll
        for (int i = 0; i < 4; ++i) c = table[c & 0xFFu] ^ (c >> 8);
    }
    __device__ __forceinline__ void tile_end() {}
    __device__ __forceinline__ void store(unsigned* out) const { out[0] = c ^ 0xFFFFFFFFu; }
};
