/* 1 + erf(x) and the normal cdf Phi(x) = (1 + erf(x / sqrt(2))) / 2 in f32: exact GELU
   (x Phi(x)) and its backward. One definition for CUDA kernels (their prelude holds this
   text; the emitter calls them for `1 + erf(x)` and for `(1 + erf(x * M_SQRT1_2)) * 0.5`)
   and for the host (prelude.cpp compiles it: the tests check it against libm). KILN_FN
   marks it host or device code.

   Why not 1 + erff(x): CUDA's erff picks one of two polynomials per element (a select per
   coefficient) and the GELU of a bf16 tensor is bound by instructions, not memory (an
   H100, gelu(x * a + b) * sigmoid(x) of 8192^2 bf16: 115 us with erff, 101 with this;
   a copy of as many bytes, 92). Here one polynomial in
   t = |x| fits log2(erfc(t)) on [0, 4] (least squares weighted by erfc(t), which is what
   an error in it costs the sum), so erfc(t) = 2^q(t) and 1 + erf(x) is erfc(t) for x < 0,
   2 - erfc(t) otherwise. Absolute error < 1.5e-7, about an ulp of the sum in [1, 2), as
   the rounding of 1 + erff(x) itself; for x < 0 the sum is erfc(|x|), computed as such:
   off by under 2% down to erfc(3.5) ~ 7e-7, where 1 + erff(x) cancels to a few ulp of 1.
   Past t = 4, erfc(t) < 2^-25: the sum is 0 or 2, as f32's 1 + erff(x) is. NaN stays NaN.

   Phi takes the same polynomial with 1/sqrt(2) and the halving folded into it: two
   instructions fewer an element than 0.5 * (1 + erf(x * 0.7071)) (an H200, the bf16 case
   above with a hand-written twin: 74.8 -> 72.6 us, a copy 65.6). Multiplying by 0.5 is
   exact, so Phi is (1 + erf) / 2 to the same ulp. */
KILN_FN float kiln_exp2_ftz(float x) {
#ifdef __CUDACC__
  // ex2.approx.ftz.f32 as NVVM's intrinsic, not inline asm: NVVM merges two calls on the
  // same value only for the intrinsic.
  return __nvvm_ex2_approx_ftz_f(x);
#else
  return exp2f(x);
#endif
}
// r(t) with log2(erfc(s t)) = t r(t) for s t in [0, 4]: q above, scaled by s, a constant
// (the coefficients' products with its powers fold at compile time; exact for s = 1).
KILN_FN float kiln_log2_erfc_slope(float t, float s) {
  float s2 = s * s, s3 = s2 * s, s4 = s2 * s2;
  float r = -4.5350228901952505e-05f * (s4 * s4);
  r = fmaf(r, t, 0.00044543860713019967f * (s4 * s3));
  r = fmaf(r, t, -0.0014892184408381581f * (s4 * s2));
  r = fmaf(r, t, -0.0007749913493171334f * (s4 * s));
  r = fmaf(r, t, 0.028253993019461632f * s4);
  r = fmaf(r, t, -0.14848175644874573f * s3);
  r = fmaf(r, t, -0.9184163808822632f * s2);
  return fmaf(r, t, -1.6279085874557495f * s);
}
// The power always, then a select, not a branch around it: straight-line code lets NVVM
// merge two calls on the same x (the GELU backward's kernel computes the cdf for the grad
// and again for the recomputed activation: 24 -> 16 ex2 a vector of 8, the polynomial
// once). Past the fit's end the exponent is far below -25 (or -inf): the power is 0 or a
// denormal, unused.
KILN_FN float kiln_erf_plus_one(float x) {
  float t = fabsf(x);
  float erfc = kiln_exp2_ftz(t * kiln_log2_erfc_slope(t, 1.0f));
  erfc = t >= 4.0f ? 0.0f : erfc;
  return x >= 0.0f ? 2.0f - erfc : erfc;
}
KILN_FN float kiln_normal_cdf(float x) {
  float t = fabsf(x);
  float tail = kiln_exp2_ftz(fmaf(t, kiln_log2_erfc_slope(t, 0.70710678118654752f), -1.0f));
  tail = t >= 5.6568542494923802f ? 0.0f : tail; // erfc(t / sqrt(2)) / 2, 0 past t / sqrt(2) = 4
  return x >= 0.0f ? 1.0f - tail : tail;
}
