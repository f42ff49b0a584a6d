// Header rewriting shared by every exchange (forwarded and intercepted requests).
#pragma once

#include <boost/beast/http/fields.hpp>

namespace sandgate::proxy {

// Removes hop-by-hop fields, the Proxy-* fields and every field named in Connection (never
// the framing fields).
void stripHopByHop(boost::beast::http::fields& f);

}  // namespace sandgate::proxy
