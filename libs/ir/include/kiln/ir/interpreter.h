// kiln::ir::interpret: the reference interpreter. Runs a Graph on the CPU one
// element at a time with double or int64 arithmetic through strided indexing:
// slow and obviously correct, the oracle that compiled kernels are tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {

// A concrete tensor: a strided view (sizes, strides in elements, storage
// offset) of shared bytes. Copies share the bytes, as views in torch do.
struct HostTensor {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storageOffset = 0;
  std::shared_ptr<std::vector<std::byte>> storage;

  int64_t numel() const;
  // A contiguous tensor holding `values` (row-major) converted to `dtype`.
  static HostTensor fromDoubles(DType dtype, std::vector<int64_t> sizes,
                                const std::vector<double>& values);
  // The elements in row-major order, converted to double.
  std::vector<double> toDoubles() const;
  std::vector<int64_t> toInts() const; // likewise, as int64 (floats truncated)
};

// Runs `graph` on `inputs` (one per placeholder, in order) and returns its
// outputs (a symbolic-scalar output as a 0-d i64 tensor). The graph's symbols
// are bound from the inputs' sizes, strides (of dims not of size 1) and
// symbolic storage offsets; a constant offset may be any (views count from
// it). Error{InvalidArgument} naming the input or symbol when they disagree (a
// symbol bound twice to different values or outside its range, a wrong rank,
// dtype, constant size or stride). Error{Unsupported} naming an op the
// interpreter does not implement. Views (and the pieces of split, chunk and
// unbind, which getitem hands out) share their input's bytes; in-place ops and
// out= forms write them.
std::vector<HostTensor> interpret(const Graph& graph, std::vector<HostTensor> inputs);

// Floor division of floats as torch computes it in dtype `t` (fmod-based, each
// step rounded to t): exact where floor(x / y) would round up to an integer.
double floorDivide(DType t, double x, double y);

// Conversions of one value to the nearest value of a floating dtype, rounding
// to nearest even (bits of f16/bf16 as stored).
uint16_t toHalfBits(double x);
uint16_t toBFloat16Bits(double x);
double fromHalfBits(uint16_t bits);
double fromBFloat16Bits(uint16_t bits);

} // namespace kiln::ir
