// A process group through an autograd function's saved_data, which holds
// IValues only: tensor parallelism's mappings, the all-to-all rows and the
// context-parallel attention pass their groups this one way.
#pragma once

#include <cstdint>

namespace c10 {
struct IValue;
}

namespace trident {

struct Group;  // parallel/process_groups.h

// The group's address as an integer, and back. The groups live as long as the
// run's ProcessGroups, longer than any graph that saves one.
int64_t pack_group(const Group* g);
const Group& unpack_group(const c10::IValue& saved);

}  // namespace trident
