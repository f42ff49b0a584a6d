// Secret storage: page-aligned mappings, mlock, MADV_DONTDUMP/WIPEONFORK, OPENSSL_cleanse.
#include "broker/secret.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace sandgate::broker {

namespace {

size_t pageSize() {
  static const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return kPage;
}

}  // namespace

Secret::Secret(std::string_view bytes) : size_(bytes.size()) {
  // Whole pages of our own: munlock() works per page, so a page shared with another secret
  // would be unlocked when that one is freed; and madvise() flags apply to whole pages.
  size_t page = pageSize();
  mapped_ = ((bytes.size() + page) / page) * page;  // at least one page, even for size 0
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<char*>(p);
  // Best effort: each of these can be refused (RLIMIT_MEMLOCK, old kernels) without making the
  // secret unusable; locked() reports the one that matters most.
  locked_ = mlock(data_, mapped_) == 0;
  (void)madvise(data_, mapped_, MADV_DONTDUMP);
#ifdef MADV_WIPEONFORK
  (void)madvise(data_, mapped_, MADV_WIPEONFORK);
#endif
  if (!bytes.empty()) std::memcpy(data_, bytes.data(), bytes.size());
}

Secret::~Secret() {
  OPENSSL_cleanse(data_, mapped_);
  if (locked_) munlock(data_, mapped_);
  munmap(data_, mapped_);
}

std::shared_ptr<const Secret> Secret::copyOf(std::string_view bytes) {
  return std::shared_ptr<const Secret>(new Secret(bytes));
}

std::shared_ptr<const Secret> Secret::take(std::string& bytes) {
  auto s = copyOf(bytes);
  wipe(bytes);
  return s;
}

bool Secret::equals(std::string_view other) const {
  if (other.size() != size_) return false;
  return CRYPTO_memcmp(data_, other.data(), size_) == 0;
}

void wipe(std::string& s) {
  // resize() to the capacity so that bytes of an earlier, longer value are wiped too.
  s.resize(s.capacity());
  OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

std::optional<std::string> checkSecretBytes(std::string_view bytes) {
  if (bytes.empty()) return "the secret is empty";
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c != 0x7f) continue;
    // Name the kind of byte and where it is, never the bytes around it.
    std::string what = c == '\n'   ? "a line feed (LF)"
                       : c == '\r' ? "a carriage return (CR)"
                       : c == 0    ? "a NUL byte"
                                   : fmt::format("a control byte 0x{:02x}", c);
    return fmt::format(
        "the secret contains {} at offset {} of {}; control bytes could split or "
        "smuggle a header, so it is refused",
        what, i, bytes.size());
  }
  return std::nullopt;
}

void trimTrailingNewline(std::string& s) {
  if (!s.empty() && s.back() == '\n') {
    s.pop_back();
    if (!s.empty() && s.back() == '\r') s.pop_back();
  }
}

std::optional<std::string> disableCoreDumps() {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return fmt::format("prctl(PR_SET_DUMPABLE, 0): {}", std::strerror(errno));
  }
  return std::nullopt;
}

}  // namespace sandgate::broker
