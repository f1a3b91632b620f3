// tessera's own f32 exp, log, tanh, logistic, erf, erfc, sin and cos: the element rules of those ops (docs/design.md
// §4.13), written once as algorithms over an arithmetic policy `M`, so that the same steps run in
// both backends and give the same bits:
//
// - ScalarMath (below) runs them in C++ on one float: the interpreter, host array operations and
//   the constant folder (runtime/block_ops.cpp, through rules::float_exp and friends);
// - the LLVM code generator instantiates them with a policy whose operations emit one IR
//   instruction each (jit/llvm/codegen_elements.cpp): llvm.fma, fcmp, select, bitcast, integer ops
//   and no calls, so the loop vectoriser turns an element-wise loop over them into vector code.
//   libm's expf and friends are opaque calls, which kept every loop that used them scalar.
//
// Every step is one correctly rounded IEEE operation (fma rounds once), so both instantiations
// agree bit for bit; nothing may be left to the compiler to contract or reassociate. Each
// algorithm is a range reduction, a minimax polynomial (the coefficients of Cephes' single
// precision functions) and a reconstruction, with the special cases chosen by selects rather than
// branches. Error bounds against the correctly rounded result, measured over every f32 input by
// tests/runtime/element_math_test.cpp: exp and log <= 1 ulp, tanh, logistic and erf <= 2 ulp, erfc
// <= 3.5 ulp, sin and cos <= 2 ulp over the whole range (see sin_cos_of_abs). f64 keeps libm
// (rules::float_exp and friends).
//
// The policy M provides, with F a float value, I a 32-bit integer value and B a bool value:
//   F c(float)   I ci(int32_t)
//   F add(F, F), sub, mul, div, fma(F, F, F)             (IEEE, round to nearest-even, fma rounds once)
//   B lt(F, F), gt, ge, eq (ordered: false on NaN), isnan(F), bor(B, B)
//   F sel(B, F, F)   I seli(B, I, I)
//   I bits(F)   F from_bits(I)   F to_float(I)           (bit casts; int -> float conversion)
//   I iadd(I, I), isub, iand, ior, shl(I, int), sra(I, int)   (two's complement, wrapping)
//   I lsr(I, int)   I shlv(I, I), lsrv(I, I)             (logical shifts; shift counts in [0, 31])
//   I imul(I, I)   I umulhi(I, I)                        (low and high 32 bits of the unsigned 64-bit product)
//   B ieq(I, I), ult(I, I)                               (integer equality, unsigned less-than)
//
// Runtime layer; header-only, no LLVM.
#pragma once

#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <type_traits>

namespace tessera::rules {

// The policy that runs the algorithms on one C++ float.
struct ScalarMath {
  using F = float;
  using I = int32_t;
  using B = bool;
  static F c(float v) { return v; }
  static I ci(int32_t v) { return v; }
  // Each operation is written alone (no a * b + c expressions), so the C++ compiler cannot contract
  // a multiply and an add into an fma that the IR does not have.
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F div(F a, F b) { return a / b; }
  static F fma(F a, F b, F d) { return std::fma(a, b, d); }
  static B lt(F a, F b) { return a < b; }
  static B gt(F a, F b) { return a > b; }
  static B ge(F a, F b) { return a >= b; }
  static B eq(F a, F b) { return a == b; }
  static B isnan(F a) { return a != a; }
  static B bor(B a, B b) { return a || b; }
  static F sel(B p, F a, F b) { return p ? a : b; }
  static I seli(B p, I a, I b) { return p ? a : b; }
  static I bits(F a) { return std::bit_cast<I>(a); }
  static F from_bits(I a) { return std::bit_cast<F>(a); }
  static F to_float(I a) { return static_cast<F>(a); }
  static I iadd(I a, I b) { return static_cast<I>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b)); }
  static I isub(I a, I b) { return static_cast<I>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b)); }
  static I iand(I a, I b) { return a & b; }
  static I ior(I a, I b) { return a | b; }
  static I shl(I a, int n) { return static_cast<I>(static_cast<uint32_t>(a) << n); }
  static I sra(I a, int n) { return a >> n; }  // arithmetic since C++20
  static uint32_t u(I a) { return static_cast<uint32_t>(a); }
  static I lsr(I a, int n) { return static_cast<I>(u(a) >> n); }
  static I shlv(I a, I n) { return static_cast<I>(u(a) << n); }
  static I lsrv(I a, I n) { return static_cast<I>(u(a) >> n); }
  static I imul(I a, I b) { return static_cast<I>(u(a) * u(b)); }
  static I umulhi(I a, I b) { return static_cast<I>((uint64_t{u(a)} * u(b)) >> 32); }
  static B ieq(I a, I b) { return a == b; }
  static B ult(I a, I b) { return u(a) < u(b); }
};

namespace math {

inline constexpr int32_t kSignBit = std::bit_cast<int32_t>(0x80000000u);
inline constexpr int32_t kMagnitude = 0x7fffffff;

// |x| and -|x| by clearing or setting the sign bit (exact, NaN stays NaN).
template <class M> typename M::F abs(M& m, typename M::F x) { return m.from_bits(m.iand(m.bits(x), m.ci(kMagnitude))); }
template <class M> typename M::F neg_abs(M& m, typename M::F x) { return m.from_bits(m.ior(m.bits(x), m.ci(kSignBit))); }

// exp(x) = 2^n * e^r, n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]. The parts: e^r as
// hi + lo (lo the rounding error of hi, for logistic) and 2^n as the product s1 * s2.
template <class M> struct ExpParts {
  typename M::F hi, lo, s1, s2;
};
template <class M> ExpParts<M> exp_parts(M& m, typename M::F x) {
  // Beyond [-104, 89] the result is 0 or +inf anyway; clamping keeps n within the two scale factors
  // below. A NaN fails both comparisons and stays NaN through every later step.
  auto xc = m.sel(m.gt(x, m.c(89.0f)), m.c(89.0f), x);
  xc = m.sel(m.lt(xc, m.c(-104.0f)), m.c(-104.0f), xc);
  // n by the round-to-nearest of adding 1.5 * 2^23: the sum's low mantissa bits are n itself.
  constexpr float kShifter = 0x1.8p23f;
  const auto t = m.fma(xc, m.c(0x1.715476p+0f), m.c(kShifter));  // x * log2(e) + shifter
  const auto n = m.isub(m.bits(t), m.ci(std::bit_cast<int32_t>(kShifter)));
  const auto nf = m.sub(t, m.c(kShifter));
  // r = x - n ln2 with ln2 split in two (Cephes): n * 0.693359375 has few bits, so the first fma
  // is exact; the second adds the small remainder with one rounding, whose error rl is carried on.
  const auto r1 = m.fma(nf, m.c(-0.693359375f), xc);
  const auto r = m.fma(nf, m.c(2.12194440e-4f), r1);
  const auto rl = m.fma(nf, m.c(2.12194440e-4f), m.sub(r1, r));
  // e^r = 1 + q, q = r + (r^2 p(r) + rl).
  auto p = m.c(1.9875691500e-4f);
  p = m.fma(p, r, m.c(1.3981999507e-3f));
  p = m.fma(p, r, m.c(8.3334519073e-3f));
  p = m.fma(p, r, m.c(4.1665795894e-2f));
  p = m.fma(p, r, m.c(1.6666665459e-1f));
  p = m.fma(p, r, m.c(5.0000001201e-1f));
  const auto q = m.add(r, m.fma(p, m.mul(r, r), rl));
  const auto hi = m.add(m.c(1.0f), q);
  const auto lo = m.add(m.sub(m.c(1.0f), hi), q);  // exact: |q| < 1 (Fast2Sum)
  // 2^n as 2^(n/2) * 2^(n - n/2): n reaches 128 (just below the overflow threshold) and -150
  // (subnormal results), beyond one normal power of two.
  const auto n1 = m.sra(n, 1);
  const auto n2 = m.isub(n, n1);
  return {hi, lo, m.from_bits(m.shl(m.iadd(n1, m.ci(127)), 23)), m.from_bits(m.shl(m.iadd(n2, m.ci(127)), 23))};
}
// The first product is exact; the second rounds once, into the subnormals where the result is
// one, to 0 or to +inf.
template <class M> typename M::F exp(M& m, typename M::F x) {
  const ExpParts<M> e = exp_parts(m, x);
  return m.mul(m.mul(e.hi, e.s1), e.s2);
}

// log(x) = e ln2 + log(f + 1), x = 2^e (1 + f), 1 + f in [sqrt(1/2), sqrt(2)).
template <class M> typename M::F log(M& m, typename M::F x) {
  // Subnormals are scaled into the normals first (x * 2^23, e - 23).
  const auto subnormal = m.lt(x, m.c(std::numeric_limits<float>::min()));
  const auto xs = m.sel(subnormal, m.mul(x, m.c(0x1p23f)), x);
  const auto e_bias = m.seli(subnormal, m.ci(-23), m.ci(0));
  // Subtracting sqrt(1/2)'s bits moves the exponent boundary there: the top bits are e, the
  // mantissa added back to sqrt(1/2)'s bits gives 1 + f in [sqrt(1/2), sqrt(2)).
  constexpr int32_t kSqrtHalf = 0x3f3504f3;
  const auto u = m.isub(m.bits(xs), m.ci(kSqrtHalf));
  const auto ef = m.to_float(m.iadd(m.sra(u, 23), e_bias));
  const auto f = m.sub(m.from_bits(m.iadd(m.iand(u, m.ci(0x007fffff)), m.ci(kSqrtHalf))), m.c(1.0f));  // exact
  const auto z = m.mul(f, f);
  auto p = m.c(7.0376836292e-2f);
  p = m.fma(p, f, m.c(-1.1514610310e-1f));
  p = m.fma(p, f, m.c(1.1676998740e-1f));
  p = m.fma(p, f, m.c(-1.2420140846e-1f));
  p = m.fma(p, f, m.c(1.4249322787e-1f));
  p = m.fma(p, f, m.c(-1.6668057665e-1f));
  p = m.fma(p, f, m.c(2.0000714765e-1f));
  p = m.fma(p, f, m.c(-2.4999993993e-1f));
  p = m.fma(p, f, m.c(3.3333331174e-1f));
  // log(1 + f) = f - f^2/2 + f^3 p(f); e ln2 added with ln2 split in two as in exp.
  auto y = m.mul(m.mul(f, z), p);
  y = m.fma(ef, m.c(-2.12194440e-4f), y);
  y = m.fma(z, m.c(-0.5f), y);
  auto r = m.add(f, y);
  r = m.fma(ef, m.c(0.693359375f), r);
  // log(+inf) = +inf, log(+-0) = -inf, log(x < 0) = log(NaN) = NaN.
  const float inf = std::numeric_limits<float>::infinity();
  r = m.sel(m.eq(x, m.c(inf)), m.c(inf), r);
  r = m.sel(m.eq(x, m.c(0.0f)), m.c(-inf), r);
  return m.sel(m.bor(m.lt(x, m.c(0.0f)), m.isnan(x)), m.c(std::numeric_limits<float>::quiet_NaN()), r);
}

// tanh(x) = sign(x) tanh(|x|): an odd polynomial below 0.625, 1 - 2 / (e^(2|x|) + 1) above (which
// saturates to 1 by itself once e^(2|x|) is large or infinite). The sign is put back with the sign
// bit, so tanh(-0) = -0.
template <class M> typename M::F tanh(M& m, typename M::F x) {
  const auto a = abs(m, x);
  const auto z = m.mul(a, a);
  auto p = m.c(-5.70498872745e-3f);
  p = m.fma(p, z, m.c(2.06390887954e-2f));
  p = m.fma(p, z, m.c(-5.37397155531e-2f));
  p = m.fma(p, z, m.c(1.33314422036e-1f));
  p = m.fma(p, z, m.c(-3.33332819422e-1f));
  const auto small = m.fma(m.mul(a, z), p, a);
  const auto e = exp(m, m.add(a, a));
  const auto large = m.sub(m.c(1.0f), m.div(m.c(2.0f), m.add(e, m.c(1.0f))));
  const auto y = m.sel(m.lt(a, m.c(0.625f)), small, large);
  return m.from_bits(m.ior(m.bits(y), m.iand(m.bits(x), m.ci(kSignBit))));
}

// logistic(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) below, with e = e^-|x| <= 1 in both: never
// an infinite e^-x, so logistic(-100) is the subnormal it is rather than 0. Rounding e, 1 + e and
// the quotient once each would add up to more than 2 ulp, so e and 1 + e are carried with their
// rounding errors (el, dl) and the quotient is corrected once by its residual.
template <class M> typename M::F logistic(M& m, typename M::F x) {
  const ExpParts<M> parts = exp_parts(m, neg_abs(m, x));
  const auto e = m.mul(m.mul(parts.hi, parts.s1), parts.s2);
  const auto el = m.mul(m.mul(parts.lo, parts.s1), parts.s2);
  const auto dh = m.add(m.c(1.0f), e);
  const auto dl = m.add(m.add(m.sub(m.c(1.0f), dh), e), el);  // 1 + e + el = dh + dl (Fast2Sum, e <= 1)
  const auto positive = m.ge(x, m.c(0.0f));
  const auto nh = m.sel(positive, m.c(1.0f), e);
  const auto nl = m.sel(positive, m.c(0.0f), el);
  const auto q0 = m.div(nh, dh);
  // (nh + nl) - q0 (dh + dl), the first product exact through the fma.
  const auto residual = m.add(m.fma(m.sub(m.c(0.0f), q0), dh, nh), m.fma(m.sub(m.c(0.0f), q0), dl, nl));
  return m.add(q0, m.div(residual, dh));
}


// Horner's scheme with one fma per coefficient, highest degree first.
template <class M, size_t N> typename M::F horner(M& m, typename M::F u, const float (&coeffs)[N]) {
  auto p = m.c(coeffs[0]);
  for (size_t i = 1; i < N; ++i) p = m.fma(p, u, m.c(coeffs[i]));
  return p;
}

// erf(x) for |x| < 1: x + x Q(x^2), Q a degree-6 fit of erf(x)/x - 1 (see erf below).
template <class M> typename M::F erf_small(M& m, typename M::F x) {
  static constexpr float kSmall[] = {0x1.4a5690p-14f, -0x1.a45088p-11f, 0x1.541270p-8f, -0x1.b7fabap-6f,
                                     0x1.ce2d10p-4f,  -0x1.81273ep-2f,  0x1.06eba8p-3f};
  return m.fma(x, horner(m, m.mul(x, x), kSmall), x);
}

// erf(x) = sign(x) erf(|x|), three pieces chosen by selects, no exp:
// - |x| < 1: |x| + |x| Q(x^2), Q a degree-6 fit of erf(x)/x - 1 (2/sqrt(pi) - 1 at 0), so that
//   tiny and subnormal inputs round exactly as erf(x) ~ 1.128 x does;
// - 1 <= |x| < 3.92: 1 - q, q a degree-9 fit of erfc in |x| - c over [1, 2.25] or [2.25, 3.92],
//   the piece's coefficients chosen by selects and evaluated once. Computing the small erfc rather
//   than erf itself keeps the polynomial's rounding errors below the final subtraction's;
// - from 3.8325 erfc(x) < 2^-25 and erf rounds to 1: q is 0 from 3.85 (the fit's own error at the
//   end of its range could otherwise round 1 - q down), which also covers +-inf.
// A NaN fails every comparison and flows through the erfc polynomial as NaN. The fits are
// Chebyshev fits (near minimax) with abs error <= 6e-9 (0.1 ulp of the result) before rounding.
template <class M> typename M::F erf(M& m, typename M::F x) {
  const auto a = abs(m, x);
  const auto small = erf_small(m, a);
  static constexpr float kNear[] = {-0x1.5129ccp-10f, 0x1.c9b20ap-11f, 0x1.927e24p-8f,  -0x1.db7c9ep-7f, 0x1.189c66p-9f,
                                    0x1.976762p-5f,   -0x1.d6636cp-4f, 0x1.0bcf76p-3f,  -0x1.499d46p-4f, 0x1.612d8ep-6f};
  static constexpr float kFar[] = {-0x1.3f1f68p-17f, 0x1.aea872p-14f,  -0x1.472040p-12f, 0x1.1d05b0p-11f, -0x1.6b35dcp-11f,
                                   0x1.654660p-11f,  -0x1.05c040p-11f, 0x1.0cd4f2p-12f,  -0x1.5c3212p-14f, 0x1.aea578p-17f};
  const auto near = m.lt(a, m.c(2.25f));
  const auto u = m.sub(a, m.sel(near, m.c(1.625f), m.c(3.085f)));
  auto q = m.sel(near, m.c(kNear[0]), m.c(kFar[0]));
  for (size_t i = 1; i < std::size(kNear); ++i) q = m.fma(q, u, m.sel(near, m.c(kNear[i]), m.c(kFar[i])));
  const auto large = m.sub(m.c(1.0f), m.sel(m.gt(a, m.c(3.85f)), m.c(0.0f), q));
  const auto y = m.sel(m.lt(a, m.c(1.0f)), small, large);
  return m.from_bits(m.ior(m.bits(y), m.iand(m.bits(x), m.ci(kSignBit))));
}

// erfc(x) = 1 - erf(x), accurate where 1 - erf(x) loses every bit (erfc(10) ~ 2e-45 is a
// subnormal; 1 - erf(x) is 0 from x = 3.9). Three ranges, chosen by selects:
// - |x| < 0.46875: 1 - erf(x), erf's own small-x polynomial; erfc(x) is in (0.5, 1.5) there, so
//   the subtraction loses nothing;
// - x >= 0.46875: erfc(x) = e^(-x^2) g(x), g(x) = erfc(x) e^(x^2) smooth and slowly falling from 0.6
//   to 0.055: fits of g in x - 1 over [0.46875, 1.5] and x - 2 over [1.5, 2.5], and of x g(x) in
//   1/x^2 - 0.085 over [2.5, 10.1] (~ (1 - 1/(2 x^2)) / sqrt(pi) there), then divided by x. x^2 is
//   carried as hi + lo (an error of 2^-18 in x^2 = 100 would be 2^-18 relative in e^(-x^2), 64 ulp),
//   and e^(-hi) as exp_parts' hi + lo and power of two, so the product rounds once, at the end,
//   into the subnormals where it is one. From 10.1 erfc(x) < 2^-150 and the result is 0 (also
//   for +inf);
// - x <= -0.46875: 2 - erfc(-x), in (1.49, 2], where erfc(-x)'s error is a quarter ulp at most.
// The fits are Chebyshev fits with f32 coefficients, relative error <= 0.45 ulp of g. Worst error
// 2.91 ulp (x = 0x1.b23d5cp+2) over every 61st bit pattern, held to 3.5: exp's own error, the
// fit's and the roundings of g add up.
template <class M> typename M::F erfc_of_positive(M& m, typename M::F a) {
  static constexpr float kNear[] = {0x1.425c46p-13f, -0x1.b4857ap-12f, 0x1.11274ap-10f, -0x1.69bcb8p-9f,
                                    0x1.c8e3aap-8f,  -0x1.11017ap-6f,  0x1.33ca98p-5f,  -0x1.448372p-4f,
                                    0x1.3c2728p-3f,  -0x1.17c4e4p-2f,  0x1.b5d878p-2f};
  static constexpr float kMid[] = {0.0f,           -0x1.1f2cd4p-16f, 0x1.ec7fe0p-15f, -0x1.83208ep-13f,
                                   0x1.364792p-11f, -0x1.e02a00p-10f, 0x1.649170p-8f, -0x1.fa9d3ap-7f,
                                   0x1.5672b8p-5f,  -0x1.b57034p-4f, 0x1.058672p-2f};
  static constexpr float kFar[] = {0.0f,           0.0f,            0x1.6c362ep+6f,  -0x1.999a9ep+4f,
                                   0x1.a97d8cp+2f,  -0x1.26d656p+1f, 0x1.d297aap-1f,  -0x1.b28746p-2f,
                                   0x1.02f380p-2f,  -0x1.d0a702p-3f, 0x1.15e7b6p-1f};
  static_assert(std::size(kNear) == std::size(kMid) && std::size(kMid) == std::size(kFar));
  const auto near = m.lt(a, m.c(1.5f));
  const auto mid = m.lt(a, m.c(2.5f));
  const auto inv = m.div(m.c(1.0f), a);
  const auto u = m.sel(near, m.sub(a, m.c(1.0f)), m.sel(mid, m.sub(a, m.c(2.0f)), m.fma(inv, inv, m.c(-0x1.5bc1a8p-4f))));
  auto coeff = [&](size_t i) { return m.sel(near, m.c(kNear[i]), m.sel(mid, m.c(kMid[i]), m.c(kFar[i]))); };
  auto p = coeff(0);
  for (size_t i = 1; i < std::size(kNear); ++i) p = m.fma(p, u, coeff(i));
  const auto g = m.sel(mid, p, m.div(p, a));
  // e^(-x^2) g = (eh + el) (1 - sq_lo) g 2^n, with the small terms summed first.
  const auto sq = m.mul(a, a);
  const auto sq_lo = m.fma(a, a, m.sub(m.c(0.0f), sq));
  const ExpParts<M> e = exp_parts(m, m.sub(m.c(0.0f), sq));
  const auto y = m.fma(m.fma(m.sub(m.c(0.0f), e.hi), sq_lo, e.lo), g, m.mul(e.hi, g));
  return m.sel(m.gt(a, m.c(10.1f)), m.c(0.0f), m.mul(m.mul(y, e.s1), e.s2));
}
template <class M> typename M::F erfc(M& m, typename M::F x) {
  const auto tail = erfc_of_positive(m, abs(m, x));
  const auto large = m.sel(m.lt(x, m.c(0.0f)), m.sub(m.c(2.0f), tail), tail);
  return m.sel(m.lt(abs(m, x), m.c(0.46875f)), m.sub(m.c(1.0f), erf_small(m, x)), large);
}

// sin and cos of a = |x| >= 0: a = n pi/2 + r, |r| <= pi/4, then by the quadrant (n + offset) mod 4
// sin r, cos r, -sin r or -cos r (offset 0 gives sin a, 1 gives cos a). The reduction is exact for
// every float (Payne-Hanek), in 32-bit integer arithmetic with no branch and no table:
//
// a = m 2^(e-150), m the 24-bit significand and e the exponent field. Of a 2/pi mod 4 (n mod 4 and
// the fraction) only the bits of 2/pi from weight 2^(151-e) on matter: earlier bits times m are
// multiples of 4. Of the later ones, 96 bits are enough: the rest adds less than 2^-70 quadrants,
// and dropping the lowest product word 2^-62, while no float comes closer to a multiple of pi/2
// than 1.6e-9 (2^-29.9 quadrants, at 0x1.f37c8ap+95), so r keeps 32 good bits. The 96 bits
// are three 32-bit words cut out of kTwoOverPiWords at bit s = e - 126 by selects and shifts;
// m times them, mod 2^96 and without the lowest 32 bits of the last product, is a 64-bit fixed
// point number with 2 integer bits (the quadrant) and 62 fraction bits. Rounding to the nearest
// quadrant leaves f in [-1/2, 1/2), split into three exactly representable floats and summed as
// hi + lo; r = (hi + lo) pi/2, rounded once.
//
// Below pi/4, r = a itself (n = 0): exact, and it keeps tiny and subnormal inputs exact. Infinities
// and NaN give NaN. Measured over every float (TESSERA_EXHAUSTIVE=1 in the accuracy tests): sin
// 1.552 ulp at worst (x = 0x1.4d56fep+83), cos 1.554 (x = 0x1.3cb202p+44), held to 2.
//
// The bits of 2/pi after the binary point, behind 26 zero bits, so that every exponent from
// pi/4's (e = 126) to FLT_MAX's (e = 254) starts its window at s = e - 126 in [0, 128], inside the
// first five words, with the three words after the start word still in the table.
inline constexpr uint32_t kTwoOverPiWords[] = {0x00000028, 0xbe60db93, 0x91054a7f, 0x09d5f47d,
                                               0x4d377036, 0xd8a5664f, 0x10e4107f, 0x9458eaf7};
template <class M> struct Reduced {
  typename M::F r;
  typename M::I n;  // the quadrant, mod 4 only
};
template <class M> Reduced<M> reduce_pi_over_2(M& m, typename M::F a) {
  using I = typename M::I;
  // The window of an input outside [pi/4, inf) is never used: clamping it to 1 keeps every shift
  // below in range.
  const auto ac = m.sel(m.bor(m.lt(a, m.c(0.5f)), m.isnan(m.sub(a, a))), m.c(1.0f), a);
  const auto ia = m.bits(ac);
  const auto mant = m.ior(m.iand(ia, m.ci(0x007fffff)), m.ci(0x00800000));
  const auto s = m.isub(m.lsr(ia, 23), m.ci(126));
  const auto q = m.lsr(s, 5);
  const auto t = m.iand(s, m.ci(31));
  // word(i) = kTwoOverPiWords[q + i], q in [0, 4], by a chain of selects.
  auto word = [&](int i) {
    I w = m.ci(static_cast<int32_t>(kTwoOverPiWords[i]));
    for (int k = 1; k <= 4; ++k) w = m.seli(m.ieq(q, m.ci(k)), m.ci(static_cast<int32_t>(kTwoOverPiWords[i + k])), w);
    return w;
  };
  const I w[4] = {word(0), word(1), word(2), word(3)};
  // The 32 bits from bit t of w[i] on: w[i] << t joined with the top t bits of w[i + 1] (shifted in
  // two steps, since a shift by 32 is not defined).
  const auto tc = m.isub(m.ci(31), t);
  auto window = [&](int i) { return m.ior(m.shlv(w[i], t), m.lsrv(m.lsr(w[i + 1], 1), tc)); };
  const auto w0 = window(0), w1 = window(1), w2 = window(2);
  // Q = (m w0 2^64 + m w1 2^32 + m w2) / 2^32 mod 2^64, as hi:lo 32-bit words.
  const auto m1_lo = m.imul(mant, w1);
  const auto lo = m.iadd(m1_lo, m.umulhi(mant, w2));
  const auto carry = m.seli(m.ult(lo, m1_lo), m.ci(1), m.ci(0));
  const auto hi = m.iadd(m.iadd(m.imul(mant, w0), m.umulhi(mant, w1)), carry);
  // Round to the nearest quadrant: n the top two bits of Q + 2^61, f = Q - n 2^62 in 2^-62 units,
  // its top word in [-2^29, 2^29).
  const auto hr = m.iadd(hi, m.ci(1 << 29));
  const auto n = m.lsr(hr, 30);
  const auto fh = m.isub(m.iand(hr, m.ci((1 << 30) - 1)), m.ci(1 << 29));
  // f = p1 2^-22 + p2 2^-46 + p3 2^-62 with pieces of 22, 24 and 16 bits, each converted exactly.
  // p1 + p2 is exact as a Fast2Sum (|p1 part| >= 2^-22 > |p2 part| unless p1 = 0).
  const auto p1 = m.mul(m.to_float(m.sra(fh, 8)), m.c(0x1p-22f));
  const auto p2 = m.mul(m.to_float(m.ior(m.shl(m.iand(fh, m.ci(0xff)), 16), m.lsr(lo, 16))), m.c(0x1p-46f));
  const auto p3 = m.mul(m.to_float(m.iand(lo, m.ci(0xffff))), m.c(0x1p-62f));
  const auto fhi = m.add(p1, p2);
  const auto flo = m.add(m.add(m.sub(p1, fhi), p2), p3);
  // r = (fhi + flo) pi/2 with pi/2 as two floats, one rounding at the end.
  constexpr float kPio2Hi = 0x1.921fb6p+0f, kPio2Lo = -0x1.777a5cp-25f;
  const auto r = m.fma(fhi, m.c(kPio2Hi), m.fma(fhi, m.c(kPio2Lo), m.mul(flo, m.c(kPio2Hi))));
  const auto small = m.lt(a, m.c(0x1.921fb6p-1f));  // below pi/4
  return {m.sel(small, a, r), m.seli(small, m.ci(0), n)};
}
template <class M> typename M::F sin_cos_of_abs(M& m, typename M::F a, int32_t offset) {
  const Reduced<M> red = reduce_pi_over_2(m, a);
  const auto r = red.r;
  const auto n = m.iadd(red.n, m.ci(offset));
  const auto z = m.mul(r, r);
  // sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2) (Cephes' single precision
  // coefficients); 1 - r^2/2 is carried as hi + lo so its rounding is not added to C's.
  static constexpr float kSin[] = {-1.9515295891e-4f, 8.3321608736e-3f, -1.6666654611e-1f};
  static constexpr float kCos[] = {2.443315711809948e-5f, -1.388731625493765e-3f, 4.166664568298827e-2f};
  const auto s = m.fma(m.mul(r, z), horner(m, z, kSin), r);
  const auto half = m.mul(z, m.c(0.5f));
  const auto hi = m.sub(m.c(1.0f), half);
  const auto lo = m.sub(m.sub(m.c(1.0f), hi), half);  // exact: half <= 0.31
  const auto c = m.add(hi, m.fma(m.mul(z, z), horner(m, z, kCos), lo));
  // Odd quadrants take cos r; quadrants 2 and 3 negate, by adding 2^31 to the bits (flips the sign).
  const auto odd = m.eq(m.to_float(m.iand(n, m.ci(1))), m.c(0.0f));
  const auto y = m.from_bits(m.iadd(m.bits(m.sel(odd, s, c)), m.shl(m.iand(n, m.ci(2)), 30)));
  // +-inf and NaN: NaN (a NaN fails the comparison).
  return m.sel(m.lt(a, m.c(std::numeric_limits<float>::infinity())), y, m.c(std::numeric_limits<float>::quiet_NaN()));
}
template <class M> typename M::F sin(M& m, typename M::F x) {
  const auto y = sin_cos_of_abs(m, abs(m, x), 0);
  return m.from_bits(m.iadd(m.bits(y), m.iand(m.bits(x), m.ci(kSignBit))));  // sin(-x) = -sin(x)
}
template <class M> typename M::F cos(M& m, typename M::F x) { return sin_cos_of_abs(m, abs(m, x), 1); }

}  // namespace math

// The rules the element ops use, on their compute type: tessera's own algorithm for f32 (and so
// bf16/f16, which compute in f32 and round once), libm for f64.
template <std::floating_point C, class Own, class Libm> inline C f32_own_f64_libm(C x, Own own, Libm libm) {
  ScalarMath m;
  if constexpr (std::is_same_v<C, float>) return own(m, x);
  else return libm(x);
}
template <std::floating_point C> inline C float_exp(C x) {
  return f32_own_f64_libm(x, [](ScalarMath& m, float v) { return math::exp(m, v); }, [](double v) { return std::exp(v); });
}
template <std::floating_point C> inline C float_log(C x) {
  return f32_own_f64_libm(x, [](ScalarMath& m, float v) { return math::log(m, v); }, [](double v) { return std::log(v); });
}
template <std::floating_point C> inline C float_tanh(C x) {
  return f32_own_f64_libm(x, [](ScalarMath& m, float v) { return math::tanh(m, v); }, [](double v) { return std::tanh(v); });
}
template <std::floating_point C> inline C float_erf(C x) {
  return f32_own_f64_libm(x, [](ScalarMath& m, float v) { return math::erf(m, v); }, [](double v) { return std::erf(v); });
}
template <std::floating_point C> inline C float_erfc(C x) {
  return f32_own_f64_libm(x, [](ScalarMath& m, float v) { return math::erfc(m, v); }, [](double v) { return std::erfc(v); });
}
template <std::floating_point C> inline C float_sin(C x) {
  return f32_own_f64_libm(x, [](ScalarMath& m, float v) { return math::sin(m, v); }, [](double v) { return std::sin(v); });
}
template <std::floating_point C> inline C float_cos(C x) {
  return f32_own_f64_libm(x, [](ScalarMath& m, float v) { return math::cos(m, v); }, [](double v) { return std::cos(v); });
}
template <std::floating_point C> inline C float_logistic(C x) {
  return f32_own_f64_libm(
      x, [](ScalarMath& m, float v) { return math::logistic(m, v); }, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
}

}  // namespace tessera::rules
