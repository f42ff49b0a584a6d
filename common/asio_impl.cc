// The one translation unit that compiles Asio, Asio-SSL and Beast (separate compilation):
// every other file includes their headers only, so each builds in seconds, not minutes.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
