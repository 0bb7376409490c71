// One table per Llama-decoder family's Hugging Face format (NOTE [HF Llama
// layout] and the notes after it in hf_llama.h): its config.json's
// model_type and architectures, the names of its tensors beyond Llama's, its
// own config.json keys (read and written) and what transformers' router of
// that class holds. hf_llama.cpp reads and writes every family through it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/json.h"
#include "models/llama/hf_llama.h"

namespace trident {

// The HF name of a Trident parameter; `vocab` when its rows are the padded vocabulary.
struct HfMapping {
  std::string hf;
  bool vocab = false;
  bool experts = false;  // hf holds "{e}": one tensor per expert, stacked on dim 0 (NOTE [HF Mixtral layout])
  // NOTE [HF DeepSeek-V3 layout]: rows whose rotary part a file may keep interleaved.
  enum class Rope { kNone, kQueryHeads, kKvDown } rope = Rope::kNone;
};

// A parameter of a layer: Trident's name after "layers.i.", HF's after "model.layers.i.".
struct HfLayerName {
  const char* trident;
  const char* hf;
  bool experts = false;  // hf holds "{e}"
  HfMapping::Rope rope = HfMapping::Rope::kNone;
  bool (*when)(const ModelConfig&) = nullptr;  // where set, the name holds only where this does
};

// The router transformers' class has: what the export refuses to write where it differs.
enum class HfRouter {
  kSoftmaxTopK,         // a softmax over every expert, top-k (renormalised or not); no groups, scaling or bias
  kGroupedSigmoidBias,  // DeepSeek-V3's: sigmoid scores, groups, a scaling factor, the correction bias always
};

struct HfFamily {
  const char* model_type;    // config.json's model_type, which is Trident's model.arch
  const char* architecture;  // config.json's architectures[0]
  std::vector<HfLayerName> names;  // searched before Llama's (the same Trident name: this one)
  HfRouter router = HfRouter::kSoftmaxTopK;
  bool attention_bias_key = false, mlp_bias_key = false;  // the export writes them false
  // The family's own config.json keys, read into hf.model before the keys every family shares, and
  // written after model_type (nullptr: none).
  void (*read)(const json::Value& c, const std::string& cpath, HfLlama& hf) = nullptr;
  void (*write)(json::Value& c, const ModelConfig& cfg) = nullptr;
};

// The format of config.json's model_type (Trident's model.arch), or nullptr.
const HfFamily* find_hf_family(const std::string& model_type);
// The same for a model of a Llama-decoder family; throws std::logic_error for another.
const HfFamily& hf_family(const ModelConfig& m);

// The HF name of Trident parameter `name` of a model `cfg`; throws std::logic_error where it has none.
HfMapping hf_mapping(const std::string& name, const ModelConfig& cfg);
// The HF name of expert e's tensor of an experts mapping.
std::string expert_name(const HfMapping& m, int64_t e);

}  // namespace trident
