// What a snapshot tells the metrics about budgets and LLM calls: the budget gauges of its
// configured tasks (read at each scrape from its budget counter without I/O: budget::Counter::
// peek) and the model names that may be labels. Called on every load and reload.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "proxy/observe/metrics.h"
#include "proxy/state/snapshot.h"

namespace sandgate::proxy {

// The gauges of `snap`'s configured tasks at Unix time `now`: for each of a task's budgets, each
// metric it limits, what the current window has used (as the snapshot's counter knows it
// without asking a shared store) and the limit. Ad-hoc tasks (task tokens naming no configured
// task) are not shown: their names come from the tokens, so the series would be unbounded.
std::vector<BudgetGauge> budgetGauges(const Snapshot& snap, int64_t now);

// The model names the config lists in an `llm:` rule's `models` (policies and global.allow) or
// prices in `llm.prices`: the only model labels of the sandgate_llm_* series.
std::set<std::string, std::less<>> llmModelLabels(const config::Config& cfg);

// Points `metrics` at `snap` (its gauges and model labels); the snapshot is kept by the
// metrics' source until the next call.
void observeSnapshot(Metrics& metrics, std::shared_ptr<const Snapshot> snap);

}  // namespace sandgate::proxy
