// Loading, scoring and sampling a whole model on one process: see inference.h.
#include "models/inference.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/checkpoint_tensors.h"
#include "core/model_checks.h"
#include "models/registry.h"

namespace trident {

std::unique_ptr<data::Tokenizer> model_tokenizer(const LoadedModel& m, std::string name, std::string dir) {
  if (name.empty()) name = m.tokenizer;
  if (name.empty()) throw ModelInputError("the model records no tokenizer: give --tokenizer gpt2|byte|hf");
  if (dir.empty() && name == m.tokenizer) dir = m.tokenizer_dir;
  auto tok = data::make_tokenizer(name, dir);
  if (tok->vocab_size() > static_cast<uint32_t>(m.model.vocab_size))
    throw ModelInputError("tokenizer " + name + " has " + std::to_string(tok->vocab_size()) +
                             " tokens but the model's vocabulary has " + std::to_string(m.model.vocab_size));
  return tok;
}

LoadedModel load_model(const std::string& checkpoint, const std::string& hf_dir) {
  if (checkpoint.empty() == hf_dir.empty())
    throw ModelInputError("give exactly one of --checkpoint DIR and --init-from HF_DIR");
  LoadedModel out;
  std::unique_ptr<ckpt::Reader> reader;
  Config cfg;
  if (!checkpoint.empty()) {
    reader = std::make_unique<ckpt::Reader>(checkpoint);
    cfg = parse_config(reader->meta().config_toml, reader->step_dir() + "/manifest.json (config)");
    out.tokenizer = cfg.data.tokenizer;
    out.tokenizer_dir = cfg.data.tokenizer_dir;
  } else {
    const Pretrained pre = read_pretrained_config(hf_dir);
    cfg.model = pre.model;
    out.tokenizer = pre.tokenizer;
    if (pre.tokenizer == "hf") out.tokenizer_dir = hf_dir;
  }
  cfg.model.dropout = 0;  // inference: no dropout (it has no parameters)
  cfg.model.init_from = hf_dir;
  cfg.parallel = ParallelConfig{};  // one rank, the whole model in one stage
  cfg.schedule = ScheduleConfig{};
  cfg.schedule.chunks = 1;
  out.model = cfg.model;
  out.stage = make_model(cfg)->make_stage(0, 1, TpContext{}, /*seed=*/0);
  out.stage->set_training(false);
  if (reader) {
    for (Param& p : out.stage->params()) ckpt::load_param(*reader, p.info.name, p.info, p.tensor);
  } else {
    init_from_pretrained(cfg, {&out.stage->params()});
  }
  out.model.init_from.clear();
  return out;
}

ModelConfig checkpoint_model(const std::string& checkpoint) {
  const ckpt::Reader r(checkpoint);
  return parse_config(r.meta().config_toml, r.step_dir() + "/manifest.json (config)").model;
}

void check_checkpoint_matches(const std::string& checkpoint, const ModelConfig& cfg) {
  const ModelConfig m = checkpoint_model(checkpoint);
  std::string diff;
  auto cmp = [&](const char* key, int64_t a, int64_t b) {
    if (a != b)
      diff += std::string(diff.empty() ? "" : "; ") + key + ": " + std::to_string(a) + " in the checkpoint, " +
              std::to_string(b) + " in the config";
  };
  if (!same_family(m, cfg))
    diff = "model.arch: \"" + m.arch + "\" in the checkpoint, \"" + cfg.arch + "\" in the config";
  cmp("model.layers", m.layers, cfg.layers);
  cmp("model.hidden", m.hidden, cfg.hidden);
  cmp("model.heads", m.heads, cfg.heads);
  cmp("model.kv_heads", m.kv(), cfg.kv());
  cmp("MLP width (model.ffn_hidden)", m.ffn(), cfg.ffn());
  cmp("model.seq_len", m.seq_len, cfg.seq_len);
  cmp("model.vocab_size", m.vocab_size, cfg.vocab_size);
  if (!diff.empty()) throw ModelInputError("checkpoint " + checkpoint + " holds another model: " + diff);
}

EvalResult evaluate(Stage& model, int64_t seq_len, const std::vector<int64_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) throw ModelInputError("the text has " + std::to_string(n) + " token(s); eval needs at least 2");
  at::NoGradGuard no_grad;
  const at::Tensor all = at::tensor(tokens, at::kLong);
  double sum = 0;
  for (int64_t start = 0; start < n - 1; start += seq_len) {
    const int64_t len = std::min(seq_len, n - 1 - start);
    const at::Tensor input = all.narrow(0, start, len).unsqueeze(0), target = all.narrow(0, start + 1, len).unsqueeze(0);
    sum += model.forward(input, target).item<double>() * static_cast<double>(len);
  }
  return {sum / static_cast<double>(n - 1), n - 1};
}

std::vector<int64_t> generate(const Stage& model, int64_t seq_len, const std::vector<int64_t>& prompt,
                              int64_t max_tokens, double temperature, int64_t top_k, uint64_t seed,
                              std::optional<int64_t> stop) {
  if (prompt.empty()) throw ModelInputError("the prompt has no tokens");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw ModelInputError("--temperature " + std::to_string(temperature) + ": expected a finite number >= 0");
  if (top_k < 0) throw ModelInputError("--top-k " + std::to_string(top_k) + ": expected >= 0 (0 = all)");
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<int64_t> seq = prompt, added;
  for (int64_t i = 0; i < max_tokens; ++i) {
    const int64_t ctx = std::min<int64_t>(seq_len, static_cast<int64_t>(seq.size()));
    const std::vector<int64_t> window(seq.end() - ctx, seq.end());
    at::Tensor logits = model.logits(at::tensor(window, at::kLong).unsqueeze(0)).select(0, 0).select(0, ctx - 1);
    int64_t next;
    if (temperature == 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits = logits / temperature;
      if (top_k > 0 && top_k < logits.size(0)) {
        const at::Tensor kth = std::get<0>(logits.topk(top_k)).select(0, top_k - 1);
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
      }
      next = at::multinomial(at::softmax(logits, 0), 1, false, gen).item<int64_t>();
    }
    seq.push_back(next);
    added.push_back(next);
    if (stop && next == *stop) break;
  }
  return added;
}

}  // namespace trident
