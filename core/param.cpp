// Parameter init from (seed, global name): see param.h.
#include "core/param.h"

#include <ATen/CPUGeneratorImpl.h>

namespace trident {

uint64_t stable_hash(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

at::Tensor init_full_tensor(int64_t seed, const ParamInfo& info) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  at::Tensor full;
  if (info.init == "zeros") {
    full = at::zeros(info.full_shape, opts);
  } else if (info.init == "ones") {
    full = at::ones(info.full_shape, opts);
  } else {
    TORCH_CHECK(info.init == "normal", "unknown init '", info.init, "' for ", info.name);
    at::Generator gen = at::detail::createCPUGenerator(stable_hash(info.name, static_cast<uint64_t>(seed)));
    full = at::normal(0.0, info.init_std, info.full_shape, gen, opts);
  }
  if (info.init_valid_rows >= 0 && info.init_valid_rows < full.size(0))
    full.narrow(0, info.init_valid_rows, full.size(0) - info.init_valid_rows).zero_();
  return full;
}

at::Tensor init_shard(int64_t seed, const ParamInfo& info, const std::vector<int64_t>& local_shape) {
  at::Tensor full = init_full_tensor(seed, info);
  at::Tensor t = info.shard_dim < 0
                     ? full
                     : full.narrow(info.shard_dim, info.shard_offset, local_shape.at(info.shard_dim));
  TORCH_CHECK(t.sizes().vec() == local_shape, "shard of ", info.name, " has shape ", t.sizes(),
              " but the layer expects ", at::IntArrayRef(local_shape));
  return t.contiguous().clone().set_requires_grad(true);
}

}  // namespace trident
