"""Shared by the `sandgate run` tests (tests/sandbox/): telling a host that refuses
namespaces from a real failure, and running a client in the sandbox that ignores the proxy
variables (so that only transparent capture can carry it)."""

# A shell prefix: the command runs without HTTP(S)_PROXY in either case.
NO_PROXY_ENV = "env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy "


def namespaces_refused(stderr):
    """Whether `sandgate run` failed (status 125) because the kernel refused the namespaces, id
    maps or capture routes it needs: the caller skips with this stderr as the reason."""
    s = stderr.lower()
    return ("operation not permitted" in s or "permission denied" in s) and any(
        w in s for w in ("unshare", "clone", "namespace", "uid_map", "setgroups", "rtnetlink"))
