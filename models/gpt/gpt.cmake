# models/: the GPT model and the registry that picks a model by name (libtorch).
add_library(trident_models STATIC ${CMAKE_CURRENT_LIST_DIR}/gpt.cpp ${PROJECT_SOURCE_DIR}/models/registry.cpp)
target_compile_options(trident_models PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(trident_models PUBLIC trident_parallel trident_config)
