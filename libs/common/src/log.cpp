#include "kiln/common/log.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace kiln {

static std::shared_ptr<spdlog::logger>& processLogger() {
  static std::shared_ptr<spdlog::logger> logger;
  return logger;
}

std::shared_ptr<spdlog::logger> initLogger(const std::string& name) {
  auto& logger = processLogger();
  if (logger && logger->name() == name) return logger;
  logger = spdlog::get(name);
  if (!logger) logger = spdlog::stderr_color_mt(name, spdlog::color_mode::never);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ " + name + "[%P] %v");
  const char* level = std::getenv("KILN_LOG_LEVEL");
  logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  return logger;
}

spdlog::logger& log() {
  auto& logger = processLogger();
  if (!logger) initLogger("kiln");
  return *logger;
}

} // namespace kiln
