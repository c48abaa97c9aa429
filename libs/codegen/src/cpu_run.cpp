#include "kiln/codegen/cpu_run.h"

#include "host_buffers.h"
#include "kiln/common/error.h"
#include "kiln/sym/print.h"

namespace kiln::codegen {

std::vector<ir::HostTensor> runCpu(const Program& program, const Schedule& schedule,
                                   const CpuSource& source, const CpuLibrary& library,
                                   const ir::Graph& graph, std::vector<ir::HostTensor> inputs) {
  detail::HostBuffers buffers(program, graph, std::move(inputs));
  std::vector<int64_t> symbols;
  for (sym::Expr s : source.symbols) symbols.push_back(sym::evaluate(s, buffers.binding()));
  for (const Step& step : schedule.steps) {
    if (step.kind == Step::CallExtern) {
      buffers.runExtern(step.buffer);
      continue;
    }
    const std::string& name = source.kernels.at(step.kernel);
    int status = library.kernel(name)(buffers.pointers(), symbols.data());
    if (status == kDivisionByZero)
      throw Error(ErrorCode::InvalidArgument, name + ": integer division by zero");
    if (status == kIndexOutOfRange)
      throw Error(ErrorCode::InvalidArgument, name + ": an index is out of range");
    if (status != kKernelOk)
      throw Error(ErrorCode::Internal, name + ": failed with status " + std::to_string(status));
  }
  std::vector<ir::HostTensor> outputs;
  for (const Output& out : program.outputs) outputs.push_back(buffers.output(out));
  return outputs;
}

} // namespace kiln::codegen
