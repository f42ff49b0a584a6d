// Fuzzes the config loader: YAML text in, a Config or diagnostics out (config/loader.cc), then
// the policy compiler on what loaded (policy/engine.h), as `sandgate serve` and a reload do.
//
// Property, beyond not crashing (no exception escapes either; libFuzzer reports one as a
// crash): every outcome is a value or at least one diagnostic with a message, never neither:
// a reload that fails says why.
#include <cstdint>
#include <string>

#include "config/config.h"
#include "fuzz/check.h"
#include "policy/engine.h"

namespace {

template <typename T>
void checkOutcome(const sandgate::Result<T>& r, const char* what) {
  if (r.ok()) return;
  SANDGATE_FUZZ_CHECK(!r.errors().empty(), what);
  for (const auto& d : r.errors()) SANDGATE_FUZZ_CHECK(!d.message.empty(), what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // configs are small; longer inputs only slow the search
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cfg = sandgate::config::loadString(text, "fuzz.yaml");
  checkOutcome(cfg, "the loader gives a config or says why not");
  if (!cfg.ok()) return 0;
  auto engine = sandgate::policy::Engine::compile(cfg.value());
  checkOutcome(engine, "the compiler gives an engine or says why not");
  return 0;
}
