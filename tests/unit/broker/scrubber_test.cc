// Tests for broker/scrubber.cc: streaming replacement gives the same output for every split of
// the input, with several needles, and counts what it replaced.
#include "broker/scrubber.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "common/encoding.h"

namespace sandgate::broker {
namespace {

// Exact needles (no URL or encoded forms): what the reference below computes. URL and encoded
// forms have their own tests at the end.
std::vector<ScrubRule> rules(std::vector<std::pair<std::string, std::string>> pairs) {
  std::vector<ScrubRule> out;
  for (auto& [needle, repl] : pairs) {
    out.push_back({Secret::copyOf(needle), repl, "c", false, false});
  }
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

// One secret, its URL forms on (`encoded`: its encoded forms too), fed in `parts`.
std::string scrubOne(std::string_view secret, std::string_view repl,
                     const std::vector<std::string_view>& parts, uint64_t* count, bool encoded) {
  std::vector<ScrubRule> r;
  r.push_back({Secret::copyOf(secret), std::string(repl), "c", true, encoded});
  Scrubber s(std::move(r));
  std::string out;
  for (auto part : parts) s.feed(part, out);
  s.finish(out);
  if (count) *count = s.count();
  return out;
}

std::string scrubUrl(std::string_view secret, std::string_view repl,
                     const std::vector<std::string_view>& parts, uint64_t* count = nullptr) {
  return scrubOne(secret, repl, parts, count, false);
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

// `in` in slices of 0 to `below` - 1 bytes (empty ones too).
std::vector<std::string_view> randomSplit(std::string_view in, std::mt19937& rng, unsigned below) {
  std::vector<std::string_view> parts;
  for (size_t pos = 0; pos < in.size();) {
    const size_t n = std::min<size_t>(in.size() - pos, rng() % below);
    parts.push_back(in.substr(pos, n));
    pos += n;
  }
  return parts;
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
    uint64_t count = 0;
    std::string out = scrubUrl(secret, placeholder, randomSplit(in, rng, 7), &count);
    ASSERT_EQ(count, 1u) << in;
    auto decoded = percentDecode(out, true);
    ASSERT_TRUE(decoded) << out;
    EXPECT_EQ(*decoded, "a=1&key=" + placeholder + "&b=/ ") << in << " -> " << out;
    EXPECT_EQ(out.size(), in.size());
  }
}

// A paused stream: fed `text` then the start of a form, only the start waits; `more` that ends
// the form's chances releases it.
void expectOnlyTheFormWaits(Scrubber& s, const std::string& text, const std::string& start,
                            const std::string& more) {
  std::string out;
  s.feed(text + start, out);
  EXPECT_EQ(out, text);
  s.feed(more, out);
  EXPECT_EQ(out, text + start + more);
  s.finish(out);
}

TEST(ScrubberUrlForms, HeadersOccursInAndHoldBack) {
  std::vector<ScrubRule> r;
  r.push_back({Secret::copyOf("s3/cr t"), "PLJCEJO", "c", true, false});
  Scrubber s(std::move(r));
  EXPECT_EQ(s.maxHoldBack(), 20u);  // the longest form: every byte escaped
  EXPECT_TRUE(s.preservesLength());
  EXPECT_TRUE(s.occursIn("https://x.test/?k=s3%2fcr+t"));
  EXPECT_FALSE(s.occursIn("https://x.test/?k=s3%2fcr+"));
  Headers h = {{"Location", "/next?k=s3%2Fcr%20t&p=1"}};
  EXPECT_EQ(s.scrubHeaders(h), 1u);
  EXPECT_EQ(h[0].second, "/next?k=PL%4ACE%4AO&p=1");
  expectOnlyTheFormWaits(s, "data: ", "s3%2", "x\n");
}

TEST(ScrubRules, DuplicateKeepsUrlForms) {
  std::vector<ScrubRule> r;
  addScrubRule(r, {Secret::copyOf("same"), "PPPP", "a", false});
  addScrubRule(r, {Secret::copyOf("same"), "PPPP", "a", true});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].urlForms);
}

TEST(ScrubRules, DuplicateKeepsEncodedForms) {
  std::vector<ScrubRule> r;
  addScrubRule(r, {Secret::copyOf("same"), "PPPP", "a", false, false});
  addScrubRule(r, {Secret::copyOf("same"), "PPPP", "a", false, true});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].encodedForms);
}

// ---------------------------------------------------------------------------------------------
// Encoded forms: base64 (both alphabets, three alignments, padded or not), hex, JSON escapes.

// One secret with encoded forms (and URL forms, as the proxy has them).
std::string scrubEncoded(std::string_view secret, std::string_view repl,
                         const std::vector<std::string_view>& parts, uint64_t* count = nullptr) {
  return scrubOne(secret, repl, parts, count, true);
}

// The same output for the input whole and split in two at every position.
void expectEverySplit(std::string_view secret, std::string_view repl, std::string_view in,
                      const std::string& want) {
  for (size_t i = 0; i <= in.size(); ++i) {
    uint64_t count = 0;
    ASSERT_EQ(scrubEncoded(secret, repl, {in.substr(0, i), in.substr(i)}, &count), want)
        << "split at " << i << " of " << in;
    ASSERT_GE(count, 1u) << "split at " << i;
  }
}

std::string toUrlAlphabet(std::string s) {
  for (char& c : s) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return s;
}

// Decodes either alphabet, padded or not.
std::optional<std::string> decodeAnyBase64(std::string s) {
  for (char& c : s) c = c == '-' ? '+' : c == '_' ? '/' : c;
  while (s.size() % 4 != 0) s += '=';
  return base64Decode(s);
}

const std::string kSecret = "sk-live-4f9Q/2xZ7w";       // 18 bytes, a '/' in it
const std::string kPlaceholder = "sk-live-PHcd/e0001";  // the same length, '/' in its place

// Every alignment (0-2 bytes before, plus whole groups), every end (0-2 bytes after), both
// alphabets, padded and not: the client decodes exactly the placeholder in the secret's place,
// the body keeps its length, and every split of it into two writes gives the same.
TEST(ScrubberEncodedForms, Base64AtEveryAlignmentAlphabetAndEnd) {
  for (const std::string& secret : {kSecret, kSecret + "x", kSecret + "xy"}) {
    const std::string repl = kPlaceholder + secret.substr(kSecret.size());
    for (const std::string pre : {"", "a", "ab", "abcd"}) {
      for (const std::string post : {"", "Z", "YZ"}) {
        for (bool url : {false, true}) {
          for (bool padded : {true, false}) {
            SCOPED_TRACE(fmt::format("{} bytes, {} before, {} after, {}, {}", secret.size(),
                                     pre.size(), post.size(), url ? "url" : "standard",
                                     padded ? "padded" : "unpadded"));
            std::string enc = base64Encode(pre + secret + post);
            if (url) enc = toUrlAlphabet(enc);
            if (!padded) enc.erase(enc.find_last_not_of('=') + 1);
            const std::string in = "{\"token\":\"" + enc + "\"}";
            uint64_t count = 0;
            const std::string out = scrubEncoded(secret, repl, {in}, &count);
            EXPECT_EQ(count, 1u);
            ASSERT_EQ(out.size(), in.size());
            const std::string got = out.substr(10, enc.size());
            EXPECT_EQ(decodeAnyBase64(got), pre + repl + post) << enc << " -> " << got;
            if (url) {
              EXPECT_EQ(got.find_first_of("+/"), std::string::npos) << got;
            }
            expectEverySplit(secret, repl, in, out);
          }
        }
      }
    }
  }
}

// The core alone (the characters the secret fixes whatever surrounds it) is enough: no
// neighbour characters, and the end ones of another value.
TEST(ScrubberEncodedForms, Base64CoreWithoutItsEndCharacters) {
  for (size_t a = 1; a <= 2; ++a) {
    SCOPED_TRACE(a);
    const std::string enc = base64Encode(std::string(a, '\0') + kSecret + "\xff\xff");
    // The characters holding only secret bits: from ceil(8a/6) to floor(8(a+n)/6).
    const size_t first = (8 * a + 5) / 6, last = 8 * (a + kSecret.size()) / 6;
    const std::string core = enc.substr(first, last - first);
    uint64_t count = 0;
    const std::string out = scrubEncoded(kSecret, kPlaceholder, {"<" + core + ">"}, &count);
    EXPECT_EQ(count, 1u) << core;
    EXPECT_EQ(out.find(core), std::string::npos);
    EXPECT_EQ(out.size(), core.size() + 2);
  }
}

TEST(ScrubberEncodedForms, HexEitherCase) {
  std::string lower, upper;
  for (unsigned char c : kSecret) lower += fmt::format("{:02x}", c);
  for (unsigned char c : kSecret) upper += fmt::format("{:02X}", c);
  std::string replLower, replUpper;
  for (unsigned char c : kPlaceholder) replLower += fmt::format("{:02x}", c);
  for (unsigned char c : kPlaceholder) replUpper += fmt::format("{:02X}", c);
  std::string mixed = lower;
  for (size_t i = 0; i < mixed.size(); i += 3) mixed[i] = static_cast<char>(toupper(mixed[i]));
  const struct {
    const char* name;
    std::string in, want;
  } cases[] = {
      {"lower", "digest=" + lower + ";", "digest=" + replLower + ";"},
      {"upper", "digest=" + upper + ";", "digest=" + replUpper + ";"},
      {"mixed_case_is_lower", "digest=" + mixed + ";", "digest=" + replLower + ";"},
      {"glued_to_hex", "00" + lower + "ff", "00" + replLower + "ff"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(scrubEncoded(kSecret, kPlaceholder, {c.in}), c.want);
    expectEverySplit(kSecret, kPlaceholder, c.in, c.want);
  }
  // Half a secret in hex is not the secret.
  const std::string half = "x" + lower.substr(0, lower.size() - 2) + "zz";
  uint64_t count = 0;
  EXPECT_EQ(scrubEncoded(kSecret, kPlaceholder, {half}, &count), half);
  EXPECT_EQ(count, 0u);
}

// JSON writers escape differently: "\u0073" in either case, a short escape, or "\/" (PHP's
// json_encode): each needle byte may be spelt any of those ways.
TEST(ScrubberEncodedForms, JsonEscapes) {
  const std::string secret = "ab/c\"d\\e-9Z";
  const std::string repl = "PQ/R\"S\\T-0Y";  // escapable bytes where the secret has them
  auto uEscape = [](std::string_view s, bool upper) {
    std::string out;
    for (unsigned char c : s) {
      out += upper ? fmt::format("\\u{:04X}", c) : fmt::format("\\u{:04x}", c);
    }
    return out;
  };
  const struct {
    const char* name;
    std::string in, want;
  } cases[] = {
      {"short_escapes", R"({"k":"ab\/c\"d\\e-9Z"})", R"({"k":"PQ\/R\"S\\T-0Y"})"},
      {"slash_raw", R"({"k":"ab/c\"d\\e-9Z"})", R"({"k":"PQ/R\"S\\T-0Y"})"},
      {"every_byte_u_lower", "{\"k\":\"" + uEscape(secret, false) + "\"}",
       "{\"k\":\"" + uEscape(repl, false) + "\"}"},
      {"every_byte_u_upper", "{\"k\":\"" + uEscape(secret, true) + "\"}",
       "{\"k\":\"" + uEscape(repl, true) + "\"}"},
      {"mixed", R"({"k":"\u0061b\/c\u0022d\u005Ce-9\u005a"})",
       R"({"k":"\u0050Q\/R\u0022S\u005CT-0\u0059"})"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    uint64_t count = 0;
    EXPECT_EQ(scrubEncoded(secret, repl, {c.in}, &count), c.want);
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(c.want.size(), c.in.size());
    expectEverySplit(secret, repl, c.in, c.want);
  }
  std::vector<ScrubRule> r;
  r.push_back({Secret::copyOf(secret), repl, "c"});
  EXPECT_TRUE(Scrubber(std::move(r)).preservesLength());
  // Not forms of the secret: an escape of another byte, a truncated or a bad escape.
  for (std::string in : {R"(ab\/c\"d\\e-9Y)", R"(ab\/c\"d\\e-9\u005)", R"(ab\/c\"d\xe-9Z)"}) {
    uint64_t count = 0;
    EXPECT_EQ(scrubEncoded(secret, repl, {in}, &count), in);
    EXPECT_EQ(count, 0u) << in;
  }
}

// A replacement byte with no short escape where the form used one ("\/" for a letter) takes
// \u00XX: the body changes length, and the scrubber says so before any body is read.
TEST(ScrubberEncodedForms, JsonShortEscapeOfAPlainReplacementByte) {
  const std::string secret = "key/with/slashes";
  const std::string repl = "keyQwithRslashes";
  std::vector<ScrubRule> r;
  r.push_back({Secret::copyOf(secret), repl, "c"});
  EXPECT_FALSE(Scrubber(std::move(r)).preservesLength());
  const std::string in = R"({"k":"key\/with\/slashes"})";
  const std::string want = R"({"k":"key\u0051with\u0052slashes"})";
  EXPECT_EQ(scrubEncoded(secret, repl, {in}), want);
  expectEverySplit(secret, repl, in, want);
}

// A redaction marker is longer than the secret: the form is replaced all the same.
TEST(ScrubberEncodedForms, RedactionMarkerInEveryForm) {
  const std::string marker = redactionMarker("api");
  std::string hex;
  for (unsigned char c : kSecret) hex += fmt::format("{:02x}", c);
  for (const std::string& form :
       {base64Encode(kSecret), base64Encode("a" + kSecret), base64Encode("ab" + kSecret),
        base64UrlEncode("ab" + kSecret), hex, std::string(R"(sk-live-4f9Q\/2xZ7w)")}) {
    SCOPED_TRACE(form);
    uint64_t count = 0;
    const std::string out = scrubEncoded(kSecret, marker, {"[" + form + "]"}, &count);
    EXPECT_EQ(count, 1u) << out;
    // Nothing of the form's fixed part is left: at most its end characters.
    EXPECT_EQ(out.find(form.substr(3, form.size() - 6)), std::string::npos) << out;
  }
}

// What is not a form: base64 of base64 (a second encoding is out of bounds, as a double URL
// encoding is), and a needle too short for its base64 to be told from chance.
TEST(ScrubberEncodedForms, BoundsOfWhatIsMatched) {
  const std::string twice = base64Encode(base64Encode(kSecret));
  uint64_t count = 0;
  EXPECT_EQ(scrubEncoded(kSecret, kPlaceholder, {twice}, &count), twice);
  EXPECT_EQ(count, 0u);
  const std::string shortB64 = base64Encode("12345");
  EXPECT_EQ(scrubEncoded("12345", "PPPPP", {shortB64}, &count), shortB64);
  EXPECT_EQ(count, 0u);
  // Its hex and JSON forms are still matched.
  EXPECT_EQ(scrubEncoded("12345", "PPPPP", {"3132333435"}, &count), "5050505050");
  EXPECT_EQ(scrubEncoded("12345", "PPPPP", {R"(\u0031\u0032345)"}, &count), R"(\u0050\u0050PPP)");
}

TEST(ScrubberEncodedForms, HeadersAndHoldBack) {
  std::vector<ScrubRule> r;
  r.push_back({Secret::copyOf(kSecret), kPlaceholder, "c"});
  Scrubber s(std::move(r));
  // The longest form is the JSON one with every byte \u-escaped.
  EXPECT_EQ(s.maxHoldBack(), 6 * kSecret.size() - 1);
  EXPECT_TRUE(s.preservesLength());
  const std::string b64 = base64UrlEncode("x" + kSecret);
  EXPECT_TRUE(s.occursIn("token=" + b64));
  Headers h = {{"X-Token", "t=" + b64}, {"X-Plain", "nothing"}};
  EXPECT_EQ(s.scrubHeaders(h), 1u);
  EXPECT_EQ(decodeAnyBase64(h[0].second.substr(2)), "x" + kPlaceholder);
  EXPECT_EQ(h[1].second, "nothing");
  expectOnlyTheFormWaits(s, "data: ", "736b2d6c", "Z\n");
}

// Random bodies with the secret in a random form at a random place, split at random: the
// output never holds the secret in any form a matcher here knows, and has the placeholder.
TEST(ScrubberEncodedForms, RandomFormsAndSplits) {
  std::mt19937 rng(24);
  auto randomBytes = [&](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += "abcdefXYZ0189+/=-_\\\""[rng() % 21];
    return s;
  };
  for (int round = 0; round < 600; ++round) {
    const std::string pre = randomBytes(rng() % 5), post = randomBytes(rng() % 5);
    std::string form, want;
    switch (rng() % 4) {
      case 0:
        form = base64Encode(pre + kSecret + post);
        want = base64Encode(pre + kPlaceholder + post);
        break;
      case 1:
        form = toUrlAlphabet(base64Encode(pre + kSecret + post));
        want = toUrlAlphabet(base64Encode(pre + kPlaceholder + post));
        break;
      case 2:
        for (unsigned char c : kSecret) form += fmt::format("{:02X}", c);
        for (unsigned char c : kPlaceholder) want += fmt::format("{:02X}", c);
        break;
      default:
        for (size_t i = 0; i < kSecret.size(); ++i) {
          const bool esc = rng() % 2;
          const auto c = static_cast<unsigned char>(kSecret[i]);
          const auto p = static_cast<unsigned char>(kPlaceholder[i]);
          form += esc ? fmt::format("\\u{:04x}", c) : std::string(1, static_cast<char>(c));
          want += esc ? fmt::format("\\u{:04x}", p) : std::string(1, static_cast<char>(p));
        }
    }
    const std::string in = "[" + form + "]";
    uint64_t count = 0;
    ASSERT_EQ(scrubEncoded(kSecret, kPlaceholder, randomSplit(in, rng, 9), &count),
              "[" + want + "]")
        << in;
    ASSERT_EQ(count, 1u) << in;
  }
}

}  // namespace
}  // namespace sandgate::broker
