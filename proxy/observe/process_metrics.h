// The standard process_* metrics of the Prometheus client libraries (resident and virtual
// memory, CPU seconds, open and maximum descriptors, start time, threads), read from
// /proc/self when a scrape asks for them.
#pragma once

#include <prometheus/metric_family.h>

#include <vector>

namespace sandgate::proxy {

// Appends the process_* families to `out`. A value /proc does not give (another kernel, a
// file that cannot be read) is left out rather than reported as 0.
void appendProcessMetrics(std::vector<prometheus::MetricFamily>& out);

}  // namespace sandgate::proxy
