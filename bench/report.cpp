#include "report.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace kiln::bench {

namespace {

std::string commandOutput(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[256];
    while (fgets(buffer, sizeof buffer, pipe)) out += buffer;
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string utcNow(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, format, &tm);
  return buffer;
}

std::string nproc() {
  return std::to_string(std::thread::hardware_concurrency());
}

} // namespace

std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string defaultResultPath(const std::string& name, const std::string& kind) {
  return fmt::format("{}/bench/results/{}-{}-{}.json", KILN_SOURCE_DIR, name,
                     kind.empty() ? nproc() + "cpu" : kind, utcNow("%Y-%m-%d"));
}

std::string resultHeader(const std::string& benchmark) {
  const std::string git = fmt::format("git -C '{}' ", KILN_SOURCE_DIR);
  const std::string commit = commandOutput(git + "rev-parse HEAD 2>/dev/null");
  const bool dirty = !commandOutput(git + "status --porcelain 2>/dev/null").empty();
  return fmt::format("  \"benchmark\": {},\n  \"date\": {},\n"
                     "  \"machine\": {{\"hostname\": {}, \"nproc\": {}, \"cpu\": {}}},\n"
                     "  \"commit\": {},\n  \"dirty\": {},\n",
                     jsonString(benchmark), jsonString(utcNow("%Y-%m-%dT%H:%M:%SZ")),
                     jsonString(commandOutput("hostname")), nproc(), jsonString(cpuModel()),
                     jsonString(commit), dirty ? "true" : "false");
}

} // namespace kiln::bench
