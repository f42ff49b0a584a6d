// Tests for broker/scrubber.cc: streaming replacement gives the same output for every split of
// the input, with several needles, and counts what it replaced.
#include "broker/scrubber.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "common/encoding.h"

namespace sandgate::broker {
namespace {

// Exact needles (no URL forms): what the reference below computes. URL forms have their own
// tests at the end.
std::vector<ScrubRule> rules(std::vector<std::pair<std::string, std::string>> pairs) {
  std::vector<ScrubRule> out;
  for (auto& [needle, repl] : pairs) out.push_back({Secret::copyOf(needle), repl, "c", false});
  return out;
}

// The reference: a plain, non-streaming leftmost-longest replacement.
std::string reference(std::string_view in,
                      const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string out;
  size_t i = 0;
  while (i < in.size()) {
    const std::pair<std::string, std::string>* best = nullptr;
    for (const auto& p : pairs) {
      if (in.substr(i, p.first.size()) == p.first &&
          (!best || p.first.size() > best->first.size())) {
        best = &p;
      }
    }
    if (best) {
      out += best->second;
      i += best->first.size();
    } else {
      out += in[i++];
    }
  }
  return out;
}

std::string scrubSplit(const std::vector<std::pair<std::string, std::string>>& pairs,
                       const std::vector<std::string_view>& parts, uint64_t* count = nullptr) {
  Scrubber s(rules(pairs));
  std::string out;
  size_t fed = 0;
  for (auto part : parts) {
    s.feed(part, out);
    fed += part.size();
    // Never holds back more than (longest needle - 1) bytes, counted in input bytes.
    EXPECT_LE(fed - std::min(fed, out.size()), s.maxHoldBack() + 64);
  }
  s.finish(out);
  if (count) *count = s.count();
  return out;
}

struct SplitCase {
  const char* name;
  std::vector<std::pair<std::string, std::string>> needles;
  std::string input;
  std::string want;
  uint64_t count;
};

TEST(Scrubber, EverySplitPointTable) {
  const SplitCase cases[] = {
      {"single",
       {{"sk-SECRET", "sk-PLACEH"}},
       "{\"key\":\"sk-SECRET\",\"echo\":\"sk-SECRET\"}",
       "{\"key\":\"sk-PLACEH\",\"echo\":\"sk-PLACEH\"}",
       2},
      {"redaction_marker_longer_than_needle",
       {{"tok123", "[REDACTED:api]"}},
       "tok123 and tok12 and tok123",
       "[REDACTED:api] and tok12 and [REDACTED:api]",
       2},
      {"at_both_ends", {{"abc", "X"}}, "abcabc--abc", "XX--X", 3},
      {"partial_at_end_is_flushed", {{"secret", "P"}}, "a secre", "a secre", 0},
      {"multiple_needles",
       {{"sk-AAAA", "sk-1111"}, {"Z2l0OnNrLUFBQUE=", "Z2l0OnBsYWNl"}, {"ghp_BBBB", "ghp_2222"}},
       "Authorization: Basic Z2l0OnNrLUFBQUE=\r\nx: sk-AAAAghp_BBBB",
       "Authorization: Basic Z2l0OnBsYWNl\r\nx: sk-1111ghp_2222",
       3},
      {"longer_needle_starting_earlier_wins",
       {{"bcdefg", "L"}, {"cd", "S"}},
       "abcdefg abcdx",
       "aL abSx",
       2},
      {"same_start_longest_wins", {{"abc", "1"}, {"abcdef", "2"}}, "abcdef abcde", "2 1de", 2},
      {"overlapping_occurrences_leftmost", {{"aa", "X"}}, "aaaaa", "XXa", 2},
      {"empty_input", {{"abc", "X"}}, "", "", 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(reference(c.input, c.needles), c.want) << "reference disagrees with the table";
    uint64_t count = 0;
    EXPECT_EQ(scrubSplit(c.needles, {c.input}, &count), c.want);
    EXPECT_EQ(count, c.count);
    std::string_view in(c.input);
    // Every single split position.
    for (size_t i = 0; i <= in.size(); ++i) {
      ASSERT_EQ(scrubSplit(c.needles, {in.substr(0, i), in.substr(i)}, &count), c.want)
          << "split at " << i;
      ASSERT_EQ(count, c.count) << "split at " << i;
    }
    // Every pair of split positions (three slices, some empty).
    for (size_t i = 0; i <= in.size(); ++i) {
      for (size_t j = i; j <= in.size(); ++j) {
        ASSERT_EQ(scrubSplit(c.needles, {in.substr(0, i), in.substr(i, j - i), in.substr(j)}),
                  c.want)
            << "splits at " << i << ", " << j;
      }
    }
    // One byte at a time.
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < in.size(); ++i) bytes.push_back(in.substr(i, 1));
    EXPECT_EQ(scrubSplit(c.needles, bytes), c.want);
  }
}

TEST(Scrubber, RandomInputsMatchTheReference) {
  std::mt19937 rng(12345);  // fixed seed: reproducible
  const std::vector<std::pair<std::string, std::string>> needles = {
      {"abab", "<1>"}, {"bab", "<2>"}, {"aab", "<3>"}, {"b", "<4>"}};
  for (int round = 0; round < 300; ++round) {
    std::string in;
    size_t len = rng() % 40;
    for (size_t i = 0; i < len; ++i) in += "abc"[rng() % 3];
    std::vector<std::string_view> parts;
    size_t pos = 0;
    while (pos < in.size()) {
      size_t n = std::min<size_t>(in.size() - pos, rng() % 6);
      parts.push_back(std::string_view(in).substr(pos, n));
      pos += n;
    }
    ASSERT_EQ(scrubSplit(needles, parts), reference(in, needles)) << in;
  }
}

// Many secrets in one pass (a task's every credential): needles that share long prefixes, as
// keys of one vendor do ("sk-proj-..."), a one-byte needle and overlapping ones, fed in random
// slices, give exactly the non-streaming reference.
TEST(Scrubber, ManyNeedlesSharingPrefixesMatchTheReference) {
  std::mt19937 rng(424242);  // fixed seed: reproducible
  std::vector<std::pair<std::string, std::string>> needles;
  for (int i = 0; i < 40; ++i) {
    std::string n = "sk-proj-";
    for (int j = 0; j < 1 + i % 5; ++j) n += "ab"[rng() % 2];
    bool dup = false;
    for (const auto& [have, repl] : needles) dup = dup || have == n;
    if (!dup) needles.emplace_back(n, fmt::format("<{}>", needles.size()));
  }
  needles.emplace_back("z", "<z>");
  needles.emplace_back("proj-a", "<pa>");
  ASSERT_GT(needles.size(), 20u);
  const std::vector<std::string> pieces = {"sk-", "proj-", "a", "b", "z", "x", "sk-proj-", " "};
  for (int round = 0; round < 400; ++round) {
    std::string in;
    const size_t n = rng() % 24;
    for (size_t i = 0; i < n; ++i) in += pieces[rng() % pieces.size()];
    std::vector<std::string_view> parts;
    for (size_t pos = 0; pos < in.size();) {
      const size_t k = std::min<size_t>(in.size() - pos, rng() % 9);
      parts.push_back(std::string_view(in).substr(pos, k));
      pos += k;
    }
    ASSERT_EQ(scrubSplit(needles, parts), reference(in, needles)) << in;
  }
}

// One compiled set serves any number of scrubbers (every response of a task), each with its
// own held-back tail and counts.
TEST(Scrubber, ScrubbersShareOneSet) {
  auto set = std::make_shared<const ScrubSet>(rules({{"sk-REAL", "sk-FAKE"}, {"tok", "TOK"}}));
  EXPECT_EQ(set->rules().size(), 2u);
  EXPECT_TRUE(set->preservesLength());
  EXPECT_EQ(set->maxFormLength(), 7u);
  Scrubber a(set), b(set);
  std::string outA, outB;
  a.feed("x sk-RE", outA);
  b.feed("tok sk-REAL", outB);
  a.feed("AL y", outA);
  a.finish(outA);
  b.finish(outB);
  EXPECT_EQ(outA, "x sk-FAKE y");
  EXPECT_EQ(outB, "TOK sk-FAKE");
  EXPECT_EQ(a.count(), 1u);
  EXPECT_EQ(b.count(), 2u);
  // A set without rules passes everything through at once.
  Scrubber none(std::shared_ptr<const ScrubSet>{});
  std::string out;
  none.feed("sk-", out);
  EXPECT_EQ(out, "sk-");
}

TEST(Scrubber, HoldsBackOnlyWhatCouldStartANeedle) {
  Scrubber s(rules({{"0123456789", "X"}, {"abc", "Y"}}));
  EXPECT_EQ(s.maxHoldBack(), 9u);
  std::string out;
  s.feed(std::string(100, '.'), out);
  EXPECT_EQ(out.size(), 100u);  // no tail of it starts a needle: nothing waits
  s.feed("01234", out);
  EXPECT_EQ(out.size(), 100u);  // "01234" held: could still become the needle
  s.feed("5678x", out);
  EXPECT_EQ(out.size(), 110u);
  s.feed("..ab", out);
  EXPECT_EQ(out.size(), 112u);  // "ab" held
  s.feed("d", out);
  EXPECT_EQ(out.size(), 115u);
  s.finish(out);
  EXPECT_EQ(out, std::string(100, '.') + "012345678x..abd");
  EXPECT_EQ(s.count(), 0u);
}

TEST(Scrubber, APossibleStartInsideAMatchHoldsNothingBack) {
  // "bcabc" at 2 could start "bcabcZZ", but the match of "abc" at 1 covers it; once past it,
  // the second "abc" (complete, and no needle can start at or before it any more) goes out too.
  Scrubber s(rules({{"abc", "Y"}, {"bcabcZZ", "W"}}));
  std::string out;
  s.feed("xabcabc", out);
  EXPECT_EQ(out, "xYY");
  s.finish(out);
  EXPECT_EQ(out, "xYY");
  EXPECT_EQ(s.count(), 2u);
}

TEST(Scrubber, EventStreamIsNotHeldBack) {
  // Server-sent events: each event must be emitted whole when it arrives (the relay sends what
  // feed() returns at once), including one whose secret was replaced.
  Scrubber s(rules({{"sk-realsecretvalue", "[REDACTED:api]"}}));
  std::string out;
  s.feed("data: one\n\n", out);
  EXPECT_EQ(out, "data: one\n\n");
  out.clear();
  s.feed("data: sk-realsecretvalue\n\n", out);
  EXPECT_EQ(out, "data: [REDACTED:api]\n\n");
  out.clear();
  s.feed("data: s", out);  // "s" may start the secret
  EXPECT_EQ(out, "data: ");
  s.feed("k\n\n", out);
  EXPECT_EQ(out, "data: sk\n\n");
}

TEST(Scrubber, NoRulesPassesThrough) {
  Scrubber s(std::vector<ScrubRule>{});
  std::string out;
  s.feed("anything", out);
  EXPECT_EQ(out, "anything");
  s.finish(out);
  EXPECT_EQ(out, "anything");
  EXPECT_TRUE(s.empty());
}

// Same-length replacements (placeholders) keep a body's length, so its Content-Length stands;
// one redaction marker of another length is enough to make the proxy re-frame the body.
TEST(Scrubber, PreservesLengthOnlyWithSameLengthReplacements) {
  EXPECT_TRUE(Scrubber(std::vector<ScrubRule>{}).preservesLength());
  EXPECT_TRUE(Scrubber(rules({{"sk-REAL", "sk-FAKE"}, {"c2stUkVBTA==", "c2stRkFLRQ=="}}))
                  .preservesLength());
  EXPECT_FALSE(
      Scrubber(rules({{"sk-REAL", "sk-FAKE"}, {"secret", "[REDACTED:x]"}})).preservesLength());
  Scrubber s(rules({{"sk-REAL", "sk-FAKE"}}));
  std::string out;
  const std::string body = "echo: sk-REAL and sk-RE";
  s.feed(body, out);
  s.feed("AL.", out);
  s.finish(out);
  EXPECT_EQ(out, "echo: sk-FAKE and sk-FAKE.");
  EXPECT_EQ(out.size(), body.size() + 3);
}

TEST(Scrubber, Headers) {
  Scrubber s(rules({{"sk-REAL", "sk-FAKE"}, {"c2stUkVBTA==", "c2stRkFLRQ=="}}));
  Headers h = {{"X-Echo-Authorization", "Bearer sk-REAL"},
               {"X-Echo-Basic", "Basic c2stUkVBTA=="},
               {"Set-Cookie", "a=sk-REAL; b=sk-REAL"},
               {"Content-Type", "text/plain"}};
  EXPECT_EQ(s.scrubHeaders(h), 4u);
  EXPECT_EQ(h[0].second, "Bearer sk-FAKE");
  EXPECT_EQ(h[1].second, "Basic c2stRkFLRQ==");
  EXPECT_EQ(h[2].second, "a=sk-FAKE; b=sk-FAKE");
  EXPECT_EQ(h[3].second, "text/plain");
  std::string out;
  s.feed("body sk-REAL", out);
  s.finish(out);
  EXPECT_EQ(out, "body sk-FAKE");
  EXPECT_EQ(s.count(), 5u);
}

// occursIn decides whether a response's fields are copied out to be scrubbed at all: it must
// see every needle anywhere in a field, and nothing less than a whole one.
TEST(Scrubber, OccursInSeesWholeNeedlesOnly) {
  Scrubber s(rules({{"sk-REAL", "sk-FAKE"}, {"c2stUkVBTA==", "c2stRkFLRQ=="}}));
  EXPECT_TRUE(s.occursIn("sk-REAL"));
  EXPECT_TRUE(s.occursIn("Bearer sk-REAL; more"));
  EXPECT_TRUE(s.occursIn("Basic c2stUkVBTA=="));
  EXPECT_FALSE(s.occursIn("Bearer sk-REA"));
  EXPECT_FALSE(s.occursIn("text/plain"));
  EXPECT_FALSE(s.occursIn(""));
  EXPECT_EQ(s.count(), 0u);  // looking replaces nothing
  Scrubber none(std::vector<ScrubRule>{});
  EXPECT_FALSE(none.occursIn("sk-REAL"));
}

TEST(Scrubber, CountsPerCredential) {
  std::vector<ScrubRule> r;
  r.push_back({Secret::copyOf("sk-openai-secret"), "sk-openai-fake00", "openai"});
  r.push_back({Secret::copyOf("ghp_github_secret"), "[REDACTED:github]", "github"});
  Scrubber s(std::move(r));
  std::string out;
  s.feed("a sk-openai-secret b sk-openai-sec", out);
  s.feed("ret c ghp_github_secret", out);
  s.finish(out);
  EXPECT_EQ(out, "a sk-openai-fake00 b sk-openai-fake00 c [REDACTED:github]");
  EXPECT_EQ(s.count(), 3u);
  EXPECT_EQ(s.countByCredential(), (std::map<std::string, uint64_t>{{"github", 1}, {"openai", 2}}));
}

TEST(ScrubRules, AddDeduplicatesAndMarker) {
  std::vector<ScrubRule> r;
  addScrubRule(r, {Secret::copyOf("same"), "P", "a"});
  addScrubRule(r, {Secret::copyOf("same"), "P", "a"});
  addScrubRule(r, {Secret::copyOf("other"), "Q", "b"});
  addScrubRule(r, {nullptr, "Q", "b"});
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(redactionMarker("openai"), "[REDACTED:openai]");
}

// ---------------------------------------------------------------------------------------------
// URL forms: every spelling a URL encoder can give the secret's bytes.

std::string scrubUrl(std::string_view secret, std::string_view repl,
                     const std::vector<std::string_view>& parts, uint64_t* count = nullptr) {
  std::vector<ScrubRule> r;
  r.push_back({Secret::copyOf(secret), std::string(repl), "c"});  // urlForms by default
  Scrubber s(std::move(r));
  std::string out;
  for (auto part : parts) s.feed(part, out);
  s.finish(out);
  if (count) *count = s.count();
  return out;
}

TEST(ScrubberUrlForms, EveryEncodingAndEverySplit) {
  struct UrlCase {
    const char* name;
    const char* secret;
    const char* placeholder;
    std::string form;  // how the upstream wrote the secret
    std::string want;  // the placeholder in the same shape (or the input, when no form)
    uint64_t count;
  };
  const UrlCase cases[] = {
      {"raw", "s3/cr t", "PLJCEJO", "s3/cr t", "PLJCEJO", 1},
      {"raw_slash_plus_space", "s3/cr t", "PLJCEJO", "s3/cr+t", "PLJCEJO", 1},
      {"upper_2F_and_20", "s3/cr t", "PLJCEJO", "s3%2Fcr%20t", "PL%4ACE%4AO", 1},
      {"lower_2f", "s3/cr t", "PLJCEJO", "s3%2fcr%20t", "PL%4aCE%4AO", 1},
      {"another_byte_escaped", "s3/cr t", "PLJCEJO", "s3%2fcr%2Ct", "s3%2fcr%2Ct", 0},
      {"every_byte_escaped", "s3/cr t", "PLJCEJO", "%73%33%2f%63%72%20%74", "%50%4C%4a%43%45%4A%4F",
       1},
      {"escaped_letter_either_case", "sk-Ab", "PH-Zz", "sk-%41%62", "PH-%5A%7A", 1},
      {"hex_letters_mixed", "a:b", "PJQ", "a%3Ab", "P%4AQ", 1},
      {"hex_letters_mixed_lower", "a:b", "PJQ", "a%3ab", "P%4aQ", 1},
      {"in_a_query", "s3/cr t", "PLJCEJO", "GET /?q=s3%2Fcr+t&x=1", "GET /?q=PL%4ACEJO&x=1", 1},
      {"twice", "s3/cr t", "PLJCEJO", "s3/cr+t,s3%2fcr%20t", "PLJCEJO,PL%4aCE%4AO", 2},
      {"percent_and_plus_in_secret", "a%b+c", "PQRST", "a%25b%2Bc", "P%51R%53T", 1},
      {"percent_escaped_plus_raw", "a%b+c", "PQRST", "a%25b+c", "P%51RST", 1},
      {"percent_raw_as_sent", "a%b+c", "PQRST", "a%b+c", "PQRST", 1},
      // Not forms of the secret: a '+' is not an escaped '/', a bad escape is no escape, and a
      // double encoding is a form of another string (a second decode is out of bounds).
      {"plus_is_not_slash", "s3/cr t", "PLJCEJO", "s3+cr t", "s3+cr t", 0},
      {"escaped_plus_is_not_space", "s3/cr t", "PLJCEJO", "s3/cr%2Bt", "s3/cr%2Bt", 0},
      {"bad_escape", "s3/cr t", "PLJCEJO", "s3%2Gcr t", "s3%2Gcr t", 0},
      {"double_encoded", "s3/cr t", "PLJCEJO", "s3%252Fcr t", "s3%252Fcr t", 0},
      {"truncated", "s3/cr t", "PLJCEJO", "s3%2Fcr%2", "s3%2Fcr%2", 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    uint64_t count = 0;
    const std::string_view in(c.form);
    EXPECT_EQ(scrubUrl(c.secret, c.placeholder, {in}, &count), c.want);
    EXPECT_EQ(count, c.count);
    // The client decodes the placeholder, never the secret; the length is kept.
    auto decoded = percentDecode(c.want, true);
    if (decoded && c.count > 0) {
      EXPECT_EQ(decoded->find(c.secret), std::string::npos);
    }
    EXPECT_EQ(c.want.size(), c.form.size());
    for (size_t i = 0; i <= in.size(); ++i) {
      for (size_t j = i; j <= in.size(); ++j) {
        ASSERT_EQ(
            scrubUrl(c.secret, c.placeholder, {in.substr(0, i), in.substr(i, j - i), in.substr(j)}),
            c.want)
            << "splits at " << i << ", " << j;
      }
    }
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < in.size(); ++i) bytes.push_back(in.substr(i, 1));
    EXPECT_EQ(scrubUrl(c.secret, c.placeholder, bytes), c.want);
  }
}

// Random spellings of a secret (each byte raw, %XX upper, %XX lower, '+' for a space) among
// other bytes, split at random: the output never decodes to the secret, and it decodes to what
// the input would decode to with the placeholder for the secret.
TEST(ScrubberUrlForms, RandomSpellingsNeverDecodeToTheSecret) {
  const std::string secret = "k/ z+%~";
  const std::string placeholder = "PHJKLMN";
  std::mt19937 rng(2026);
  for (int round = 0; round < 400; ++round) {
    std::string form;
    for (char ch : secret) {
      const auto b = static_cast<unsigned char>(ch);
      switch (rng() % 4) {
        case 0:
          if (ch != '%') {
            form += ch == ' ' ? '+' : ch;
            break;
          }
          [[fallthrough]];
        case 1:
          form += fmt::format("%{:02X}", b);
          break;
        case 2:
          form += fmt::format("%{:02x}", b);
          break;
        default:
          form += ch == ' ' ? "%20" : (ch == '%' ? "%25" : std::string(1, ch));
      }
    }
    const std::string in = "a=1&key=" + form + "&b=%2F+";
    std::vector<std::string_view> parts;
    for (size_t pos = 0; pos < in.size();) {
      size_t n = std::min<size_t>(in.size() - pos, rng() % 7);
      parts.push_back(std::string_view(in).substr(pos, n));
      pos += n;
    }
    uint64_t count = 0;
    std::string out = scrubUrl(secret, placeholder, parts, &count);
    ASSERT_EQ(count, 1u) << in;
    auto decoded = percentDecode(out, true);
    ASSERT_TRUE(decoded) << out;
    EXPECT_EQ(*decoded, "a=1&key=" + placeholder + "&b=/ ") << in << " -> " << out;
    EXPECT_EQ(out.size(), in.size());
  }
}

TEST(ScrubberUrlForms, HeadersOccursInAndHoldBack) {
  std::vector<ScrubRule> r;
  r.push_back({Secret::copyOf("s3/cr t"), "PLJCEJO", "c"});
  Scrubber s(std::move(r));
  EXPECT_EQ(s.maxHoldBack(), 20u);  // the longest form: every byte escaped
  EXPECT_TRUE(s.preservesLength());
  EXPECT_TRUE(s.occursIn("https://x.test/?k=s3%2fcr+t"));
  EXPECT_FALSE(s.occursIn("https://x.test/?k=s3%2fcr+"));
  Headers h = {{"Location", "/next?k=s3%2Fcr%20t&p=1"}};
  EXPECT_EQ(s.scrubHeaders(h), 1u);
  EXPECT_EQ(h[0].second, "/next?k=PL%4ACE%4AO&p=1");
  // A paused stream: only a tail that may still become a form waits.
  std::string out;
  s.feed("data: s3%2", out);
  EXPECT_EQ(out, "data: ");
  s.feed("x\n", out);
  EXPECT_EQ(out, "data: s3%2x\n");
  s.finish(out);
}

TEST(ScrubRules, DuplicateKeepsUrlForms) {
  std::vector<ScrubRule> r;
  addScrubRule(r, {Secret::copyOf("same"), "PPPP", "a", false});
  addScrubRule(r, {Secret::copyOf("same"), "PPPP", "a", true});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].urlForms);
}

}  // namespace
}  // namespace sandgate::broker
