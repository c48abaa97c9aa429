// Writes the hand-built CUDA artifacts that tests/python/test_cuda_runtime.py
// loads through kiln.ir (the cubin compiled here with NVRTC: no GPU needed).
//   kiln-cuda-test-artifacts DIR  ->  DIR/<name>.kiln for each name below
#include <fstream>
#include <iostream>

#include "cuda_test_plans.h"
#include "kiln/common/error.h"

using namespace kiln;
using namespace kiln::runtime;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kiln-cuda-test-artifacts DIR\n";
    return 2;
  }
  try {
    std::string cubin = testing::compileCubin("sm_90");
    auto write = [&](const std::string& name, const Plan& plan) {
      std::ofstream out(std::string(argv[1]) + "/" + name + ".kiln", std::ios::binary);
      out << toBytes(testing::cudaArtifact(plan, cubin, name));
      if (!out) throw Error(ErrorCode::Io, "cannot write " + name);
    };
    sym::SymbolTable table;
    using ir::DType;
    write("scale_add", testing::scaleAddPlan(table));
    write("gather", testing::gatherPlan(table));
    write("scale_then_matmul", testing::scaleThenMatmulPlan(table));
    write("mm_f32",
          testing::productPlan(table, {"mm", DType::Float32, {{64, 32}, {32, 48}}, {}, {64, 48}}));
    write("bmm_bf16",
          testing::productPlan(
              table, {"bmm", DType::BFloat16, {{4, 16, 8}, {4, 8, 24}}, {}, {4, 16, 24}}));
    write("matmul_f32",
          testing::productPlan(
              table, {"matmul", DType::Float32, {{2, 1, 5, 7}, {3, 7, 4}}, {}, {2, 3, 5, 4}}));
    write("addmm_f32",
          testing::productPlan(
              table, {"addmm", DType::Float32, {{48}, {64, 32}, {32, 48}}, {}, {64, 48}, 1, 1}));
    write(
        "addmm_scaled_f32",
        testing::productPlan(
            table, {"addmm", DType::Float32, {{64, 1}, {64, 32}, {32, 48}}, {}, {64, 48}, 2, 0.5}));
    return 0;
  } catch (const Error& e) {
    std::cerr << "kiln-cuda-test-artifacts: " << e.what() << "\n";
    return 1;
  }
}
