// Internal to libs/runtime: extern matrix products on a CUDA device through
// cuBLASLt — mm, bmm, addmm (alpha, beta) and matmul in torch's forms, for
// f32 (CUBLAS_COMPUTE_32F: no TF32, torch's default), f16 and bf16 (f32
// accumulation) and f64. The shapes are matrix_product.h's, as on the CPU.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "kiln/runtime/cuda_driver.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime::detail {

// What a device extern call runs with: the stream, and device memory from the
// run's allocator (scratch released when the call returns, stream-ordered).
struct CudaCallContext {
  const CudaDriver& driver;
  CUstream stream;
  int device;
  Allocator& allocator;
  std::function<void*(size_t& bytes)> workspace; // the run's cuBLASLt workspace and its size
  bool timedProducts = true; // false: the heuristic's algorithm, untimed (runCuda's deterministic)
  bool capturing = false;    // the stream captures a CUDA graph: nothing may wait for it
};

// Device memory from the context's allocator for the length of one extern
// call (released when it ends: the allocator's release is stream-ordered).
struct Scratch {
  Allocator& allocator;
  void* data;
  Scratch(Allocator& a, size_t bytes) : allocator(a), data(a.allocate(bytes ? bytes : 1)) {}
  ~Scratch() { allocator.release(data); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// The epilogue a step's `epilogue` attribute asks for after the product (and
// addmm's bias): "" or "none", "relu", "gelu_tanh" (torch's gelu(approximate=
// "tanh"); cuBLASLt has no erf gelu), or "bias_grad": the call's one further
// result is the first operand's row sums ([rows] of the product's dtype, f32
// accumulation, as torch's sum): a linear layer's bias grad beside its weight
// grad dy^T @ x; or "gelu_tanh_aux": the product (and addmm's [N] bias) into
// the call's own result, gelu_tanh of it into its one further result
// (cuBLASLt's GELU_AUX_BIAS: a linear layer's pre-activation, kept for the
// backward, and its activation). Error{InvalidArgument} for other names.
enum class Epilogue { None, Relu, GeluTanh, BiasGrad, GeluTanhAux };
Epilogue parseEpilogue(const std::vector<ir::Attr>& attrs);

// Runs `op` into `out` (and the bias_grad epilogue's result into `results`)
// on the device; false when `op` is not a matrix product. Error{Unsupported}
// for a dtype other than f32, f16, bf16, f64 (bias_grad, gelu_tanh_aux: f16,
// bf16),
// Error{InvalidArgument} for results the epilogue does not make.
bool cudaMatrixProduct(const std::string& op, const std::vector<Tensor>& inputs,
                       const std::vector<ir::Attr>& attrs, const Tensor& out,
                       const std::vector<Tensor>& results, const CudaCallContext& context);

} // namespace kiln::runtime::detail
