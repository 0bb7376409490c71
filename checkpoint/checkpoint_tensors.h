// at::Tensor and Param adapters for the checkpoint store (checkpoint_store.h).
//
// Naming: a parameter is stored under its global name (ParamInfo::name, e.g.
// "layers.3.attn.qkv.weight"), which `trident export` relies on; everything
// else (optimizer state, counters) is the saver's choice of global name.
// Write a tied copy (ParamInfo::tied_copy) or a replica (DP, or TP-replicated
// parameters on tp ranks > 0) from one rank only, or from several with
// bit-identical values: the reader reads identical slices once and rejects
// slices that disagree.
//
// NOTE [saving training state] (the sequence a trainer follows)
//   every rank:  ShardWriter w(cfg.checkpoint.dir, step, rank, world);
//                if (dp_rank == 0) save_params(w, params, tp_rank);
//                optimizer state under "optim.<state>.<param name>": whole local
//                  slices with save_params(w, params, tp_rank, prefix, tensors), or
//                  ZeRO shards with add_tensor_flat(w, name, info.full_shape,
//                  param_offset(info), local_shape, flat_begin, shard);
//                scalars (step, LR position) in Meta::extra or as I64 tensors;
//                per-rank RNG state / data position with w.add_blob(name, bytes);
//                w.set_meta({step, to_toml(cfg), layout, ...}); w.finish();
//   barrier, then rank 0: commit(cfg.checkpoint.dir, step, world, cfg.checkpoint.keep).
//   Loading, any layout: Reader r(dir); load_params(r, params);
//                load_params(r, params, "optim.exp_avg.", &exp_avg_tensors) (then narrow
//                the flattened slice to this rank's ZeRO shard); r.blob(rank, name).
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint_store.h"
#include "core/param.h"

namespace trident::ckpt {

std::string dtype_name(at::ScalarType t);       // "F32", "BF16", "I64", ...
at::ScalarType scalar_type(const std::string& dtype);

// `t` is the box [offset, offset + t.sizes()) of global tensor `name`.
void add_tensor(ShardWriter& w, const std::string& name, const std::vector<int64_t>& full_shape,
                const std::vector<int64_t>& offset, const at::Tensor& t);
// `flat` (1-D) is elements [flat_begin, flat_begin + flat.numel()) of the box
// [offset, offset + extent) in row-major order: a ZeRO shard of a flattened slice.
void add_tensor_flat(ShardWriter& w, const std::string& name, const std::vector<int64_t>& full_shape,
                     const std::vector<int64_t>& offset, const std::vector<int64_t>& extent, int64_t flat_begin,
                     const at::Tensor& flat);

// Where this rank's slice `local` of a parameter starts in the full tensor.
std::vector<int64_t> param_offset(const ParamInfo& info);
// Saves this rank's slice of a parameter (or of a tensor shaped like it, e.g.
// Adam's exp_avg) under `name`.
void add_param(ShardWriter& w, const std::string& name, const ParamInfo& info, const at::Tensor& local);

// A new CPU tensor holding box [offset, offset + extent) of `name`.
at::Tensor read_tensor(const Reader& r, const std::string& name, at::ScalarType dtype,
                       const std::vector<int64_t>& full_shape, const std::vector<int64_t>& offset,
                       const std::vector<int64_t>& extent);
// Copies this rank's slice of `name` into `local` (any device, no autograd).
// A padded vocabulary (info.init_valid_rows >= 0) may be stored with another
// padding (saved under another tp): rows both have are read, the rest zeroed.
// Any other shape difference throws naming the tensor and both shapes.
void load_param(const Reader& r, const std::string& name, const ParamInfo& info, at::Tensor& local);

// ---- a rank's parameters (and tensors shaped like them) ----------------------

// Whether this rank writes `info`'s slice so that every element is stored once:
// not a tied copy (the embedding's entry holds it), not a TP-replicated tensor
// on tp_rank > 0. DP replicas: call the savers on dp rank 0 only (the reader
// would accept identical replicas, at the cost of space).
bool stores_param(const ParamInfo& info, int tp_rank);

// Saves `tensors[i]` (shaped like params[i]'s local slice: the parameter itself,
// or e.g. its Adam exp_avg) under prefix + params[i].info.name, for every
// parameter stores_param() selects. With tensors empty, saves the parameters.
void save_params(ShardWriter& w, const std::vector<Param>& params, int tp_rank, const std::string& prefix = "",
                 const std::vector<at::Tensor>& tensors = {});
// Fills each params[i] (or tensors[i] when given) from prefix + name via load_param.
void load_params(const Reader& r, std::vector<Param>& params, const std::string& prefix = "",
                 std::vector<at::Tensor>* tensors = nullptr);

}  // namespace trident::ckpt
