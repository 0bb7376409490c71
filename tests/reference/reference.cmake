# tests/reference/: Trident against libraries outside it (an independent check: the library that defines a
# format or model, PyTorch for training and pipelining),
# CTest label `reference`. Python scripts run with TRIDENT_PYTHON (the project's
# .venv from scripts/setup.sh: torch, transformers, safetensors, numpy,
# tensorboard, megatron-core) against
# the built `trident`.
#   ReferenceTrainingTiny   gpt-tiny, 20 steps, vs transformers' GPT-2 + torch AdamW in fp32 and fp64; bf16 vs
#                           torch.autocast; ReferenceTrainingTinyLayouts (slow): the same contract for tp2,
#                           pp2 interleaved and tp2 x pp2 x dp2 ZeRO-1 zb-v (NOTE [reference layouts])
#   ReferenceTrainingBrown  gpt-small-brown (GPT-2 BPE on Brown), 12 steps, the same
#   HfRoundTrip             trident export -> from_pretrained, generate(), save_pretrained -> --init-from
#   HfLlama                 the same for Llama (LlamaForCausalLM: GQA, MQA, llama3 rope, tied and untied, sharded)
#   ReferenceTrainingLlama  llama-tiny, 20 steps, vs LlamaForCausalLM + torch AdamW; its layouts: ...Layouts (slow)
#   HfMoe                   save_pretrained Mixtral/Qwen2Moe/Qwen3Moe/DeepseekV3ForCausalLM -> --init-from (eval, logits,
#                           generate, 4 steps, refusals)
#   ReferenceTraining{Mixtral,Qwen2Moe,Qwen3Moe,DeepseekV3}  their tiny presets, 20 steps (layouts: ...Layouts), vs transformers +
#                           torch AdamW, the balancing losses written from their definitions
#   ReferenceTrainingMixtralPooled  mixtral-tiny with transformers' own pooled balancing loss, the model's aux_loss
#   ReferenceDocuments      packed documents (data.reset_attention_mask, reset_position_ids), 20 steps of gpt-tiny and
#                           an imported Llama and Mixtral vs transformers running each document on its own
#   ReferenceSft            configs/llama-sft-tiny.toml from a transformers-made Llama, 20 steps, vs transformers with
#                           labels -100 on the prompts (completion_only_loss, eod_mask_loss); dp2 with uneven counts
#   TensorBoardEvents       logging.tensorboard's event file read by the tensorboard package
#   ReferenceTrainingBlend  gpt-tiny on a 3:1 blend of two Megatron datasets cut by data.split, 20 steps, the same
#                           (data.order = "stream")
#   ReferenceTrainingMegatron  the same on a three-way blend in Megatron's order, the reference reading
#                           megatron-core's BlendedDataset through Megatron's sampler; also at dp = 2
#   MegatronIndexedData     data.format = "megatron" on files megatron-core wrote, against a token file;
#                           files `trident data prepare` wrote (JSONL, gpt2 and hf) read by megatron-core's
#                           IndexedDataset with tokenizers' ids; data.split's shares against megatron-core's
#   MegatronSamples         `trident data batches` with data.order = "megatron" vs megatron-core's GPTDataset and
#                           BlendedDataset (BlendedMegatronDatasetBuilder), sample for sample; needs no model
#   MegatronDocuments       the same with data.reset_position_ids, reset_attention_mask and eod_mask_loss: positions,
#                           loss masks and attention masks (from cu_seqlens) vs megatron-core's GPTDataset's
#   HfTokenizer             --tokenizer hf ids vs tokenizers' encode (trained, GPT-2, Llama 3, Qwen2
#                           tokenizer.json); needs only `tokenizers`, so it is also in the no-libtorch build
#   MegatronLayout          parallel.pipeline_layout strings and the account_for_* split vs megatron-core's
#                           PipelineParallelLayerLayout and get_num_layers_to_build; needs no model
#   ZeroBubblePaper         the zero-bubble paper's Table 5 bubble rates (1F1B, 1F1B-I, ZB-H1, ZB-H2) from its
#                           Table 9 costs by the simulator (benchmarks/zero_bubble_paper.py); no libtorch
set(_ref ${CMAKE_CURRENT_SOURCE_DIR}/reference)
set(_ref_work ${CMAKE_CURRENT_BINARY_DIR}/reference)
# COST on the longer tests (about their seconds two at a time, measured in a
# CI run): CTest starts them first, so that none is left running alone at the end.
add_test(NAME HfTokenizer
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_hf_tokenizer.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/hf-tokenizer)
set_tests_properties(HfTokenizer PROPERTIES LABELS reference TIMEOUT 300 COST 30)
# The zero-bubble paper's Table 5 bubble rates from its Table 9 costs, by `trident
# schedule --format summary` (tolerances in the script); needs no libtorch, no packages.
add_test(NAME ZeroBubblePaper
         COMMAND ${TRIDENT_PYTHON} ${PROJECT_SOURCE_DIR}/benchmarks/zero_bubble_paper.py
                 --trident ${PROJECT_BINARY_DIR}/trident --check)
set_tests_properties(ZeroBubblePaper PROPERTIES LABELS reference TIMEOUT 120)
add_test(NAME MegatronSamples
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_megatron_samples.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/megatron-samples)
set_tests_properties(MegatronSamples PROPERTIES LABELS reference TIMEOUT 300)
add_test(NAME MegatronDocuments
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_megatron_documents.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/megatron-documents)
set_tests_properties(MegatronDocuments PROPERTIES LABELS reference TIMEOUT 300)
# parallel.pipeline_layout and the account_for_* split against megatron-core's parser and
# get_num_layers_to_build (the script prints megatron-core's answers; the test computes Trident's).
add_executable(test_megatron_layout ${_ref}/test_megatron_layout.cpp)
target_compile_options(test_megatron_layout PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(test_megatron_layout PRIVATE trident_config GTest::gtest_main)
target_compile_definitions(test_megatron_layout PRIVATE TRIDENT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                           TRIDENT_BINARY_DIR="${PROJECT_BINARY_DIR}" TRIDENT_PYTHON="${TRIDENT_PYTHON}")
add_test(NAME MegatronLayout COMMAND test_megatron_layout)
set_tests_properties(MegatronLayout PROPERTIES LABELS reference TIMEOUT 120)
if(NOT TRIDENT_WITH_TORCH)
  return()  # the tests below train or load models: libtorch
endif()
# The MoE layer (router, sorted-token experts, shared experts, the pooled aux loss)
# against transformers' Mixtral, Qwen2-MoE and DeepSeek-V3 blocks (moe_reference.py).
add_executable(test_moe_reference ${_ref}/test_moe_reference.cpp)
target_compile_options(test_moe_reference PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(test_moe_reference PRIVATE trident_model_common trident_checkpoint GTest::gtest_main)
target_compile_definitions(test_moe_reference PRIVATE TRIDENT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                           TRIDENT_PYTHON="${TRIDENT_PYTHON}")
add_test(NAME MoeReference COMMAND test_moe_reference)
set_tests_properties(MoeReference PROPERTIES LABELS reference TIMEOUT 180)
# NOTE [reference layouts]
# A case's single process against the reference, and its parallel layouts against the same
# reference (--layouts-only, reading the runs the first test left in its work folder), are two
# tests: NAME (label reference) and NAMELayouts (labels reference and slow), the first a CTest
# fixture of the second, so the second always runs after it. A layout's own bug is the
# regression matrix's to catch (tests/regression: every layout and schedule against Trident's
# single process); the layouts here check that the chain closes end to end, which only a
# full run needs (scripts/test.sh --quick leaves the slow label out).
function(trident_reference_training name case work cost)
  set(_cmd ${TRIDENT_PYTHON} ${_ref}/test_reference_training.py --trident ${PROJECT_BINARY_DIR}/trident
           --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/${work} --case ${case} ${ARGN})
  add_test(NAME ${name} COMMAND ${_cmd})
  set_tests_properties(${name} PROPERTIES LABELS reference TIMEOUT 600 COST ${cost} FIXTURES_SETUP ${name})
  add_test(NAME ${name}Layouts COMMAND ${_cmd} --layouts-only)
  set_tests_properties(${name}Layouts PROPERTIES LABELS "reference;slow" TIMEOUT 600 COST ${cost}
                                                 FIXTURES_REQUIRED ${name})
endfunction()
# The layouts of gpt-tiny: tp2, pp2 interleaved, tp2 x pp2 x dp2 ZeRO-1 under zb-v. COST: about
# the seconds a test takes two at a time, so that CTest starts the long ones first.
trident_reference_training(ReferenceTrainingTiny tiny tiny 40)
add_test(NAME ReferenceTrainingBrown
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_reference_training.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/brown --case brown)
set_tests_properties(ReferenceTrainingBrown PROPERTIES LABELS "reference;slow" TIMEOUT 900 COST 90)
# A blend of two Megatron datasets (data.paths, data.split) read by the reference through
# megatron-core and trident_data.Blend: the same per-step contract.
add_test(NAME ReferenceTrainingBlend
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_reference_training.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/blend --case blend)
set_tests_properties(ReferenceTrainingBlend PROPERTIES LABELS reference TIMEOUT 900 COST 25)
# Megatron's sample order (data.order = "megatron") read by the reference from megatron-core's own
# datasets, ranks served as Megatron's pretraining sampler serves them: dp = 1 and dp = 2.
add_test(NAME ReferenceTrainingMegatron
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_reference_training.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/megatron-order --case megatron)
set_tests_properties(ReferenceTrainingMegatron PROPERTIES LABELS reference TIMEOUT 900 COST 25)
add_test(NAME HfRoundTrip
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_hf_roundtrip.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/hf-roundtrip)
set_tests_properties(HfRoundTrip PROPERTIES LABELS reference TIMEOUT 600 COST 70)
add_test(NAME HfLlama
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_hf_llama.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/hf-llama)
set_tests_properties(HfLlama PROPERTIES LABELS reference TIMEOUT 600 COST 55)
trident_reference_training(ReferenceTrainingLlama llama-tiny llama 30)
add_test(NAME HfMoe
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_hf_moe.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/hf-moe)
set_tests_properties(HfMoe PROPERTIES LABELS reference TIMEOUT 300 COST 40)
foreach(_moe Mixtral Qwen2Moe Qwen3Moe)
  string(TOLOWER "${_moe}" _case)
  string(REPLACE "moe" "-moe" _case "${_case}")
  trident_reference_training(ReferenceTraining${_moe} ${_case}-tiny ${_case} 20)
endforeach()
# transformers' own balancing loss (NOTE [pooled aux loss]): the reference's is the model's aux_loss.
# Seed 2: under the preset's seed a token of step 2 has its second and third softmax scores 4e-9
# apart (measured in fp64), below fp32's rounding, so Trident and torch may route it differently
# (a router is discontinuous: test_reference_training.py's MOE_CASES note); seed 2's steps have no
# such token (a step that had one would fail here).
trident_reference_training(ReferenceTrainingMixtralPooled mixtral-tiny mixtral-pooled 20 --pooled --seed 2)
trident_reference_training(ReferenceTrainingDeepseekV3 deepseek-v3-tiny deepseek-v3 20)
# Packed documents: each document through transformers' model on its own (reference_train.py's
# NOTE [reference documents]), under the four settings of the two reset keys; Llama also at tp2 + SP.
add_test(NAME ReferenceDocuments
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_documents_reference.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/documents)
set_tests_properties(ReferenceDocuments PROPERTIES LABELS "reference;slow" TIMEOUT 1200 COST 250)
# Fine-tuning on completions (configs/llama-sft-tiny.toml from a transformers-made Llama): the losses of
# transformers with labels -100 on the prompts (NOTE [reference loss masks]); dp2 with uneven counts.
add_test(NAME ReferenceSft
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_sft_reference.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/sft)
set_tests_properties(ReferenceSft PROPERTIES LABELS reference TIMEOUT 600 COST 40)
add_test(NAME TensorBoardEvents
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_tensorboard.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/tensorboard)
set_tests_properties(TensorBoardEvents PROPERTIES LABELS reference TIMEOUT 300)
add_test(NAME MegatronIndexedData
         COMMAND ${TRIDENT_PYTHON} ${_ref}/test_megatron_data.py --trident ${PROJECT_BINARY_DIR}/trident
                 --source-dir ${PROJECT_SOURCE_DIR} --work ${_ref_work}/megatron)
set_tests_properties(MegatronIndexedData PROPERTIES LABELS reference TIMEOUT 300 COST 12)
