// Names are resolved as given: a name a policy allowed is the only name ever looked up for it.
//
// glibc's stub resolver retries a name that does not resolve with the host's search domains
// (resolv.conf's `search` or `domain`, else the domain part of the hostname), and with
// `ndots` above the name's dots it even tries those first: `name.test` can be dialled as
// `name.test.corp.example`, an address vetted for a name the policy never allowed.
// LOCALDOMAIN replaces the search list for the whole process; set to a blank it leaves only the
// name itself, so `ndots` no longer matters either. HOSTALIASES (aliases for single-label
// names, read from a file the environment names) is dropped for the same reason.
//
// This covers getaddrinfo's `dns` source. A host whose nsswitch.conf uses systemd-resolved's
// `resolve` module has resolved apply its own search domains, to single-label names only
// (README, "Names and DNS").
#pragma once

namespace sandgate::absolute_names {

// Sets LOCALDOMAIN to a blank and removes HOSTALIASES. Changes the environment: call it at the
// top of main, before any thread starts. The first call keeps the environment as it was, for
// startEnvironment(); later calls change nothing.
void resolveNamesAsGiven();

// The environment as the process started, null-terminated, for the programs it runs (exec
// credential sources), which resolve as their operator's system does. environ before
// resolveNamesAsGiven() was called.
char* const* startEnvironment();

}  // namespace sandgate::absolute_names
