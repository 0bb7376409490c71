// Trident's config tables (NOTE [config tables] in core/config.h): the model
// families of models/families.h and the schedule kinds of schedules/generators.h,
// handed to the foundation's check_config_tables(). Pure C++ (header only): the
// commands, the trainer and the tests use the same tables.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "models/families.h"
#include "schedules/generators.h"

namespace trident {

inline ConfigTables config_tables() {
  ConfigTables t;
  t.families = model_families();
  for (const sched::KindChunks& k : sched::kind_chunks()) t.kinds.push_back({k.kind, k.chunks});
  return t;
}

// load_config (core/config.h), then the rules the tables hold: a config every
// command may use (schedule.chunks resolved).
inline Config load_checked_config(const std::string& path, const std::vector<std::string>& overrides = {},
                                  ConfigUse use = ConfigUse::kRun) {
  Config c = load_config(path, overrides, use);
  check_config_tables(c, config_tables());
  return c;
}

}  // namespace trident
