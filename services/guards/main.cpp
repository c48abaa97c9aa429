// kiln-guards: the guards service process. The common verbs, and lookup,
// insert, entries, observe and mark over libs/guards' EntryStore, kept under
// $KILN_CACHE_DIR/guards; the per-function cache limit comes from
// KILN_GUARDS_CACHE_LIMIT (default 8). See docs/guards.md.
#include <cstdlib>
#include <string>

#include "kiln/common/error.h"
#include "kiln/common/log.h"
#include "kiln/guards/store.h"
#include "kiln/guards/wire.h"
#include "kiln/rpc/service_main.h"
#include "kiln/schema/guards.capnp.h"

namespace {

namespace guards = kiln::guards;
namespace schema = kiln::schema;
using kiln::log;

uint32_t cacheLimitFromEnv() {
  const char* text = std::getenv("KILN_GUARDS_CACHE_LIMIT");
  if (!text || !*text) return guards::kDefaultCacheLimit;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1000000) {
    log().warn("KILN_GUARDS_CACHE_LIMIT={} is not a count in [0, 1000000]; using {}", text,
               guards::kDefaultCacheLimit);
    return guards::kDefaultCacheLimit;
  }
  return static_cast<uint32_t>(value);
}

guards::EntryStore openStore(uint32_t limit) {
  const std::string dir = guards::defaultStoreDir();
  try {
    return guards::EntryStore(dir, limit);
  } catch (const kiln::Error& e) {
    log().error("guards store: {}; keeping entries in memory only", e.what());
    return guards::EntryStore("", limit);
  }
}

class GuardsWorker : public kiln::rpc::Worker {
public:
  explicit GuardsWorker(kiln::rpc::WorkerOptions options)
      : Worker(std::move(options)), store_(openStore(cacheLimitFromEnv())) {
    log().info("guards store dir={} functions={} entries={} limit={}", store_.dir(),
               store_.functionCount(), store_.entryCount(), store_.cacheLimit());
  }

protected:
  void handle(kiln::rpc::Message& request, capnp::MessageBuilder& reply) override {
    auto in = request.root<schema::GuardsRequest>();
    auto out = reply.initRoot<schema::GuardsReply>();
    switch (in.which()) {
    case schema::GuardsRequest::PING: out.setPong(in.getPing()); return;
    case schema::GuardsRequest::INFO:
      kiln::rpc::fillInfo(out.initInfo(), options().service);
      return;
    case schema::GuardsRequest::LOOKUP: return lookup(in.getLookup(), out);
    case schema::GuardsRequest::INSERT: return insert(in.getInsert(), out);
    case schema::GuardsRequest::ENTRIES: return entries(in.getEntries(), out);
    case schema::GuardsRequest::OBSERVE: return observe(in.getObserve(), out);
    case schema::GuardsRequest::MARK: return mark(in.getMark(), out);
    }
    throw kiln::Error(kiln::ErrorCode::Unsupported,
                      "unknown verb " + std::to_string(int(in.which())));
  }

private:
  void lookup(schema::LookupRequest::Reader in, schema::GuardsReply::Builder out) {
    const guards::FunctionKey function = guards::fromWire(in.getFunction());
    const guards::LookupResult result = store_.lookup(function, guards::fromWire(in.getCall()));
    auto reply = out.initLookup();
    if (result.hit) {
      guards::toWire(*result.hit, reply.initHit());
      return;
    }
    auto miss = reply.initMiss();
    auto reasons = miss.initReasons(static_cast<unsigned>(result.reasons.size()));
    std::string said;
    for (unsigned k = 0; k < reasons.size(); ++k) {
      reasons[k].setEntry(result.reasons[k].first);
      reasons[k].setReason(result.reasons[k].second);
      said += (k ? "; " : "") + std::to_string(result.reasons[k].first) + ": " +
              result.reasons[k].second;
    }
    miss.setRunEagerly(result.runEagerly);
    guards::toWire(result.frame, miss.initFrame());
    log().info("miss function={} entries={} run_eagerly={} reasons=[{}]", function.text(),
               result.reasons.size(), result.runEagerly, said);
  }

  void insert(schema::InsertRequest::Reader in, schema::GuardsReply::Builder out) {
    const guards::FunctionKey function = guards::fromWire(in.getFunction());
    const guards::InsertResult result = store_.insert(function, guards::fromWire(in.getEntry()));
    auto reply = out.initInsert();
    reply.setId(result.id);
    reply.setRunEagerly(result.runEagerly);
    const size_t count = store_.entries(function).size();
    if (result.runEagerly)
      log().warn("cache limit reached function={} limit={}: not stored; its calls run eagerly",
                 function.text(), store_.cacheLimit());
    else if (result.known)
      log().info("insert repeated function={} entry={}", function.text(), result.id);
    else
      log().info("recompile function={} entry={} entries={}", function.text(), result.id, count);
  }

  void entries(schema::FunctionKey::Reader in, schema::GuardsReply::Builder out) {
    const guards::FunctionKey function = guards::fromWire(in);
    const auto& entries = store_.entries(function);
    auto reply = out.initEntries();
    auto list = reply.initEntries(static_cast<unsigned>(entries.size()));
    for (unsigned k = 0; k < list.size(); ++k) guards::toWire(entries[k], list[k]);
    guards::toWire(store_.frame(function), reply.initFrame());
    reply.setLimit(store_.cacheLimit());
  }

  void observe(schema::ObserveRequest::Reader in, schema::GuardsReply::Builder out) {
    const guards::FunctionKey function = guards::fromWire(in.getFunction());
    const std::optional<guards::JobMember> job = guards::fromWire(in.getJob());
    const guards::ObserveResult result =
        store_.observe(function, guards::fromWire(in.getObservation().getInputs()), job);
    auto reply = out.initObserve();
    if (result.frame) {
      guards::toWire(*result.frame, reply.initFrame());
    } else {
      reply.setPending(static_cast<uint32_t>(result.missing.size()));
      auto missing = reply.initMissing(static_cast<unsigned>(result.missing.size()));
      for (unsigned k = 0; k < missing.size(); ++k) missing.set(k, result.missing[k]);
    }
    if (result.changed)
      log().info("automatic dynamic function={}{} frame=[{}]", function.text(),
                 job ? " job=" + job->job + " round=" + std::to_string(job->round) : std::string(),
                 oneLine(store_.frame(function).text()));
  }

  void mark(schema::MarkRequest::Reader in, schema::GuardsReply::Builder out) {
    const guards::FunctionKey function = guards::fromWire(in.getFunction());
    const guards::FrameState frame = store_.mark(function, in.getDim().cStr(), in.getDynamic());
    guards::toWire(frame, out.initMark());
    log().info("{} function={} dim={}", in.getDynamic() ? "mark_dynamic" : "mark_static",
               function.text(), in.getDim().cStr());
  }

  static std::string oneLine(std::string text) {
    while (!text.empty() && text.back() == '\n') text.pop_back();
    for (char& c : text)
      if (c == '\n') c = ';';
    return text;
  }

  guards::EntryStore store_;
};

} // namespace

int main(int argc, char** argv) {
  return kiln::rpc::serviceMain<GuardsWorker>("guards", argc, argv);
}
