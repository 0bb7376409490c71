// Groups of threads over an in-memory store: see thread_group.h.
#include "parallel/thread_group.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "parallel/backend.h"

namespace trident {

c10::intrusive_ptr<c10d::Store> make_thread_store() { return c10::make_intrusive<c10d::HashStore>(); }

Group make_thread_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int rank, int size,
                        std::chrono::milliseconds timeout) {
  Group g;
  g.name = name;
  for (int i = 0; i < size; ++i) g.members.push_back(i);
  g.rank = rank;
  g.timeout = timeout;
  if (size > 1) g.pg = make_gloo(store, rank, size, timeout, "127.0.0.1", "");
  return g;
}

}  // namespace trident
