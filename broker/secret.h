// Secret: credential bytes held in locked, non-dumpable memory that cannot be printed by accident.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sandgate::broker {

// The plaintext of one credential (or a form derived from it, such as the base64 of a Basic
// pair). There is deliberately no operator<<, no fmt formatter, no conversion to a string and
// no copy: a secret can only leave this object through reveal(), and every call site says why
// that use is safe. Held through shared_ptr<const Secret> so that a rotation never frees bytes
// that a request in flight is still reading.
//
// The bytes live in their own anonymous pages that are mlock()ed where RLIMIT_MEMLOCK allows
// (so they are not written to swap), excluded from core dumps (MADV_DONTDUMP) and not inherited
// by fork() (MADV_WIPEONFORK), and are wiped with OPENSSL_cleanse() before the pages go back.
class Secret {
 public:
  // Copies `bytes` into protected memory. The caller wipes its own copy (see wipe()).
  static std::shared_ptr<const Secret> copyOf(std::string_view bytes);
  // Takes the bytes of `bytes` and wipes the string, so that the only copy left is protected.
  static std::shared_ptr<const Secret> take(std::string& bytes);

  ~Secret();
  Secret(const Secret&) = delete;
  Secret& operator=(const Secret&) = delete;
  Secret(Secret&&) = delete;
  Secret& operator=(Secret&&) = delete;

  // The plaintext. Every call site carries a comment explaining where the bytes go and why
  // that destination is allowed to see them.
  std::string_view reveal() const { return {data_, size_}; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Whether mlock() succeeded (false when RLIMIT_MEMLOCK is exhausted; the secret still works).
  bool locked() const { return locked_; }
  // Constant-time comparison (the result of comparing secrets must not leak through timing).
  bool equals(std::string_view other) const;

 private:
  explicit Secret(std::string_view bytes);

  char* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mmap()ed: a whole number of pages, never shared with other data
  bool locked_ = false;
};

// Printing a secret is a compile error, not a silent leak.
std::ostream& operator<<(std::ostream&, const Secret&) = delete;

// Overwrites a string's whole buffer (including spare capacity) with zeros that the compiler
// cannot optimise away, then clears it. For temporaries that held plaintext.
void wipe(std::string& s);

// Why a secret's bytes are unusable, without quoting them; nullopt when they are fine.
// Rejects empty secrets and any control byte (NUL, CR, LF, other C0 bytes, DEL): such a value
// would split or smuggle a header when injected.
std::optional<std::string> checkSecretBytes(std::string_view bytes);

// Trims one trailing line ending ("\n" or "\r\n"), as written by `echo` or an editor.
void trimTrailingNewline(std::string& s);

// prctl(PR_SET_DUMPABLE, 0): no core dump of this process (it would contain every secret) and
// no ptrace or /proc/<pid>/mem access from other processes of the same user. Returns an error
// sentence on failure. Note: it also makes this process's /proc files root-owned until the next
// execve(), so call it in the proxy process, not between fork() and exec() of a sandbox child.
std::optional<std::string> disableCoreDumps();

}  // namespace sandgate::broker
