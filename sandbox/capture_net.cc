// Local routes for the synthetic ranges (rtnetlink, by hand), the DNS stub sockets and the
// capture listeners, all inside the sandbox's network namespace (see capture_net.h).
#include "sandbox/capture_net.h"

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/network.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {

namespace {

bool parsePrefix(const std::string& cidr, int* family, unsigned char addr[16], int* len) {
  auto slash = cidr.find('/');
  if (slash == std::string::npos) return false;
  std::string ip = cidr.substr(0, slash);
  *family = ip.find(':') == std::string::npos ? AF_INET : AF_INET6;
  if (inet_pton(*family, ip.c_str(), addr) != 1) return false;
  char* end = nullptr;
  long n = std::strtol(cidr.c_str() + slash + 1, &end, 10);
  if (*end != '\0' || n < 0 || n > (*family == AF_INET ? 32 : 128)) return false;
  *len = static_cast<int>(n);
  return true;
}

void addAttr(nlmsghdr* h, size_t cap, unsigned short type, const void* data, size_t len) {
  size_t at = NLMSG_ALIGN(h->nlmsg_len);
  auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(h) + at);
  rta->rta_type = type;
  rta->rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
  if (at + RTA_SPACE(len) > cap) return;  // cannot happen: the buffer is sized for two attrs
  std::memcpy(RTA_DATA(rta), data, len);
  h->nlmsg_len = static_cast<uint32_t>(at + RTA_SPACE(len));
}

}  // namespace

int addLocalRoute(const std::string& cidr) {
  int family = 0, len = 0;
  unsigned char addr[16] = {};
  if (!parsePrefix(cidr, &family, addr, &len)) return EINVAL;
  unsigned lo = if_nametoindex("lo");
  if (lo == 0) return errno;
  alignas(nlmsghdr) char buf[256] = {};
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  h->nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  h->nlmsg_type = RTM_NEWROUTE;
  h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
  h->nlmsg_seq = 1;
  auto* rt = reinterpret_cast<rtmsg*>(NLMSG_DATA(h));
  rt->rtm_family = static_cast<unsigned char>(family);
  rt->rtm_dst_len = static_cast<unsigned char>(len);
  rt->rtm_table = RT_TABLE_LOCAL;  // what `ip route add local ...` uses
  rt->rtm_protocol = RTPROT_STATIC;
  rt->rtm_scope = RT_SCOPE_HOST;
  rt->rtm_type = RTN_LOCAL;
  addAttr(h, sizeof buf, RTA_DST, addr, family == AF_INET ? 4 : 16);
  uint32_t oif = lo;
  addAttr(h, sizeof buf, RTA_OIF, &oif, sizeof oif);

  int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (s < 0) return errno;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(s, buf, h->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) {
    int err = errno;
    close(s);
    return err;
  }
  // The answer is one NLMSG_ERROR: error 0 is the ACK.
  alignas(nlmsghdr) char reply[1024];
  ssize_t n;
  do {
    n = recv(s, reply, sizeof reply, 0);
  } while (n < 0 && errno == EINTR);
  int err = n < 0 ? errno : EPROTO;
  close(s);
  if (n < 0) return err;
  auto* r = reinterpret_cast<nlmsghdr*>(reply);
  if (!NLMSG_OK(r, static_cast<unsigned>(n)) || r->nlmsg_type != NLMSG_ERROR ||
      r->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
    return EPROTO;
  }
  return -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(r))->error;
}

CaptureSockets setUpCapture(const CaptureSpec& spec, std::vector<std::string>* warnings) {
  CaptureSockets out;
  auto closeAll = [&] {
    for (int fd : {out.dnsUdp, out.dnsTcp}) {
      if (fd >= 0) close(fd);
    }
    for (int fd : out.listeners) close(fd);
  };
  if (int err = addLocalRoute(spec.rangeV4); err != 0) {
    throwSys("route " + spec.rangeV4 + " to lo (transparent capture)", "rtnetlink RTM_NEWROUTE",
             err);
  }
  if (!spec.rangeV6.empty()) {
    if (int err = addLocalRoute(spec.rangeV6); err == 0) {
      out.ipv6 = true;
    } else {
      warnings->push_back(
          sysFailure("route " + spec.rangeV6 + " to lo (IPv6 capture unavailable; IPv4 only)",
                     "rtnetlink RTM_NEWROUTE", err));
    }
  }
  std::string call;
  sockaddr_in dns{};
  dns.sin_family = AF_INET;
  dns.sin_port = htons(53);
  inet_pton(AF_INET, kDnsStubAddress, &dns.sin_addr);
  out.dnsUdp = bindSocket(SOCK_DGRAM, reinterpret_cast<sockaddr*>(&dns), sizeof dns, false, &call);
  if (out.dnsUdp < 0) throwSys(std::string("bind the DNS stub on UDP ") + kDnsStubAddress, call);
  out.dnsTcp = bindSocket(SOCK_STREAM, reinterpret_cast<sockaddr*>(&dns), sizeof dns, true, &call);
  if (out.dnsTcp < 0) {
    int err = errno;
    closeAll();
    throwSys(std::string("listen for DNS on TCP ") + kDnsStubAddress, call, err);
  }
  for (uint16_t port : spec.ports) {
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    v4.sin_addr.s_addr = htonl(INADDR_ANY);
    int s = bindSocket(SOCK_STREAM, reinterpret_cast<sockaddr*>(&v4), sizeof v4, true, &call);
    if (s < 0) {
      int err = errno;
      closeAll();
      throwSys("listen on capture port 0.0.0.0:" + std::to_string(port), call, err);
    }
    out.listeners.push_back(s);
    if (!out.ipv6) continue;
    sockaddr_in6 v6{};
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
    v6.sin6_addr = in6addr_any;
    s = bindSocket(SOCK_STREAM, reinterpret_cast<sockaddr*>(&v6), sizeof v6, true, &call);
    if (s < 0) {
      int err = errno;
      closeAll();
      throwSys("listen on capture port [::]:" + std::to_string(port), call, err);
    }
    out.listeners.push_back(s);
  }
  return out;
}

}  // namespace sandgate::sandbox
