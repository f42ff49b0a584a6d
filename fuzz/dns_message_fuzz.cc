// Fuzzes the DNS query parser and the sandbox's DNS stub behind it (capture/dns_message.h,
// capture/dns_responder.h) with raw datagrams, as proxy/capture_server/dns_server hands them in.
//
// Properties, beyond not crashing:
//  - A query that parses has a name a policy can read: lower case, printable ASCII, no empty
//    label, at most 255 bytes on the wire; written back out (encodeName, the same header,
//    question and OPT) it parses to the same question: no name means two things.
//  - The stub answers a malformed query with nothing, and anything else with one response
//    that echoes the query's id, has QR set and fits the transport (512 bytes, or the EDNS
//    size up to 1232, over UDP; 65535 over TCP).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "capture/address_pool.h"
#include "capture/dns_message.h"
#include "capture/dns_responder.h"
#include "fuzz/check.h"

namespace {

using namespace sandgate::capture;

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void checkQuery(const DnsQuery& q, std::span<const uint8_t> msg) {
  const std::string& name = q.question.name;
  SANDGATE_FUZZ_CHECK(name.size() <= 253, "a name fits 255 wire bytes");
  SANDGATE_FUZZ_CHECK(name.empty() || (name.front() != '.' && name.back() != '.' &&
                                       name.find("..") == std::string::npos),
                      "no empty label");
  for (char c : name) {
    SANDGATE_FUZZ_CHECK(c > 0x20 && c < 0x7f && !(c >= 'A' && c <= 'Z'),
                        "lower-case printable ASCII");
  }
  // The same query written plainly (no compression) must parse to the same question.
  std::vector<uint8_t> again(msg.begin(), msg.begin() + dns::kHeaderBytes);
  again[10] = 0;
  again[11] = q.edns ? 1 : 0;
  const auto wire = encodeName(name);
  again.insert(again.end(), wire.begin(), wire.end());
  put16(again, q.question.type);
  put16(again, q.question.klass);
  if (q.edns) {
    again.push_back(0);
    put16(again, dns::kTypeOpt);
    put16(again, q.ednsUdpSize);
    put16(again, 0);
    put16(again, 0);
    put16(again, 0);
  }
  ParseError e;
  const auto back = parseQuery(again, &e);
  SANDGATE_FUZZ_CHECK(back.has_value(), "a parsed query written back out parses");
  SANDGATE_FUZZ_CHECK(back->question.name == name && back->question.type == q.question.type &&
                          back->question.klass == q.question.klass,
                      "to the same question");
  SANDGATE_FUZZ_CHECK(back->edns == q.edns && back->ednsUdpSize == q.ednsUdpSize, "and EDNS");
}

void checkAnswer(const DnsResponder& responder, std::span<const uint8_t> msg, bool tcp,
                 const std::optional<DnsQuery>& q) {
  const DnsOutcome out = responder.answer(msg, tcp);
  if (!q) {
    SANDGATE_FUZZ_CHECK(out.response.empty() && out.result == dns_result::kMalformed,
                        "a malformed query is dropped");
    return;
  }
  SANDGATE_FUZZ_CHECK(!out.response.empty(), "a query that parsed is answered");
  size_t limit = tcp ? 65535 : dns::kMaxUdpAnswerBytes;
  if (!tcp && q->edns) limit = std::clamp<size_t>(q->ednsUdpSize, 512, 1232);
  // NOTIMP is the header and question alone, well under any limit.
  SANDGATE_FUZZ_CHECK(out.response.size() <= std::max<size_t>(limit, 512),
                      "the answer fits the transport");
  const auto h = parseHeader(out.response);
  SANDGATE_FUZZ_CHECK(h && h->id == q->header.id && h->response, "the id echoed, QR set");
  SANDGATE_FUZZ_CHECK(out.name == q->question.name, "the outcome names the question");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > dns::kMaxMessageBytes) return 0;  // the server never reads more for one query
  const std::span<const uint8_t> msg(data, size);
  ParseError e;
  const auto q = parseQuery(msg, &e);
  SANDGATE_FUZZ_CHECK(q.has_value() == (e == ParseError::kNone), "an error exactly on failure");
  if (q) checkQuery(*q, msg);

  // A small pool, made anew each time so that every input is answered the same way.
  static const auto v4 = defaultPoolV4();
  static const auto v6 = defaultPoolV6();
  DnsResponder responder(std::make_shared<SyntheticPool>(v4, v6),
                         [](const std::string& name) {
                           return name.size() >= 5 && name.compare(name.size() - 5, 5, ".test") == 0;
                         },
                         /*ipv6=*/true);
  checkAnswer(responder, msg, false, q);
  checkAnswer(responder, msg, true, q);
  return 0;
}
