// The built-in configuration of `sandgate run` (see default_config.h).
#include "config/default_config.h"

namespace sandgate::config {

const std::string& defaultConfigText() {
  static const std::string text = R"(# sandgate run's built-in config: package registries only.
policies:
  registries:
    allow:
      - host: registry.npmjs.org
      - host: pypi.org
      - host: files.pythonhosted.org
      - host: crates.io
      - host: static.crates.io
      - host: index.crates.io
      - host: proxy.golang.org
      - host: sum.golang.org
tasks:
  - name: default
    policy: registries
)";
  return text;
}

Result<Config> defaultConfig() { return loadString(defaultConfigText(), "<embedded>"); }

}  // namespace sandgate::config
