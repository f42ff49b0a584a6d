// Strict RFC 1035 parsing of one query and building of sandgate's answers (see dns_message.h).
#include "capture/dns_message.h"

#include <algorithm>

namespace sandgate::capture {

namespace {

uint16_t get16(std::span<const uint8_t> m, size_t at) {
  return static_cast<uint16_t>(m[at] << 8 | m[at + 1]);
}

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v >> 16));
  put16(out, static_cast<uint16_t>(v));
}

// Reads the name at `*pos`; on success `*pos` is one past the name as it appears there (a
// pointer ends it). Each pointer must point strictly before where the previous jump landed
// (the first, before itself): the targets then strictly decrease, so no chain of pointers can
// loop, and the hop limit bounds the work besides.
ParseError readName(std::span<const uint8_t> m, size_t* pos, std::string* name) {
  size_t at = *pos;
  size_t wire = 1;  // the root's zero byte
  size_t hops = 0;
  bool jumped = false;
  size_t bound = m.size();  // every pointer target must be below this
  name->clear();
  while (true) {
    if (at >= m.size()) return ParseError::kTruncated;
    uint8_t len = m[at];
    if ((len & 0xC0) == 0xC0) {
      if (at + 1 >= m.size()) return ParseError::kTruncated;
      size_t target = static_cast<size_t>(len & 0x3F) << 8 | m[at + 1];
      if (!jumped) *pos = at + 2;
      if (target >= std::min(at, bound) || ++hops > dns::kMaxPointerHops) {
        return ParseError::kPointerLoop;
      }
      bound = target;
      jumped = true;
      at = target;
      continue;
    }
    if ((len & 0xC0) != 0) return ParseError::kBadName;  // 0x40/0x80: reserved label types
    if (len == 0) {
      if (!jumped) *pos = at + 1;
      return ParseError::kNone;
    }
    if (at + 1 + len > m.size()) return ParseError::kTruncated;
    wire += 1 + len;
    if (wire > dns::kMaxNameBytes) return ParseError::kBadName;
    if (!name->empty()) name->push_back('.');
    for (size_t i = 0; i < len; ++i) {
      uint8_t ch = m[at + 1 + i];
      // A dot inside a label would make "a.b" ambiguous; control and non-ASCII bytes are
      // never part of a name a policy can allow.
      if (ch <= 0x20 || ch >= 0x7F || ch == '.') return ParseError::kBadName;
      name->push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch));
    }
    at += 1 + len;
  }
}

}  // namespace

std::string_view parseErrorName(ParseError e) {
  switch (e) {
    case ParseError::kNone:
      return "none";
    case ParseError::kTruncated:
      return "truncated";
    case ParseError::kIsResponse:
      return "is_response";
    case ParseError::kBadCounts:
      return "bad_counts";
    case ParseError::kBadName:
      return "bad_name";
    case ParseError::kPointerLoop:
      return "pointer_loop";
    case ParseError::kBadAdditional:
      return "bad_additional";
    case ParseError::kTrailingBytes:
      return "trailing_bytes";
  }
  return "unknown";
}

std::optional<DnsHeader> parseHeader(std::span<const uint8_t> m) {
  if (m.size() < dns::kHeaderBytes) return std::nullopt;
  DnsHeader h;
  h.id = get16(m, 0);
  h.response = (m[2] & 0x80) != 0;
  h.opcode = static_cast<uint8_t>((m[2] >> 3) & 0x0F);
  h.recursionDesired = (m[2] & 0x01) != 0;
  h.qdCount = get16(m, 4);
  h.anCount = get16(m, 6);
  h.nsCount = get16(m, 8);
  h.arCount = get16(m, 10);
  return h;
}

std::optional<DnsQuery> parseQuery(std::span<const uint8_t> m, ParseError* error) {
  auto fail = [&](ParseError e) {
    *error = e;
    return std::nullopt;
  };
  *error = ParseError::kNone;
  auto h = parseHeader(m);
  if (!h) return fail(ParseError::kTruncated);
  if (h->response) return fail(ParseError::kIsResponse);
  // Counts are checked before anything is read: a header claiming 65535 records costs nothing.
  if (h->qdCount != 1 || h->anCount != 0 || h->nsCount != 0 || h->arCount > 1) {
    return fail(ParseError::kBadCounts);
  }
  DnsQuery q;
  q.header = *h;
  size_t pos = dns::kHeaderBytes;
  if (auto e = readName(m, &pos, &q.question.name); e != ParseError::kNone) return fail(e);
  if (pos + 4 > m.size()) return fail(ParseError::kTruncated);
  q.question.type = get16(m, pos);
  q.question.klass = get16(m, pos + 2);
  pos += 4;
  if (h->arCount == 1) {
    std::string owner;
    if (auto e = readName(m, &pos, &owner); e != ParseError::kNone) return fail(e);
    if (pos + 10 > m.size()) return fail(ParseError::kTruncated);
    uint16_t type = get16(m, pos);
    uint16_t rdLength = get16(m, pos + 8);
    if (!owner.empty() || type != dns::kTypeOpt) return fail(ParseError::kBadAdditional);
    q.edns = true;
    q.ednsUdpSize = get16(m, pos + 2);
    pos += 10;
    if (pos + rdLength > m.size()) return fail(ParseError::kTruncated);
    pos += rdLength;  // EDNS options (cookies, padding, ...) are ignored
  }
  if (pos != m.size()) return fail(ParseError::kTrailingBytes);
  return q;
}

std::vector<uint8_t> encodeName(std::string_view dotted) {
  std::vector<uint8_t> out;
  while (!dotted.empty()) {
    size_t dot = dotted.find('.');
    std::string_view label = dotted.substr(0, dot);
    out.push_back(static_cast<uint8_t>(std::min<size_t>(label.size(), 63)));
    out.insert(out.end(), label.begin(), label.begin() + std::min<size_t>(label.size(), 63));
    if (dot == std::string_view::npos) break;
    dotted.remove_prefix(dot + 1);
  }
  out.push_back(0);
  return out;
}

namespace {

void putHeader(std::vector<uint8_t>& out, const DnsHeader& h, uint8_t rcode, bool truncated,
               uint16_t qd, uint16_t an, uint16_t ar) {
  put16(out, h.id);
  // QR, opcode, AA (sandgate is the authority for everything the sandbox can resolve), TC, RD.
  out.push_back(static_cast<uint8_t>(0x80 | (h.opcode & 0x0F) << 3 | 0x04 | (truncated ? 0x02 : 0) |
                                     (h.recursionDesired ? 1 : 0)));
  out.push_back(static_cast<uint8_t>(0x80 | (rcode & 0x0F)));  // RA: the stub expects recursion
  put16(out, qd);
  put16(out, an);
  put16(out, 0);
  put16(out, ar);
}

}  // namespace

std::vector<uint8_t> buildHeaderOnly(const DnsHeader& h, uint8_t rcode) {
  std::vector<uint8_t> out;
  putHeader(out, h, rcode, false, 0, 0, 0);
  return out;
}

std::vector<uint8_t> buildResponse(const DnsQuery& q, uint8_t rcode,
                                   const std::vector<DnsAnswer>& answers, size_t maxBytes) {
  std::vector<uint8_t> question = encodeName(q.question.name);
  put16(question, q.question.type);
  put16(question, q.question.klass);
  std::vector<uint8_t> opt;
  if (q.edns) {
    opt = {0};  // root owner
    put16(opt, dns::kTypeOpt);
    put16(opt, 1232);  // our payload size: the DNS flag day 2020 value
    put32(opt, 0);     // extended rcode 0, version 0, no DO
    put16(opt, 0);
  }
  std::vector<uint8_t> records;
  uint16_t count = 0;
  bool truncated = false;
  for (const auto& a : answers) {
    std::vector<uint8_t> r = {0xC0, 0x0C};  // the question's name, right after the header
    put16(r, a.type);
    put16(r, dns::kClassIn);
    put32(r, a.ttl);
    put16(r, static_cast<uint16_t>(a.rdata.size()));
    r.insert(r.end(), a.rdata.begin(), a.rdata.end());
    if (dns::kHeaderBytes + question.size() + records.size() + r.size() + opt.size() > maxBytes) {
      truncated = true;
      break;
    }
    records.insert(records.end(), r.begin(), r.end());
    ++count;
  }
  std::vector<uint8_t> out;
  putHeader(out, q.header, rcode, truncated, 1, count, q.edns ? 1 : 0);
  out.insert(out.end(), question.begin(), question.end());
  out.insert(out.end(), records.begin(), records.end());
  out.insert(out.end(), opt.begin(), opt.end());
  return out;
}

}  // namespace sandgate::capture
