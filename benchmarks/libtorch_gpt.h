// The baseline GPT-2 of the training benchmarks, written plainly with
// torch::nn modules (no Trident model or layer code): token + position
// embeddings, pre-LN blocks (fused qkv causal SDPA attention, tanh-GELU MLP),
// final LayerNorm, head tied to the token embedding, cross-entropy loss.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace bench {

struct GptSizes {
  int64_t layers = 4, hidden = 128, heads = 4, ffn = 512, seq = 128;
  int64_t vocab = 50304;  // padded vocabulary, as Trident pads GPT-2's 50257
};

// Pre-LN transformer block: x + attn(ln1(x)), then + mlp(ln2(x)).
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t hidden, int64_t num_heads, int64_t ffn, int64_t /*seq*/)
      : heads(num_heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        qkv(register_module("qkv", torch::nn::Linear(hidden, 3 * hidden))),
        proj(register_module("proj", torch::nn::Linear(hidden, hidden))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        fc(register_module("fc", torch::nn::Linear(hidden, ffn))),
        out(register_module("out", torch::nn::Linear(ffn, hidden))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), s = x.size(1), h = x.size(2), hd = h / heads;
    // (b, s, 3h) -> three (b, heads, s, hd)
    auto parts = qkv(ln1(x)).view({b, s, 3, heads, hd}).permute({2, 0, 3, 1, 4}).unbind(0);
    // libtorch 2.x's fused attention, as a user of 2.x writes it (and as Trident runs it).
    torch::Tensor y = torch::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true)
                          .transpose(1, 2)
                          .reshape({b, s, h});
    torch::Tensor r = x + proj(y);
    return r + out(torch::gelu(fc(ln2(r)), "tanh"));
  }

  int64_t heads;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc, out;
};
TORCH_MODULE(Block);

// Token + position embeddings, blocks, final LayerNorm, head tied to the token embedding.
struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptSizes& o)
      : wte(register_module("wte", torch::nn::Embedding(o.vocab, o.hidden))),
        wpe(register_module("wpe", torch::nn::Embedding(o.seq, o.hidden))),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.hidden})))) {
    for (int64_t l = 0; l < o.layers; ++l)
      blocks.push_back(register_module("block" + std::to_string(l), Block(o.hidden, o.heads, o.ffn, o.seq)));
    // GPT-2 init: N(0, 0.02), output projections scaled by 1/sqrt(2 layers), zero biases.
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      const std::string& name = item.key();
      torch::Tensor& p = item.value();
      if (name.find("ln") != std::string::npos) continue;  // LayerNorm keeps ones/zeros
      const bool out_proj = name.find("proj.weight") != std::string::npos || name.find("out.weight") != std::string::npos;
      if (name.find("bias") != std::string::npos)
        p.zero_();
      else
        p.normal_(0.0, out_proj ? 0.02 / std::sqrt(2.0 * static_cast<double>(o.layers)) : 0.02);
    }
  }

  // ids, targets: (b, s) int64 -> mean token cross-entropy.
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& targets) {
    torch::Tensor x = wte(ids) + wpe->weight.narrow(0, 0, ids.size(1));
    for (auto& blk : blocks) x = blk(x);
    // The padded rows of the vocabulary never occur as targets, so (as in
    // nanoGPT) they are left unmasked: the head's matmul is the same size.
    torch::Tensor logits = torch::nn::functional::linear(ln_f(x), wte->weight);  // (b, s, vocab)
    return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.view(-1));
  }

  torch::nn::Embedding wte, wpe;
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f;
};
TORCH_MODULE(Gpt);

}  // namespace bench
