# models/: the GPT model, its HF interop and inference, and the registry that
# picks a model by name (libtorch).
add_library(trident_models STATIC ${CMAKE_CURRENT_LIST_DIR}/gpt.cpp ${CMAKE_CURRENT_LIST_DIR}/hf_gpt2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/inference.cpp ${PROJECT_SOURCE_DIR}/models/registry.cpp
  ${PROJECT_SOURCE_DIR}/models/attention.cpp)
target_compile_options(trident_models PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(trident_models PUBLIC trident_parallel trident_config trident_checkpoint_torch)
