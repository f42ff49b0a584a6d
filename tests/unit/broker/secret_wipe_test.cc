// The wipe of a secret's memory when it is dropped or replaced. This executable is linked with
// `-Wl,--wrap=munmap` (tests/unit/broker/CMakeLists.txt): every munmap() call in the code linked
// statically into it, broker/secret.cc's included, first comes here, where the mapping's bytes
// are checked while they can still be read, before the real munmap() returns them to the kernel.
// (Reading a secret's memory after its destructor would be undefined; this reads it just before.)
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "broker/secret.h"
#include "broker/store.h"
#include "tests/unit/broker/test_util.h"

namespace {

struct Unmapped {
  size_t length = 0;    // 0: not unmapped since watch()
  bool zeroed = false;  // every byte of the mapping was 0 when munmap() was called
};

std::mutex gMu;
// Mappings the test watches, by start address. Only those are read: another caller's mapping
// might not be readable at all (a guard page).
std::map<const void*, Unmapped> gWatched;

}  // namespace

extern "C" int __real_munmap(void* addr, size_t length);

extern "C" int __wrap_munmap(void* addr, size_t length) {
  {
    std::lock_guard lock(gMu);
    if (auto it = gWatched.find(addr); it != gWatched.end()) {
      const auto* bytes = static_cast<const unsigned char*>(addr);
      it->second = Unmapped{
          length, std::all_of(bytes, bytes + length, [](unsigned char b) { return b == 0; })};
    }
  }
  return __real_munmap(addr, length);
}

namespace sandgate::broker {
namespace {

using namespace testing;

// Has the wrapper check the mapping that starts at `addr` when it is unmapped.
void watch(const void* addr) {
  std::lock_guard lock(gMu);
  gWatched[addr] = Unmapped{};
}

// What the wrapper saw for the watched mapping at `addr` (length 0: not unmapped yet).
Unmapped unmappedAt(const void* addr) {
  std::lock_guard lock(gMu);
  auto it = gWatched.find(addr);
  return it == gWatched.end() ? Unmapped{} : it->second;
}

TEST(SecretWipe, TheWrapperSeesUnwipedMemory) {
  // The check itself: a mapping unmapped with a byte still set is reported as not zeroed.
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  static_cast<char*>(p)[4095] = 'x';
  watch(p);
  ASSERT_EQ(munmap(p, 4096), 0);
  Unmapped u = unmappedAt(p);
  EXPECT_EQ(u.length, 4096u);
  EXPECT_FALSE(u.zeroed);
}

TEST(SecretWipe, DroppingASecretZeroesItsWholeMappingBeforeUnmapping) {
  // One value inside a page, one that spans three, so that the wipe must cover whole mappings.
  for (size_t size : {size_t{40}, size_t{2 * 4096 + 100}}) {
    std::string value(size, 'k');
    auto secret = Secret::copyOf(value);
    const void* addr = secret->reveal().data();
    watch(addr);
    secret.reset();
    Unmapped u = unmappedAt(addr);
    ASSERT_GE(u.length, size) << "the secret's memory was not unmapped (size " << size << ")";
    EXPECT_TRUE(u.zeroed) << "a secret of " << size << " bytes was unmapped without a wipe";
  }
}

TEST(SecretWipe, ARotatedFileSecretIsWipedOnceNoRequestHoldsIt) {
  TempDir dir;
  writeFile(dir.file("f"), "sk-before-rotation-0123456789\n");
  auto opened = SecretStore::open(fileCredential("f", dir.file("f")), "test.yaml");
  ASSERT_TRUE(opened.ok()) << opened.errorText();
  std::shared_ptr<const SecretStore> store = std::move(*opened);

  // A request in flight keeps the old value alive across the rotation.
  std::shared_ptr<const Secret> inFlight = store->get("f").secret;
  ASSERT_NE(inFlight, nullptr);
  const void* oldAddr = inFlight->reveal().data();
  watch(oldAddr);
  replaceFile(dir.file("f"), "sk-after-rotation-9876543210\n");
  Fetch next = store->get("f");
  ASSERT_TRUE(next.ok()) << next.detail;
  EXPECT_EQ(next.secret->reveal(), "sk-after-rotation-9876543210");
  EXPECT_EQ(inFlight->reveal(), "sk-before-rotation-0123456789");
  EXPECT_EQ(unmappedAt(oldAddr).length, 0u) << "unmapped while a request still held it";

  // The request ends: the last reference goes, and the old value with it, wiped.
  inFlight.reset();
  Unmapped u = unmappedAt(oldAddr);
  ASSERT_GT(u.length, 0u) << "the replaced secret is still mapped after its last user let go";
  EXPECT_TRUE(u.zeroed);

  // Closing the store drops the current value the same way.
  const void* newAddr = next.secret->reveal().data();
  watch(newAddr);
  next = Fetch{};
  store.reset();
  u = unmappedAt(newAddr);
  ASSERT_GT(u.length, 0u) << "the current secret outlived its store";
  EXPECT_TRUE(u.zeroed);
}

}  // namespace
}  // namespace sandgate::broker
