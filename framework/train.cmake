# libtorch parts of framework/: optimizer, trainer (with the schedule executor).
add_library(trident_train STATIC
  ${CMAKE_CURRENT_LIST_DIR}/trainer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/auto_split.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pipeline_measure.cpp
  ${PROJECT_SOURCE_DIR}/parallel/data_parallel.cpp
  ${PROJECT_SOURCE_DIR}/schedules/executor.cpp)
target_compile_options(trident_train PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(trident_train PUBLIC trident_models trident_parallel trident_schedules trident_data
                      trident_metrics trident_config)
