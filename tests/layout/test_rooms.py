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
         "upstream", "exchange", "h2", "intercept", "ssh", "tunnel", "forward", "session", "admin",
         "server"]

# What each library may include from the others (common/ is open to all).
LIBRARIES = {
    "common": set(),
    "config": set(),
    "budget": {"config"},
    "policy": {"config"},
    "broker": {"config", "policy"},
    "capture": {"policy"},
    "ca": set(),
    "proxy": {"config", "budget", "policy", "broker", "capture", "ca"},
    "sandbox": {"config", "policy"},
    "run": {"config", "budget", "policy", "broker", "capture", "ca", "proxy", "sandbox", "learn"},
    "learn": {"config", "policy"},
    "cli": {"config", "budget", "policy", "broker", "capture", "ca", "proxy", "sandbox", "run",
            "learn"},
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
        for lib in ("policy", "config", "sandbox", "budget", "learn"):
            for path in sources(lib):
                text = path.read_text(encoding="utf-8")
                self.assertNotRegex(text, r"#include <boost/(asio|beast)",
                                    f"{path.relative_to(ROOT)}: {lib}/ does no I/O with Asio")


def refusals_section():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme[readme.index("## Refusals"):readme.index("## Metrics")]


def catalogue_rows(catalogue, namespace):
    """(constant, status, meaning) of each `{ns::kX, status, "..." "..."}` entry of `namespace`."""
    out = []
    pattern = r'\{' + re.escape(namespace) + r'::(k\w+),\s*(\d+),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\}'
    for const, status, literals in re.findall(pattern, catalogue):
        meaning = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', literals)).replace("\\\\", "\\")
        out.append((const, int(status), meaning))
    return out


class ReasonCatalogue(unittest.TestCase):
    """proxy/client/reasons.h: every token is in the catalogue, and README.md lists it."""

    def test_every_request_reason_is_catalogued_and_documented(self):
        header = (ROOT / "proxy" / "client" / "reasons.h").read_text(encoding="utf-8")
        consts = dict(re.findall(r'inline constexpr std::string_view (k\w+) = "([^"]+)";', header))
        catalogue = header[header.index("kRequestReasons[]"):]
        listed = re.findall(r"\{reason::(k\w+),", catalogue)
        self.assertEqual(sorted(listed), sorted(consts), "each reason:: token has one entry")
        self.assertEqual(len(set(consts.values())), len(consts), "tokens are unique")
        table = refusals_section()
        for const, status, meaning in catalogue_rows(catalogue, "reason"):
            row = f"| `{consts[const]}` | {status or 'audit only'} | {meaning} |"
            self.assertTrue(row in table, f"README.md's Refusals table lacks: {row}")

    def test_every_other_layers_reason_has_one_status_and_is_documented(self):
        # The policy's, the broker's and task tokens' tokens reach clients too: each is in
        # decision_reasons.h with one status, and README.md lists exactly that row.
        layers = {"policy::reason": ROOT / "policy" / "engine.h",
                  "broker::reason": ROOT / "broker" / "store.h",
                  "token_reason": ROOT / "proxy" / "identity" / "task_token.h"}
        header = (ROOT / "proxy" / "client" / "decision_reasons.h").read_text(encoding="utf-8")
        catalogue = header[header.index("kDecisionReasons[]"):]
        table = refusals_section()
        seen = {}
        for ns, path in layers.items():
            text = path.read_text(encoding="utf-8")
            block = text[text.index("namespace " + ns.split("::")[-1] + " {"):]
            block = block[:block.index("}  // namespace")]
            consts = dict(re.findall(r'inline constexpr std::string_view (k\w+) = "([^"]+)";',
                                     block))
            consts.pop("kAllowed", None)  # not a refusal
            consts.pop("kApproved", None)  # nor is an operator's approval (on_unknown: ask)
            rows = {c: (s, m) for c, s, m in catalogue_rows(catalogue, ns)}
            self.assertEqual(sorted(rows), sorted(consts), f"every {ns} token has one entry")
            for const, (status, meaning) in rows.items():
                token = consts[const]
                self.assertNotIn(token, seen, f"{token} is catalogued once")
                seen[token] = status
                row = f"| `{token}` | {status} | {meaning} |"
                self.assertTrue(row in table, f"README.md's Refusals lacks: {row}")
        request = (ROOT / "proxy" / "client" / "reasons.h").read_text(encoding="utf-8")
        clash = sorted(set(seen) & set(re.findall(r'= "([a-z_]+)";', request)))
        self.assertEqual(clash, [], "a token means one thing, with one status")

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
