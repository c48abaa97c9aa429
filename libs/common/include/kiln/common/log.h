// One named spdlog logger per process ("launcher", "tracer", ...), writing
// `key=value` fields a machine can grep. Level from KILN_LOG_LEVEL (default info).
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace kiln {

// Creates (once) and returns the process logger, writing to stderr.
std::shared_ptr<spdlog::logger> initLogger(const std::string& name);

// The process logger; a default one named "kiln" if initLogger was never called.
spdlog::logger& log();

} // namespace kiln
