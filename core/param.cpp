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

std::vector<int64_t> local_offset(const ParamInfo& info) {
  std::vector<int64_t> off(info.full_shape.size(), 0);
  if (info.shard_dim >= 0) off.at(static_cast<size_t>(info.shard_dim)) = info.shard_offset;
  if (info.expert) off.at(0) += info.expert_offset;
  return off;
}

at::Tensor local_slice(const ParamInfo& info, const at::Tensor& full, const std::vector<int64_t>& local_shape) {
  TORCH_CHECK(full.sizes().vec() == info.full_shape && local_shape.size() == info.full_shape.size(), "local_slice: ",
              info.name, " is ", full.sizes(), ", expected ", at::IntArrayRef(info.full_shape));
  const std::vector<int64_t> off = local_offset(info);
  at::Tensor t = full;
  for (size_t d = 0; d < off.size(); ++d)
    if (local_shape[d] != info.full_shape[d]) t = t.narrow(static_cast<int64_t>(d), off[d], local_shape[d]);
  return t;
}

at::Tensor init_shard(int64_t seed, const ParamInfo& info, const std::vector<int64_t>& local_shape) {
  const at::Tensor t = local_slice(info, init_full_tensor(seed, info), local_shape);
  TORCH_CHECK(t.sizes().vec() == local_shape, "shard of ", info.name, " has shape ", t.sizes(),
              " but the layer expects ", at::IntArrayRef(local_shape));
  return t.contiguous().clone().set_requires_grad(true);
}

}  // namespace trident
