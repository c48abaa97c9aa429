// The text every kernel file starts with (see prelude.h).
#include "prelude.h"

#include <math.h>

#include "erf_plus_one_source.h"
#include "kiln/codegen/cuda_emitter.h"
#include "kiln/ir/philox.h"
#include "kiln/sym/print.h"

namespace kiln::codegen {
namespace {
#define KILN_FN static inline
#include "erf_plus_one_fn.h"
#undef KILN_FN
} // namespace

float erfPlusOne(float x) {
  return kiln_erf_plus_one(x);
}

float normalCdf(float x) {
  return kiln_normal_cdf(x);
}

} // namespace kiln::codegen

namespace kiln::codegen::detail {
namespace {

// The CPU's headers, and glibc's vector math for `omp simd` loops.
const char* kCpuHead = R"(#define KILN_FN static inline
#include <stdint.h>
#include <vector>
#include <string.h>
#include <cmath>
#include <limits>

/* Vector variants of the math functions exist in glibc's libmvec (linked with
   -lmvec): declaring them lets `omp simd` loops call them instead of the
   scalar functions (glibc declares them only under -ffast-math, whose other
   effects on NaN and infinities kiln cannot have). */
#define KILN_VECTOR_MATH(type, name) _Pragma("omp declare simd notinbranch") type name(type);
extern "C" {
KILN_VECTOR_MATH(float, expf) KILN_VECTOR_MATH(float, exp2f) KILN_VECTOR_MATH(float, expm1f)
KILN_VECTOR_MATH(float, logf) KILN_VECTOR_MATH(float, log1pf) KILN_VECTOR_MATH(float, sinf)
KILN_VECTOR_MATH(float, cosf) KILN_VECTOR_MATH(float, tanf) KILN_VECTOR_MATH(float, tanhf)
KILN_VECTOR_MATH(float, erff)
KILN_VECTOR_MATH(double, exp) KILN_VECTOR_MATH(double, exp2) KILN_VECTOR_MATH(double, expm1)
KILN_VECTOR_MATH(double, log) KILN_VECTOR_MATH(double, log1p) KILN_VECTOR_MATH(double, sin)
KILN_VECTOR_MATH(double, cos) KILN_VECTOR_MATH(double, tan) KILN_VECTOR_MATH(double, tanh)
KILN_VECTOR_MATH(double, erf)
}

)";

// NVRTC has no C library headers: the integer types, and the `std::` names
// the shared kernel text uses, mapped onto CUDA's device math (whose float
// overloads stay in float).
const char* kCudaHead = R"(#define KILN_FN static __device__ __forceinline__
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INT64_C(c) c##LL
namespace std {
using ::exp; using ::exp2; using ::expm1; using ::log; using ::log1p; using ::sqrt; using ::sin;
using ::cos; using ::tan; using ::tanh; using ::erf; using ::floor; using ::ceil; using ::trunc;
using ::nearbyint; using ::fabs; using ::fmod; using ::pow; using ::copysign; using ::ldexp;
using ::isinf; using ::isnan;
template <class T> struct numeric_limits;
template <> struct numeric_limits<float> {
  static __device__ float infinity() { return __int_as_float(0x7f800000); }
  static __device__ float quiet_NaN() { return __int_as_float(0x7fc00000); }
  static __device__ float lowest() { return -3.402823466e+38f; }
  static __device__ float max() { return 3.402823466e+38f; }
};
template <> struct numeric_limits<double> {
  static __device__ double infinity() { return __longlong_as_double(0x7ff0000000000000LL); }
  static __device__ double quiet_NaN() { return __longlong_as_double(0x7ff8000000000000LL); }
  static __device__ double lowest() { return -1.7976931348623157e+308; }
  static __device__ double max() { return 1.7976931348623157e+308; }
};
#define KILN_INT_LIMITS(T, lo, hi) \
  template <> struct numeric_limits<T> { \
    static __device__ T lowest() { return lo; } \
    static __device__ T max() { return hi; } \
  };
KILN_INT_LIMITS(int8_t, -128, 127)
KILN_INT_LIMITS(int16_t, -32768, 32767)
KILN_INT_LIMITS(int32_t, -2147483647 - 1, 2147483647)
KILN_INT_LIMITS(int64_t, -9223372036854775807LL - 1, 9223372036854775807LL)
KILN_INT_LIMITS(uint8_t, 0, 255)
KILN_INT_LIMITS(bool, false, true)
} // namespace std
)";

// Helpers every kernel may call: half-precision conversions (round to nearest
// even), NaN-propagating min/max, Python-style integer division that reports
// a zero divisor instead of trapping, and index checks.
const char* kHelpers = R"(
typedef uint16_t kiln_half;
typedef uint16_t kiln_bf16;

/* A float's bits and back. */
KILN_FN uint32_t kiln_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}
KILN_FN float kiln_float(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
#ifdef __CUDACC__
/* The conversion instructions: round to nearest even, as below. */
KILN_FN float kiln_h2f(kiln_half h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
KILN_FN kiln_half kiln_f2h(float f) { kiln_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
KILN_FN float kiln_b2f(kiln_bf16 b) { return __uint_as_float((uint32_t)b << 16); }
KILN_FN kiln_bf16 kiln_f2b(float f) { kiln_bf16 b; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f)); return b; }
#else
KILN_FN float kiln_h2f(kiln_half h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return kiln_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return kiln_float(sign | ((exp + 112) << 23) | (mant << 13));
  float f = std::ldexp((float)mant, -24); /* subnormal or zero */
  return sign ? -f : f;
}
KILN_FN kiln_half kiln_f2h(float f) {
  uint32_t x = kiln_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return (kiln_half)(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return (kiln_half)(sign | 0x7c00u); /* rounds to infinity */
  if (abs < 0x38800000u) /* subnormal or zero: round at 2^-24 */
    return (kiln_half)(sign | (uint32_t)std::nearbyint(kiln_float(abs) * 16777216.0f));
  uint32_t mant = abs & 0x7fffffu, exp = (abs >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return (kiln_half)(sign | h);
}
KILN_FN float kiln_b2f(kiln_bf16 b) { return kiln_float((uint32_t)b << 16); }
KILN_FN kiln_bf16 kiln_f2b(float f) {
  uint32_t x = kiln_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (kiln_bf16)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (kiln_bf16)(x >> 16);
}
#endif
KILN_FN float kiln_round_h(float f) { return kiln_h2f(kiln_f2h(f)); }
KILN_FN float kiln_round_b(float f) { return kiln_b2f(kiln_f2b(f)); }

template <class T> KILN_FN T kiln_maximum(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}
template <class T> KILN_FN T kiln_minimum(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a < b ? a : b;
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* f32 maximum and minimum on the GPU: one instruction that propagates NaN, as torch's
   (a zero's sign aside: -0 < +0). NVRTC optimises a row of compare-and-selects slowly
   (bench/README, gpu: "CUDA emitter choices"). */
KILN_FN float kiln_maximum(float a, float b) { float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
KILN_FN float kiln_minimum(float a, float b) { float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
#endif
template <class T> KILN_FN T kiln_relu(T x) { return x != x ? x : (x > T(0) ? x : T(0)); }
template <class T> KILN_FN T kiln_sign(T x) { return x != x ? T(0) : T((x > T(0)) - (x < T(0))); }
template <class T> KILN_FN T kiln_sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
#ifdef __CUDACC__
/* f32 sigmoid on the GPU as Inductor's: the approximate exp and reciprocal (a few ulp;
   measured on an H100: bf16 gelu(x*a+b)*sigmoid(x) 151 -> 125 us for 8192^2). Flushing
   denormals changes no result: a denormal exponent's 2^x rounds to 1 anyway, a denormal
   2^x added to 1 vanishes, and 1 / y for y past 2^126 is 0 as __fdividef's is. Without
   .ftz each instruction is a few more for the denormal path (125 -> 115 us). */
KILN_FN float kiln_rcp_ftz(float x) { float y; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
KILN_FN float kiln_sigmoid(float x) { return kiln_rcp_ftz(1.0f + kiln_exp2_ftz(x * -1.4426950408889634f)); }
#endif
/* torch's floor division of floats (fmod-based, exact where floor(a / b) would round up),
   each step rounded by `r` (torch computes it in f16/bf16; f32 and f64 round as themselves). */
template <class T, class R> KILN_FN T kiln_fdiv_floor_rounded(T a, T b, R r) {
  if (b == T(0)) return r(a / b);
  T mod = std::fmod(a, b);
  T div = r(r(a - mod) / b);
  if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div = r(div - T(1));
  if (div == T(0)) return std::copysign(T(0), r(a / b));
  T floored = std::floor(div);
  return div - floored > T(0.5) ? floored + T(1) : floored;
}
template <class T> KILN_FN T kiln_fdiv_floor(T a, T b) {
  return kiln_fdiv_floor_rounded(a, b, [](T v) { return v; });
}
template <class T> KILN_FN T kiln_fremainder(T a, T b) {
  T r = std::fmod(a, b);
  return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
}
#ifdef __CUDACC__
KILN_FN void kiln_flag(int* error, int code) { *error = code; } /* a thread's own status */
/* An unordered scatter's add (the dtypes LowerOptions::unorderedScatter takes). */
KILN_FN void kiln_atomic_add(float* p, float v) { atomicAdd(p, v); }
KILN_FN void kiln_atomic_add(double* p, double v) { atomicAdd(p, v); }
KILN_FN void kiln_atomic_add(int32_t* p, int32_t v) { atomicAdd(reinterpret_cast<int*>(p), v); }
KILN_FN void kiln_atomic_add(int64_t* p, int64_t v) { /* two's complement: the unsigned add */
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
#else
KILN_FN void kiln_flag(int* error, int code) { __atomic_store_n(error, code, __ATOMIC_RELAXED); }
#endif
KILN_FN int64_t kiln_idiv_floor(int64_t a, int64_t b, int* error) {
  if (b == 0) { kiln_flag(error, 1); return 0; }
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
KILN_FN int64_t kiln_idiv_trunc(int64_t a, int64_t b, int* error) {
  if (b == 0) { kiln_flag(error, 1); return 0; }
  return a / b;
}
KILN_FN int64_t kiln_imod(int64_t a, int64_t b, int* error) {
  if (b == 0) { kiln_flag(error, 1); return 0; }
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
KILN_FN int64_t kiln_ifmod(int64_t a, int64_t b, int* error) {
  if (b == 0) { kiln_flag(error, 1); return 0; }
  return a % b;
}
KILN_FN int64_t kiln_ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  uint64_t r = 1, base = (uint64_t)a;
  for (; b; b >>= 1, base *= base) if (b & 1) r *= base;
  return (int64_t)r;
}
KILN_FN int64_t kiln_check_index(int64_t at, int64_t size, int* error) {
  if (at < 0 || at >= size) { kiln_flag(error, 2); return 0; }
  return at;
}
)";

} // namespace

std::string kernelPrelude(bool cuda) {
  return std::string(cuda ? kCudaHead : kCpuHead) + sym::cppPrelude() + ir::philoxCppSource() +
         kErfPlusOneSource + kHelpers;
}

} // namespace kiln::codegen::detail
