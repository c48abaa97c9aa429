#include "kiln/codegen/cache.h"

#include "fnv.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kiln/codegen/compile.h"
#include "kiln/common/error.h"
#include "kiln/common/log.h"

namespace kiln::codegen {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'A', 'R', 'T', '1'};
constexpr size_t kHeader = sizeof kMagic + 16; // magic, length, checksum

uint64_t checksum(std::string_view bytes) {
  return detail::fnv1a(bytes);
}

void makeDirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      throw Error(ErrorCode::Io, "codegen cache: cannot create " + prefix + ": " + std::strerror(errno));
  }
}

} // namespace

std::string defaultCacheDir() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln";
}

ArtifactCache::ArtifactCache(std::string dir) : dir_(std::move(dir)) {
  makeDirs(dir_);
}

std::string ArtifactCache::pathOf(const std::string& key) const {
  return dir_ + "/" + key + ".kart";
}

std::optional<std::string> ArtifactCache::get(const std::string& key) {
  std::string path = pathOf(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  std::string file = text.str();
  uint64_t length = 0, sum = 0;
  bool intact = file.size() >= kHeader && std::memcmp(file.data(), kMagic, sizeof kMagic) == 0;
  if (intact) {
    std::memcpy(&length, file.data() + sizeof kMagic, 8);
    std::memcpy(&sum, file.data() + sizeof kMagic + 8, 8);
    intact = length == file.size() - kHeader &&
             checksum(std::string_view(file).substr(kHeader)) == sum;
  }
  if (!intact) {
    log().warn("codegen cache: entry={} is corrupted; removing it", path);
    std::remove(path.c_str());
    return std::nullopt;
  }
  return file.substr(kHeader);
}

void ArtifactCache::put(const std::string& key, const std::string& bytes) {
  std::string path = pathOf(key);
  std::string temp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary);
    uint64_t length = bytes.size(), sum = checksum(bytes);
    out.write(kMagic, sizeof kMagic);
    out.write(reinterpret_cast<const char*>(&length), 8);
    out.write(reinterpret_cast<const char*>(&sum), 8);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::remove(temp.c_str());
      throw Error(ErrorCode::Io, "codegen cache: cannot write " + temp);
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    throw Error(ErrorCode::Io, "codegen cache: cannot store " + path);
  }
}

CompileResult compileCached(const ir::Graph& graph, const std::string& target,
                            ArtifactCache& cache) {
  std::string key = artifactKey(graph, target);
  if (std::optional<std::string> bytes = cache.get(key)) return {std::move(*bytes), true};
  log().info("codegen: compiling key={} target={}", key, target);
  CompileResult result{runtime::toBytes(compileArtifact(graph, target, cache.dir())), false};
  cache.put(key, result.artifact);
  return result;
}

} // namespace kiln::codegen
