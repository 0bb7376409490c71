#!/usr/bin/env python3
"""megatron-core's answers for test_megatron_layout.cpp (CTest `MegatronLayout`).

Reads cases from the file named by argv[1], one per line, tab-separated:
  layout  STRING  PP  LAYERS   -> megatron-core's PipelineParallelLayerLayout of STRING
                                  over PP ranks, validated for LAYERS transformer layers
  account LAYERS  PP  VP  EMB  LOSS
                               -> get_num_layers_to_build per model chunk with
                                  account_for_{embedding,loss}_in_pipeline_split
and prints one line per case:
  layout:  "parse-error" | "invalid STAGES" | "ok STAGES", STAGES the layout's
           virtual stages in model order (vpp-major, as Megatron flattens it)
           joined by '|', each stage's layers as E/t/L/m characters
  account: "error" | "ok N0,N1,..." transformer layers per model chunk in model order
"""
import sys
from types import SimpleNamespace

from megatron.core.transformer.enums import LayerType
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
from megatron.core.transformer.transformer_block import get_num_layers_to_build

CHAR = {LayerType.embedding: "E", LayerType.decoder: "t", LayerType.loss: "L", LayerType.mtp: "m"}


def layout_case(text, pp, layers):
    try:
        layout = PipelineParallelLayerLayout(text, pp)
    except (AssertionError, ValueError, KeyError) as e:
        return "parse-error"
    vpp = layout.virtual_pipeline_model_parallel_size
    stages = ["".join(CHAR[t] for t in layout.layout[r][v]) for v in range(vpp) for r in range(pp)]
    mtp = layout.flatten_layout.count(LayerType.mtp)
    try:
        layout.validate_layer_layout(num_layers=layers, mtp_num_layers=mtp if mtp else None)
    except (AssertionError, NotImplementedError):
        return "invalid " + "|".join(stages)
    return "ok " + "|".join(stages)


def account_case(layers, pp, vp, emb, loss):
    config = SimpleNamespace(
        pipeline_model_parallel_layout=None, num_layers_in_first_pipeline_stage=None,
        num_layers_in_last_pipeline_stage=None, account_for_embedding_in_pipeline_split=emb,
        account_for_loss_in_pipeline_split=loss, num_layers=layers, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp if vp > 1 else None)
    try:
        counts = [get_num_layers_to_build(config, vp_stage=v if vp > 1 else None, pp_rank=r)
                  for v in range(vp) for r in range(pp)]
    except AssertionError:
        return "error"
    return "ok " + ",".join(str(n) for n in counts)


def main():
    with open(sys.argv[1]) as f:
        for line in f.read().splitlines():
            kind, *args = line.split("\t")
            if kind == "layout":
                print(layout_case(args[0], int(args[1]), int(args[2])))
            else:
                layers, pp, vp, emb, loss = (int(a) for a in args)
                print(account_case(layers, pp, vp, bool(emb), bool(loss)))


if __name__ == "__main__":
    main()
