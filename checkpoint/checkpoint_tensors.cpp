// at::Tensor <-> checkpoint store bytes: see checkpoint_tensors.h.
#include "checkpoint/checkpoint_tensors.h"

#include <ATen/core/grad_mode.h>

#include <cstring>

namespace trident::ckpt {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kDouble: return "F64";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: throw CheckpointError(std::string("no checkpoint dtype for ") + at::toString(t));
  }
}

at::ScalarType scalar_type(const std::string& d) {
  static const std::pair<const char*, at::ScalarType> table[] = {
      {"F32", at::kFloat}, {"F64", at::kDouble}, {"F16", at::kHalf}, {"BF16", at::kBFloat16},
      {"I64", at::kLong},  {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},   {"BOOL", at::kBool}};
  for (const auto& [name, type] : table)
    if (d == name) return type;
  throw CheckpointError("unknown checkpoint dtype " + d);
}

void add_tensor(ShardWriter& w, const std::string& name, const std::vector<int64_t>& full_shape,
                const std::vector<int64_t>& offset, const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  w.add(name, dtype_name(c.scalar_type()), full_shape, offset, c.sizes().vec(), c.data_ptr());
}

void add_tensor_flat(ShardWriter& w, const std::string& name, const std::vector<int64_t>& full_shape,
                     const std::vector<int64_t>& offset, const std::vector<int64_t>& extent, int64_t flat_begin,
                     const at::Tensor& flat) {
  const at::Tensor c = flat.detach().to(at::kCPU).contiguous();
  TORCH_CHECK(c.dim() == 1, "add_tensor_flat: ", name, " must be 1-D, got ", c.sizes());
  w.add_flat(name, dtype_name(c.scalar_type()), full_shape, offset, extent, flat_begin, c.numel(), c.data_ptr());
}

std::vector<int64_t> param_offset(const ParamInfo& info) { return local_offset(info); }

void add_param(ShardWriter& w, const std::string& name, const ParamInfo& info, const at::Tensor& local) {
  add_tensor(w, name, info.full_shape, param_offset(info), local);
}

at::Tensor read_tensor(const Reader& r, const std::string& name, at::ScalarType dtype,
                       const std::vector<int64_t>& full_shape, const std::vector<int64_t>& offset,
                       const std::vector<int64_t>& extent) {
  const std::string bytes = r.read(name, dtype_name(dtype), full_shape, offset, extent);
  at::Tensor t = at::empty(extent, at::TensorOptions().dtype(dtype));
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

void load_param(const Reader& r, const std::string& name, const ParamInfo& info, at::Tensor& local) {
  const std::vector<int64_t> off = param_offset(info), ext = local.sizes().vec();
  std::vector<int64_t> stored = r.full_shape(name);
  at::Tensor value;
  const bool padded_vocab = info.init_valid_rows >= 0 && !stored.empty() && stored.size() == info.full_shape.size() &&
                            stored[0] != info.full_shape[0] && stored[0] >= info.init_valid_rows &&
                            std::equal(stored.begin() + 1, stored.end(), info.full_shape.begin() + 1);
  if (!padded_vocab) {
    if (stored != info.full_shape)
      throw CheckpointError("tensor " + name + " has shape " + shape_text(stored) + " in checkpoint " + r.step_dir() +
                            " but the model's is " + shape_text(info.full_shape));
    value = read_tensor(r, name, local.scalar_type(), info.full_shape, off, ext);
  } else {
    // Rows [off0, off0 + ext0) of the model's padding; the stored tensor has rows [0, stored0).
    value = at::zeros(ext, at::TensorOptions().dtype(local.scalar_type()));
    const int64_t lo = off[0], hi = std::min(off[0] + ext[0], stored[0]);
    if (hi > lo) {
      std::vector<int64_t> o = off, e = ext;
      e[0] = hi - lo;
      value.narrow(0, 0, hi - lo).copy_(read_tensor(r, name, local.scalar_type(), stored, o, e));
    }
  }
  at::NoGradGuard no_grad;
  local.copy_(value);
}

bool stores_param(const ParamInfo& info, int tp_rank) {
  // The routed experts: whichever tp rank holds them (at etp = 1 the tp ranks may hold different
  // experts); the caller keeps one writer per expert-data-parallel group (NOTE [expert grid]).
  return !info.tied_copy && (info.shard_dim >= 0 || info.expert || tp_rank == 0);
}

void save_params(ShardWriter& w, const std::vector<Param>& params, int tp_rank, const std::string& prefix,
                 const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.empty() || tensors.size() == params.size(), "save_params: ", tensors.size(),
              " tensors for ", params.size(), " parameters");
  for (size_t i = 0; i < params.size(); ++i)
    if (stores_param(params[i].info, tp_rank))
      add_param(w, prefix + params[i].info.name, params[i].info, tensors.empty() ? params[i].tensor : tensors[i]);
}

void load_params(const Reader& r, std::vector<Param>& params, const std::string& prefix,
                 std::vector<at::Tensor>* tensors) {
  TORCH_CHECK(!tensors || tensors->size() == params.size(), "load_params: ", tensors ? tensors->size() : 0,
              " tensors for ", params.size(), " parameters");
  for (size_t i = 0; i < params.size(); ++i)
    load_param(r, prefix + params[i].info.name, params[i].info, tensors ? (*tensors)[i] : params[i].tensor);
}

}  // namespace trident::ckpt
