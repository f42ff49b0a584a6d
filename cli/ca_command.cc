// `sandgate ca init --out DIR [--force]`: argument parsing and output only; the work is in
// ca/tls_ca.cc.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "ca/tls_ca.h"
#include "cli/commands.h"

namespace sandgate::cli {

namespace {
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;

struct CaInitArgs {
  std::string out;
  bool force = false;
};
}  // namespace

void addCaCommands(CLI::App& app, Action* action) {
  auto* ca = app.add_subcommand("ca", "Manage the TLS interception CA");
  ca->require_subcommand(1);

  auto args = std::make_shared<CaInitArgs>();
  auto* init = ca->add_subcommand(
      "init", "Create an ECDSA P-256 CA: DIR/ca.pem (certificate) and DIR/ca.key (mode 0600)");
  init->add_option("--out,-o", args->out, "Directory to write ca.pem and ca.key into")->required();
  init->add_flag("--force", args->force, "Replace an existing ca.pem / ca.key");
  init->callback([args, action] {
    *action = [args]() -> int {
      auto files = proxy::CertificateAuthority::init(args->out, args->force);
      if (!files) {
        for (const auto& e : files.errors()) fmt::print(stderr, "sandgate: {}\n", e.str());
        return kExitFailure;
      }
      fmt::print("certificate: {}\nprivate key: {} (mode 0600: keep it secret)\n", files->certPath,
                 files->keyPath);
      fmt::print("SHA-256 fingerprint: {}\n", files->fingerprint);
      fmt::print("Use it with:\n  ca:\n    cert: {}\n    key: {}\n", files->certPath,
                 files->keyPath);
      return kExitOk;
    };
  });
}

}  // namespace sandgate::cli
