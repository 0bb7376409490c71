// A pipeline of threads: see thread_group.h.
#include "parallel/thread_group.h"

#include <exception>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "parallel/backend.h"

namespace trident {

std::vector<std::string> run_thread_group(const std::string& name, int size, std::chrono::milliseconds timeout,
                                          const std::function<void(Group&)>& body) {
  const c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        at::set_num_threads(1);
        Group g;
        g.name = name;
        for (int i = 0; i < size; ++i) g.members.push_back(i);
        g.rank = rank;
        g.timeout = timeout;
        if (size > 1) g.pg = make_gloo(store, rank, size, timeout, "127.0.0.1", "");
        body(g);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace trident
