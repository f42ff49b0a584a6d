// Bounded JSON-lines evidence files (see capped_log.h).
#include "run/capped_log.h"

#include <boost/json.hpp>

namespace sandgate::run {
namespace {

// The first `n` bytes of `s`, not splitting a UTF-8 sequence.
std::string cutUtf8(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

size_t serializedSize(const boost::json::value& v) { return boost::json::serialize(v).size(); }

}  // namespace

std::string boundedJsonLine(const boost::json::object& o, size_t maxBytes) {
  std::string line = boost::json::serialize(o);
  if (line.size() <= maxBytes) return line;
  const size_t had = line.size();
  constexpr size_t kString = 256;
  boost::json::object cut;
  cut["line_cut"] = true;
  cut["line_bytes"] = had;
  std::vector<std::string_view> arrays;
  for (const auto& [key, v] : o) {
    if (v.is_string()) {
      cut[key] = cutUtf8(v.as_string(), kString);
    } else if (v.is_array()) {
      cut[key] = boost::json::array();
      arrays.push_back(key);
    } else if (!v.is_object()) {
      cut[key] = v;
    }
  }
  // The arrays (an argv) get what is left, element by element, each cut like a string.
  size_t used = serializedSize(cut);
  for (auto key : arrays) {
    auto& out = cut[key].as_array();
    for (const auto& e : o.at(key).as_array()) {
      boost::json::value el = e.is_string() ? boost::json::value(cutUtf8(e.as_string(), kString))
                                            : boost::json::value(nullptr);
      size_t add = serializedSize(el) + 1;
      if (used + add > maxBytes) break;
      out.push_back(std::move(el));
      used += add;
    }
  }
  line = boost::json::serialize(cut);
  if (line.size() <= maxBytes) return line;
  boost::json::object least;
  least["line_cut"] = true;
  least["line_bytes"] = had;
  for (const auto& [key, v] : o) {
    if (v.is_string() && v.as_string().size() <= 64) {
      least[key] = v;
    } else if (v.is_number() || v.is_bool() || v.is_null()) {
      least[key] = v;
    }
  }
  return boost::json::serialize(least);
}

void CappedLog::append(std::string_view line) {
  std::lock_guard lock(mu_);
  if (!fd_.valid()) return;
  if (!cut_ && written_ + line.size() + 1 <= limit_) {
    std::string l(line);
    l += '\n';
    (void)safe_open::writeAll(fd_.get(), l);
    written_ += l.size();
    return;
  }
  ++leftOut_;
  if (cut_) return;
  cut_ = true;
  boost::json::object t;
  t["truncated"] = true;
  t["limit_bytes"] = limit_;
  t["note"] = "the file was cut here; the run's report counts the lines left out";
  (void)safe_open::writeAll(fd_.get(), boost::json::serialize(t) + "\n");
}

bool CappedLog::cut() const {
  std::lock_guard lock(mu_);
  return cut_;
}

uint64_t CappedLog::linesLeftOut() const {
  std::lock_guard lock(mu_);
  return leftOut_;
}

}  // namespace sandgate::run
