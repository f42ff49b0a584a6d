// ClientHello/SNI parser (proxy/tunnel/tls_client_hello.h): real OpenSSL hellos and crafted ones.
#include "proxy/tunnel/tls_client_hello.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <string>
#include <vector>

namespace sandgate::proxy {
namespace {

using Status = ClientHello::Status;

// The bytes OpenSSL sends first as a client, with `sni` (if not empty).
std::string opensslHello(const std::string& sni) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rbio, wbio);
  if (!sni.empty()) SSL_set_tlsext_host_name(ssl, sni.c_str());
  SSL_connect(ssl);  // wants to read: the hello is in wbio
  char* data = nullptr;
  long n = BIO_get_mem_data(wbio, &data);
  std::string out(data, static_cast<size_t>(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return out;
}

std::string u16(size_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v & 0xff)}; }
std::string u24(size_t v) {
  return {static_cast<char>(v >> 16), static_cast<char>((v >> 8) & 0xff),
          static_cast<char>(v & 0xff)};
}

std::string sniExtension(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += std::string(1, '\0') + u16(n.size()) + n;
  std::string body = u16(list.size()) + list;
  return u16(0) + u16(body.size()) + body;
}

// A minimal ClientHello with the given extensions block, in records of at most `recordSize`.
std::string craftedHello(const std::string& extensions, size_t recordSize = 16384,
                         bool withExtensions = true) {
  std::string body = "\x03\x03" + std::string(32, 'r') + std::string(1, '\0') + u16(2) +
                     "\x13\x01" + std::string(1, '\x01') + std::string(1, '\0');
  if (withExtensions) body += u16(extensions.size()) + extensions;
  std::string msg = std::string(1, '\x01') + u24(body.size()) + body;
  std::string out;
  for (size_t i = 0; i < msg.size(); i += recordSize) {
    auto part = msg.substr(i, recordSize);
    out += std::string("\x16\x03\x01", 3) + u16(part.size()) + part;
  }
  return out;
}

TEST(ClientHello, OpenSslWithSni) {
  auto hello = opensslHello("api.example.test");
  auto r = parseClientHello(hello);
  ASSERT_EQ(r.status, Status::kOk) << r.error;
  ASSERT_TRUE(r.sni.has_value());
  EXPECT_EQ(*r.sni, "api.example.test");
}

TEST(ClientHello, OpenSslWithoutSni) {
  auto r = parseClientHello(opensslHello(""));
  ASSERT_EQ(r.status, Status::kOk) << r.error;
  EXPECT_FALSE(r.sni.has_value());
}

TEST(ClientHello, EveryPrefixNeedsMore) {
  auto hello = opensslHello("a.test");
  for (size_t n = 0; n < hello.size(); ++n) {
    auto r = parseClientHello(std::string_view(hello).substr(0, n));
    ASSERT_EQ(r.status, Status::kNeedMore) << "prefix " << n << ": " << r.error;
  }
}

TEST(ClientHello, SpansRecords) {
  auto r = parseClientHello(craftedHello(sniExtension({"split.test"}), 7));
  ASSERT_EQ(r.status, Status::kOk) << r.error;
  EXPECT_EQ(r.sni, "split.test");
}

TEST(ClientHello, TrailingBytesAfterHelloIgnored) {
  auto r = parseClientHello(craftedHello(sniExtension({"a.test"})) + "junk");
  ASSERT_EQ(r.status, Status::kOk) << r.error;
  EXPECT_EQ(r.sni, "a.test");
}

TEST(ClientHello, NoExtensionsAtAll) {
  auto r = parseClientHello(craftedHello("", 16384, false));
  ASSERT_EQ(r.status, Status::kOk) << r.error;
  EXPECT_FALSE(r.sni.has_value());
}

struct BadCase {
  const char* name;
  std::string bytes;
  Status status;
};

// Names the case in failure messages and test listings instead of dumping its bytes.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadHello : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadHello, Refused) {
  auto r = parseClientHello(GetParam().bytes);
  EXPECT_EQ(r.status, GetParam().status) << r.error;
  EXPECT_FALSE(r.sni.has_value());
}

std::string withRecordLength(std::string hello, size_t len) {
  hello[3] = static_cast<char>(len >> 8);
  hello[4] = static_cast<char>(len & 0xff);
  return hello;
}

const BadCase kBad[] = {
    {"plain_http", "GET / HTTP/1.1\r\n\r\n", Status::kNotTls},
    {"ssh", "SSH-2.0-OpenSSH_9.0\r\n", Status::kNotTls},
    {"record_version_2", std::string("\x16\x02\x00\x00\x05", 5) + "hello", Status::kNotTls},
    {"zero_length_record", std::string("\x16\x03\x01\x00\x00", 5), Status::kMalformed},
    {"huge_record", std::string("\x16\x03\x01\xff\xff", 5), Status::kMalformed},
    {"not_client_hello", std::string("\x16\x03\x01\x00\x04\x02\x00\x00\x00", 9),
     Status::kMalformed},
    {"duplicate_host_name", craftedHello(sniExtension({"a.test", "b.test"})), Status::kMalformed},
    {"duplicate_sni_extension", craftedHello(sniExtension({"a.test"}) + sniExtension({"b.test"})),
     Status::kMalformed},
    {"empty_host_name", craftedHello(sniExtension({""})), Status::kMalformed},
    {"nul_in_host_name", craftedHello(sniExtension({std::string("a\0.test", 7)})),
     Status::kMalformed},
    {"extension_overruns", craftedHello(u16(0) + u16(200) + "x"), Status::kMalformed},
    {"sni_list_overruns", craftedHello(u16(0) + u16(4) + u16(50) + "xx"), Status::kMalformed},
    {"handshake_longer_than_limit", std::string("\x16\x03\x01\x00\x04\x01\x7f\xff\xff", 9),
     Status::kMalformed},
    {"record_shorter_than_claimed_then_other_type",
     withRecordLength(craftedHello(""), 4) + std::string("\x17\x03\x03\x00\x01x", 6),
     Status::kMalformed},
};

INSTANTIATE_TEST_SUITE_P(Cases, BadHello, ::testing::ValuesIn(kBad),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sandgate::proxy
