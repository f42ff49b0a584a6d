// Escaping text that came from a workload or an upstream (file names, paths, hosts, reasons,
// command lines, file content) before it reaches a person's terminal: a control byte there
// would be obeyed (ESC sequences erase or rewrite lines, CR returns to the start of one), so a
// name could print a forged summary. One escaping rule, C style as git's core.quotepath writes
// it: \a \b \t \n \v \f \r \" \\ and \ooo for any other byte (no I/O).
#pragma once

#include <string>
#include <string_view>

namespace sandgate {

// A name or path as git prints one with core.quotepath (its default): unchanged when every byte
// is printable ASCII other than '"' and '\', else in double quotes with every other byte
// escaped (controls, DEL, bytes >= 0x80: UTF-8 and non-UTF-8 alike). The result has no byte a
// terminal obeys, and `git apply` reads it back as the same name.
std::string quoteName(std::string_view name);

// Free text that may hold a workload's bytes (a warning naming a file, a host, a reason, a
// line of a file): controls (TAB kept, unless `tabs`), DEL, bytes that are not UTF-8, the C1
// controls (U+0080..U+009F, which some terminals obey as ESC sequences) and the bidirectional
// formatting characters (which reorder what a reviewer reads) are escaped as \ooo (\n, \r, \t
// and their kin as themselves); other UTF-8 and '\' stay as they are. No quotes added.
std::string escapeText(std::string_view text, bool tabs = false);

// Whether escapeText would change `text`.
bool needsEscape(std::string_view text);

}  // namespace sandgate
