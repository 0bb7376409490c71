// The pipeline split beyond a list of layer counts, as Megatron-LM states it:
// its layout string (--pipeline-model-parallel-layout, megatron-core's
// PipelineParallelLayerLayout), and its even split that counts the embedding
// and the loss as a layer each (account_for_embedding_in_pipeline_split,
// account_for_loss_in_pipeline_split). Both come down to layers per model
// chunk, the form parallel.pipeline_layers has, so the models see one split.
// Pure C++: config_parallel.cpp checks these keys with the functions below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace trident {

// A layout string expanded: one string per virtual stage, in model order
// (stage i runs on rank i mod pp under the interleaved schedule, as in
// Megatron), each of the characters E (embedding), t (transformer layer),
// L (loss: final norm, head and loss) and m (multi-token prediction).
// Syntax: `|` ends a stage, `,` is cosmetic, `x*N` repeats one character
// and `(...)*N` a group (one level, as Megatron's). Throws
// std::invalid_argument with a one-line message naming the problem.
std::vector<std::string> parse_pipeline_layout(const std::string& text);

// Transformer layers per model chunk of an expanded layout, for `layers`
// layers over pp x chunks_per_rank chunks; throws std::invalid_argument when
// the layout does not describe such a model as Trident runs it (Megatron's
// validate_layer_layout rules, plus: no empty stage, no m).
std::vector<int64_t> layout_chunk_layers(const std::vector<std::string>& stages, int64_t layers, int64_t pp,
                                         int64_t chunks_per_rank);

// Megatron's even split with the embedding and/or the loss counted as a
// layer: every chunk gets (layers + embedding + loss) / chunks, less one on
// the first chunk for the embedding and on the last for the loss. Throws
// std::invalid_argument when that total does not divide evenly.
std::vector<int64_t> accounted_chunk_layers(int64_t layers, int64_t pp, int64_t chunks_per_rank, bool embedding,
                                            bool loss);

// schedule.chunks as check_config_tables() resolved it (NOTE [config tables]);
// throws std::logic_error while it is 0 (defined in config_parallel.cpp).
int64_t chunks_per_rank(const Config& c);

// Layers per model chunk of a checked config, as split_layers takes them: from
// parallel.pipeline_layout, from the account_for_* keys, else
// parallel.pipeline_layers itself ({} uniform, {-1} "auto").
std::vector<int64_t> chunk_layers(const Config& c);

}  // namespace trident
