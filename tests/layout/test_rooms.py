"""The source tree's layering, checked from the includes.

proxy/ is one library in rooms, each allowed to include only the rooms below it, so that a
request runs through the code in one direction (accept, session, forward | tunnel | intercept,
exchange, upstream). The libraries keep their own rules: policy/ and config/ are pure,
sandbox/ has neither Boost nor secrets, ca/ knows nothing of the proxy.
"""

import pathlib
import re
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Bottom up: a room may include its own headers and those of the rooms before it.
ROOMS = ["net", "observe", "identity", "state", "capture_server", "client", "parent",
         "upstream",
         "exchange", "intercept", "tunnel", "forward", "session", "admin", "server"]

# What each library may include from the others (common/ is open to all).
LIBRARIES = {
    "common": set(),
    "config": set(),
    "policy": {"config"},
    "broker": {"config", "policy"},
    "capture": {"policy"},
    "ca": set(),
    "proxy": {"config", "policy", "broker", "capture", "ca"},
    "sandbox": {"config", "policy"},
    "run": {"config", "policy", "broker", "capture", "ca", "proxy", "sandbox"},
    "cli": {"config", "policy", "broker", "capture", "ca", "proxy", "sandbox", "run"},
}


def sources(folder):
    for path in sorted((ROOT / folder).rglob("*")):
        if path.suffix in (".h", ".cc"):
            yield path


def includes(path):
    return INCLUDE.findall(path.read_text(encoding="utf-8"))


class ProxyRooms(unittest.TestCase):
    def test_every_proxy_file_is_in_a_known_room(self):
        loose = [p.name for p in (ROOT / "proxy").glob("*") if p.suffix in (".h", ".cc")]
        self.assertEqual(loose, [], "proxy/ keeps its code in rooms (subfolders)")
        rooms = sorted(p.name for p in (ROOT / "proxy").iterdir() if p.is_dir())
        self.assertEqual(sorted(ROOMS), rooms,
                         "a new room needs its place in ROOMS (and in proxy/README.md)")

    def test_rooms_include_only_rooms_below_them(self):
        wrong = []
        for path in sources("proxy"):
            room = path.relative_to(ROOT / "proxy").parts[0]
            for inc in includes(path):
                parts = inc.split("/")
                if parts[0] != "proxy":
                    continue
                self.assertIn(parts[1], ROOMS, f"{path.relative_to(ROOT)} includes {inc}")
                if ROOMS.index(parts[1]) > ROOMS.index(room):
                    wrong.append(f"{path.relative_to(ROOT)} ({room}) includes {inc}")
        self.assertEqual(wrong, [], "an upward include: move the piece down, or the caller up")

    def test_no_file_is_over_600_lines(self):
        long = [f"{p.relative_to(ROOT)}: {n}" for p in sources("proxy")
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600]
        self.assertEqual(long, [])

    def test_every_room_says_what_it_owns(self):
        for room in ROOMS:
            readme = ROOT / "proxy" / room / "README.md"
            self.assertTrue(readme.is_file(), f"proxy/{room}/README.md")
            text = readme.read_text(encoding="utf-8")
            self.assertIn("May include", text, f"proxy/{room}/README.md names what it may include")


class Libraries(unittest.TestCase):
    def test_libraries_include_only_what_they_may(self):
        wrong = []
        for lib, allowed in LIBRARIES.items():
            for path in sources(lib):
                for inc in includes(path):
                    top = inc.split("/")[0]
                    if top in LIBRARIES and top not in allowed | {lib, "common"}:
                        wrong.append(f"{path.relative_to(ROOT)} includes {inc}")
        self.assertEqual(wrong, [])

    def test_pure_libraries_use_no_network_code(self):
        for lib in ("policy", "config", "sandbox"):
            for path in sources(lib):
                text = path.read_text(encoding="utf-8")
                self.assertNotRegex(text, r"#include <boost/(asio|beast)",
                                    f"{path.relative_to(ROOT)}: {lib}/ does no I/O with Asio")


class ReasonCatalogue(unittest.TestCase):
    """proxy/client/reasons.h: every token is in the catalogue, and README.md lists it."""

    def test_every_request_reason_is_catalogued_and_documented(self):
        header = (ROOT / "proxy" / "client" / "reasons.h").read_text(encoding="utf-8")
        consts = dict(re.findall(r'inline constexpr std::string_view (k\w+) = "([^"]+)";', header))
        catalogue = header[header.index("kRequestReasons[]"):]
        listed = re.findall(r"\{reason::(k\w+),", catalogue)
        self.assertEqual(sorted(listed), sorted(consts), "each reason:: token has one entry")
        self.assertEqual(len(set(consts.values())), len(consts), "tokens are unique")
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        table = readme[readme.index("## Refusals"):readme.index("## Running many sandboxes")]
        missing = [t for t in consts.values() if f"| `{t}` |" not in table]
        self.assertEqual(missing, [], "README.md's Refusals table lists every token")

    def test_every_git_reason_is_catalogued_and_documented(self):
        header = (ROOT / "policy" / "git_rules.h").read_text(encoding="utf-8")
        consts = dict(re.findall(r'inline constexpr std::string_view (k\w+) = "([^"]+)";', header))
        catalogue = header[header.index("kGitReasons[]"):]
        rows = re.findall(r'\{reason::(k\w+), "([^"]+)",\s*"([^"]+)"', catalogue)
        self.assertEqual(sorted(r[0] for r in rows), sorted(consts), "each token has one entry")
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        table = readme[readme.index("## Refusals"):readme.index("## Running many sandboxes")]
        for const, status, meaning in rows:
            row = f"| `{consts[const]}` | {status} | {meaning} |"
            self.assertIn(row, table, "README.md's Refusals table lists every git token")

    def test_no_reason_token_is_written_outside_a_catalogue(self):
        # A reason written as a literal in the data path is one a client cannot look up.
        stray = []
        for path in sources("proxy"):
            text = path.read_text(encoding="utf-8")
            for m in re.finditer(r'(?:\.reason\s*=|reason\s*=)\s*"([a-z_]+)"', text):
                stray.append(f"{path.relative_to(ROOT)}: {m.group(1)}")
        self.assertEqual(stray, [])


if __name__ == "__main__":
    unittest.main()
