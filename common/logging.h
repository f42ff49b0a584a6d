// The process's log: level and format chosen once (--log-level / SANDGATE_LOG_LEVEL,
// --log-format / SANDGATE_LOG_FORMAT), every line on stderr (stdout is the command's output:
// a report, a patch, a policy's verdicts), as text or as one JSON object per line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace sandgate::logging {

// The accepted values, as the usage error names them.
inline constexpr std::string_view kLevels = "trace, debug, info, warn, error, off";
inline constexpr std::string_view kFormats = "text, json";
inline constexpr const char* kLevelVariable = "SANDGATE_LOG_LEVEL";
inline constexpr const char* kFormatVariable = "SANDGATE_LOG_FORMAT";

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };
enum class Format { kText, kJson };

struct Settings {
  Level level = Level::kInfo;
  Format format = Format::kText;
};

std::optional<Level> parseLevel(std::string_view text);
std::optional<Format> parseFormat(std::string_view text);

// The settings in force: each flag when given, else its variable when set and not empty, else
// the subcommand's default. A value that is none of the accepted ones is an error naming where
// it came from and what is accepted (a usage error: exit 2).
Result<Settings> resolve(const std::optional<std::string>& levelFlag,
                         const std::optional<std::string>& formatFlag, Level defaultLevel);

// Makes the default logger write to stderr with `settings`. Text lines are
// "[time] [level] message"; a JSON line is {"time":...,"level":...,"message":...} followed by the
// fields of logWith(), always valid JSON whatever bytes the message holds (a host name or path
// from a workload: controls, quotes and bytes that are not UTF-8 are escaped).
void install(const Settings& settings);

// A line with named fields: in JSON, each is a key of the line ("proxy":"127.0.0.1:3128"); in
// text, only the message, which says the same in words. For what an operator filters on.
void warnWith(std::string_view message, const std::map<std::string, std::string>& fields);
void infoWith(std::string_view message, const std::map<std::string, std::string>& fields);

// `s` as a JSON string literal, quotes included (valid UTF-8 out for any bytes in).
std::string jsonString(std::string_view s);

}  // namespace sandgate::logging
