// The threads that wait on Redis (see waiting_threads.h).
#include "proxy/state/redis/waiting_threads.h"

namespace sandgate::proxy::redis {

boost::asio::thread_pool& waitingThreads() {
  static boost::asio::thread_pool pool(kWaitingThreads);
  return pool;
}

}  // namespace sandgate::proxy::redis
