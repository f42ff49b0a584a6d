// The process's log level and format, and the JSON line formatter (see logging.h).
#include "common/logging.h"

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <memory>

namespace sandgate::logging {
namespace {

constexpr std::pair<std::string_view, Level> kLevelNames[] = {
    {"trace", Level::kTrace}, {"debug", Level::kDebug}, {"info", Level::kInfo},
    {"warn", Level::kWarn},   {"error", Level::kError}, {"off", Level::kOff},
};

spdlog::level::level_enum toSpdlog(Level l) {
  switch (l) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      break;
  }
  return spdlog::level::off;
}

// The names --log-level takes, so that a JSON line's level can be fed back to the flag.
std::string_view levelName(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

// Length of the well-formed UTF-8 sequence at s[i] (no overlong form, no surrogate, at most
// U+10FFFF), or 0.
size_t utf8Length(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  auto cont = [&](size_t k) { return k < s.size() && (b(k) & 0xc0) == 0x80; };
  unsigned char c = b(i);
  if (c >= 0xc2 && c <= 0xdf) return cont(i + 1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (!cont(i + 1) || !cont(i + 2)) return 0;
    if (c == 0xe0 && b(i + 1) < 0xa0) return 0;   // overlong
    if (c == 0xed && b(i + 1) >= 0xa0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    if (c == 0xf0 && b(i + 1) < 0x90) return 0;
    if (c == 0xf4 && b(i + 1) >= 0x90) return 0;
    return 4;
  }
  return 0;
}

// The fields of the warnWith()/infoWith() call being formatted on this thread (the default
// logger is synchronous: its formatter runs inside the call).
thread_local const std::map<std::string, std::string>* currentFields = nullptr;

// One JSON object per line: a log shipper parses it without a pattern, and a message cannot
// forge a second line or a field (everything in it is escaped).
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    auto ms = duration_cast<milliseconds>(msg.time.time_since_epoch()).count();
    std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    ::gmtime_r(&secs, &tm);
    std::string line = fmt::format(
        "{{\"time\":\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{}\",\"message\":{}",
        tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000,
        levelName(msg.level), jsonString(std::string_view(msg.payload.data(), msg.payload.size())));
    if (currentFields != nullptr) {
      for (const auto& [key, value] : *currentFields) {
        if (key == "time" || key == "level" || key == "message") continue;
        line += "," + jsonString(key) + ":" + jsonString(value);
      }
    }
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

Format currentFormat = Format::kText;

void logWith(spdlog::level::level_enum level, std::string_view message,
             const std::map<std::string, std::string>& fields) {
  if (!spdlog::default_logger_raw()->should_log(level)) return;
  if (currentFormat == Format::kJson) {
    currentFields = &fields;
    spdlog::log(level, "{}", message);
    currentFields = nullptr;
    return;
  }
  spdlog::log(level, "{}", message);  // text: the message already says what the fields hold
}

}  // namespace

std::optional<Level> parseLevel(std::string_view text) {
  for (const auto& [name, level] : kLevelNames) {
    if (text == name) return level;
  }
  return std::nullopt;
}

std::optional<Format> parseFormat(std::string_view text) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  return std::nullopt;
}

Result<Settings> resolve(const std::optional<std::string>& levelFlag,
                         const std::optional<std::string>& formatFlag, Level defaultLevel) {
  auto err = [](std::string msg) { return Diagnostic{"", 0, 0, "", std::move(msg)}; };
  // The flag wins over the variable: a command line states what this invocation wants.
  auto pick = [](const std::optional<std::string>& flag, const char* variable,
                 std::string* where) -> std::optional<std::string> {
    if (flag) {
      *where = "--log-" + std::string(variable == kLevelVariable ? "level" : "format");
      return flag;
    }
    const char* v = std::getenv(variable);
    if (v == nullptr || *v == '\0') return std::nullopt;
    *where = variable;
    return std::string(v);
  };
  Settings s;
  s.level = defaultLevel;
  std::string where;
  if (auto v = pick(levelFlag, kLevelVariable, &where)) {
    auto l = parseLevel(*v);
    if (!l) return err(fmt::format("{} {}: expected one of {}", where, jsonString(*v), kLevels));
    s.level = *l;
  }
  if (auto v = pick(formatFlag, kFormatVariable, &where)) {
    auto f = parseFormat(*v);
    if (!f) return err(fmt::format("{} {}: expected one of {}", where, jsonString(*v), kFormats));
    s.format = *f;
  }
  return s;
}

void install(const Settings& settings) {
  auto logger = spdlog::get("sandgate");
  if (!logger) logger = spdlog::stderr_color_mt("sandgate");
  if (settings.format == Format::kJson) {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        "[%Y-%m-%dT%H:%M:%S.%eZ] [%^%l%$] %v", spdlog::pattern_time_type::utc));
  }
  currentFormat = settings.format;
  spdlog::set_default_logger(logger);
  spdlog::set_level(toSpdlog(settings.level));
}

void warnWith(std::string_view message, const std::map<std::string, std::string>& fields) {
  logWith(spdlog::level::warn, message, fields);
}

void infoWith(std::string_view message, const std::map<std::string, std::string>& fields) {
  logWith(spdlog::level::info, message, fields);
}

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c < 0x20 || c == 0x7f) {
        out += fmt::format("\\u{:04x}", c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    size_t len = utf8Length(s, i);
    if (len == 0) {
      out += "\\ufffd";  // not UTF-8: the line stays valid JSON
      ++i;
      continue;
    }
    unsigned cp =
        len == 2 ? ((c & 0x1fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3fu) : 0x100;
    if (cp >= 0x80 && cp <= 0x9f) {
      out += fmt::format("\\u{:04x}", cp);  // C1 controls, which some terminals obey
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out + "\"";
}

}  // namespace sandgate::logging
