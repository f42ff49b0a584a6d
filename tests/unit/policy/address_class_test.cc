// Tests for policy/address_class.cc: every special range, IPv4 and IPv6, and each way an IPv6
// address can carry an IPv4 one. Pure: nothing here is ever dialled.
#include "policy/address_class.h"

#include <gtest/gtest.h>

namespace sandgate::policy {
namespace {

struct Case {
  const char* name;
  const char* addr;
  AddressClass want;
  const char* embedding = "";
};

constexpr auto kPublic = AddressClass::kPublic;
constexpr auto kLoopback = AddressClass::kLoopback;
constexpr auto kUnspecified = AddressClass::kUnspecified;
constexpr auto kPrivate = AddressClass::kPrivate;
constexpr auto kCgnat = AddressClass::kCgnat;
constexpr auto kLinkLocal = AddressClass::kLinkLocal;
constexpr auto kMetadata = AddressClass::kCloudMetadata;
constexpr auto kMulticast = AddressClass::kMulticast;
constexpr auto kBroadcast = AddressClass::kBroadcast;
constexpr auto kReserved = AddressClass::kReserved;
constexpr auto kDoc = AddressClass::kDocumentation;
constexpr auto kUla = AddressClass::kUniqueLocal;

void run(const Case* begin, const Case* end) {
  for (const Case* c = begin; c != end; ++c) {
    SCOPED_TRACE(c->name);
    auto a = parseIp(c->addr);
    ASSERT_TRUE(a.has_value()) << c->addr;
    Classification got = classify(*a);
    EXPECT_EQ(className(got.cls), className(c->want)) << c->addr;
    EXPECT_EQ(got.embedding, c->embedding);
    EXPECT_EQ(got.denied(), c->want != kPublic);
  }
}

TEST(PolicyAddressClass, Ipv4Ranges) {
  const Case cases[] = {
      {"public", "8.8.8.8", kPublic},
      {"public_just_below_10", "9.255.255.255", kPublic},
      {"public_just_above_10", "11.0.0.0", kPublic},
      {"loopback", "127.0.0.1", kLoopback},
      {"loopback_edge", "127.255.255.255", kLoopback},
      {"unspecified", "0.0.0.0", kUnspecified},
      {"this_network", "0.1.2.3", kUnspecified},
      {"rfc1918_10", "10.0.0.1", kPrivate},
      {"rfc1918_172_low", "172.16.0.1", kPrivate},
      {"rfc1918_172_high", "172.31.255.255", kPrivate},
      {"public_172_32", "172.32.0.0", kPublic},
      {"public_172_15", "172.15.255.255", kPublic},
      {"rfc1918_192_168", "192.168.1.1", kPrivate},
      {"cgnat_low", "100.64.0.1", kCgnat},
      {"cgnat_high", "100.127.255.255", kCgnat},
      {"public_100_128", "100.128.0.0", kPublic},
      {"link_local", "169.254.1.1", kLinkLocal},
      {"aws_dns_is_link_local", "169.254.169.253", kLinkLocal},
      {"metadata_aws_gcp_azure", "169.254.169.254", kMetadata},
      {"metadata_ecs", "169.254.170.2", kMetadata},
      {"metadata_aws_time", "169.254.169.123", kMetadata},
      {"metadata_alibaba", "100.100.100.200", kMetadata},
      {"metadata_azure_wireserver", "168.63.129.16", kMetadata},
      {"multicast_low", "224.0.0.1", kMulticast},
      {"multicast_high", "239.255.255.255", kMulticast},
      {"broadcast", "255.255.255.255", kBroadcast},
      {"reserved_240", "240.0.0.1", kReserved},
      {"reserved_255_254", "255.255.255.254", kReserved},
      {"ietf_protocol_assignments", "192.0.0.8", kReserved},
      {"oracle_192_0_0_192", "192.0.0.192", kReserved},
      {"benchmarking_low", "198.18.0.1", kReserved},
      {"benchmarking_high", "198.19.255.255", kReserved},
      {"public_198_20", "198.20.0.0", kPublic},
      {"six_to_four_relay", "192.88.99.1", kReserved},
      {"doc_test_net_1", "192.0.2.1", kDoc},
      {"doc_test_net_2", "198.51.100.1", kDoc},
      {"doc_test_net_3", "203.0.113.1", kDoc},
      {"inet_aton_spelling", "2130706433", kLoopback},
      {"inet_aton_hex", "0xa9.0xfe.0xa9.0xfe", kMetadata},
  };
  run(std::begin(cases), std::end(cases));
}

TEST(PolicyAddressClass, Ipv6Ranges) {
  const Case cases[] = {
      {"public", "2606:4700::1111", kPublic},
      {"loopback", "::1", kLoopback},
      {"unspecified", "::", kUnspecified},
      {"ula_fc", "fc00::1", kUla},
      {"ula_fd", "fd12:3456::1", kUla},
      {"metadata_aws_v6", "fd00:ec2::254", kMetadata},
      {"ula_near_metadata", "fd00:ec2::253", kUla},
      {"link_local", "fe80::1", kLinkLocal},
      {"link_local_edge", "febf:ffff::1", kLinkLocal},
      {"site_local", "fec0::1", kReserved},
      {"multicast", "ff02::1", kMulticast},
      {"documentation", "2001:db8::1", kDoc},
      {"documentation_3fff", "3fff:0:1::1", kDoc},
      {"benchmarking", "2001:2::1", kReserved},
      {"orchid_v2", "2001:20::1", kReserved},
      {"discard_only", "100::1", kReserved},
      {"outside_2000_3", "4000::1", kReserved},
      {"siit_translated", "::ffff:0:1.2.3.4", kReserved},
      {"global_edge_low", "2000::1", kPublic},
      {"global_edge_high", "3ffe:ffff::1", kPublic},
  };
  run(std::begin(cases), std::end(cases));
}

TEST(PolicyAddressClass, EmbeddedIpv4) {
  const Case cases[] = {
      {"mapped_loopback", "::ffff:127.0.0.1", kLoopback, "ipv4-mapped"},
      {"mapped_metadata", "::ffff:169.254.169.254", kMetadata, "ipv4-mapped"},
      {"mapped_private_hex", "::ffff:a00:1", kPrivate, "ipv4-mapped"},
      {"mapped_public", "::ffff:8.8.8.8", kPublic, "ipv4-mapped"},
      {"mapped_unspecified", "::ffff:0.0.0.0", kUnspecified, "ipv4-mapped"},
      {"compat_private", "::10.0.0.1", kPrivate, "ipv4-compatible"},
      {"compat_loopback", "::127.0.0.1", kLoopback, "ipv4-compatible"},
      {"compat_public", "::8.8.8.8", kPublic, "ipv4-compatible"},
      {"compat_low_value", "::2", kUnspecified, "ipv4-compatible"},
      {"nat64_metadata", "64:ff9b::169.254.169.254", kMetadata, "nat64"},
      {"nat64_loopback", "64:ff9b::7f00:1", kLoopback, "nat64"},
      {"nat64_public", "64:ff9b::8.8.8.8", kPublic, "nat64"},
      {"nat64_local_96", "64:ff9b:1::10.1.2.3", kPrivate, "nat64"},
      // RFC 6052 /48 layout: 10.1 in bits 48-63, 2.3 in bits 72-103; the /96 reading of the
      // same address is 8.8.8.8. The stricter reading wins.
      {"nat64_local_48", "64:ff9b:1:a01:2:300:808:808", kPrivate, "nat64"},
      {"nat64_local_public", "64:ff9b:1::8.8.8.8", kPublic, "nat64"},
      {"six_to_four_loopback", "2002:7f00:1::1", kLoopback, "6to4"},
      {"six_to_four_private", "2002:c0a8:101::", kPrivate, "6to4"},
      {"six_to_four_public", "2002:808:808::1", kPublic, "6to4"},
      // Teredo: the client address is the last 32 bits, inverted. 0x80ffffFE ^ ff = 127.0.0.1.
      {"teredo_loopback", "2001:0:4136:e378:8000:63bf:80ff:fffe", kLoopback, "teredo"},
      {"teredo_metadata", "2001::5601:5601", kMetadata, "teredo"},
      {"teredo_public", "2001::f7f7:f7f7", kPublic, "teredo"},
  };
  run(std::begin(cases), std::end(cases));
}

TEST(PolicyAddressClass, EmbeddedAddressIsReported) {
  auto c = classify(*parseIpv6("2001::5601:5601"));
  EXPECT_EQ(c.embedded.str(), "169.254.169.254");
  c = classify(*parseIpv6("2002:a9fe:a9fe::"));
  EXPECT_EQ(c.embedded.str(), "169.254.169.254");
  EXPECT_EQ(c.cls, kMetadata);
  c = classify(*parseIpv4Loose("10.0.0.1"));
  EXPECT_TRUE(c.embedding.empty());
}

TEST(PolicyAddressClass, NamesAreStableTokens) {
  EXPECT_EQ(className(kLoopback), "loopback");
  EXPECT_EQ(className(kMetadata), "cloud_metadata");
  EXPECT_EQ(className(kLinkLocal), "link_local");
  EXPECT_EQ(className(kUla), "unique_local");
  EXPECT_EQ(className(kPublic), "public");
}

}  // namespace
}  // namespace sandgate::policy
