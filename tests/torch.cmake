# libtorch tests:
#  torch_unit/test_*.cpp  single-process GoogleTest executables (model, optimizer, init, ...)
#  multiproc/mp_*.cpp     worker programs run on several ranks by `trident launch`;
#                         multiproc/test_*.cpp are the GoogleTest drivers that launch them
#  regression/test_*.cpp  drivers comparing losses of layouts against the reference
# Tests that time one measurement against another (the planner's calibration
# predicting a collective it then times): run alone, so that a neighbour's load
# does not land on one side only (the suite runs two at a time on two cores).
set(TRIDENT_RUN_ALONE test_plan_calibrate)
# NOTE [drivers without libtorch]
# A test that only runs `trident` and reads what it wrote (the regression and
# multiproc drivers, the CLI tests) links the pure libraries, not libtorch: a
# GoogleTest executable linked with libtorch spends 0.9 s of start-up (the
# loader and libtorch's static registrations) in every one of its tests, each
# of which CTest runs as a process of its own, and these are about 270 tests.
# Without libtorch's include directories, such a test cannot include a torch
# header, and its link fails on any symbol of a torch library.
set(TRIDENT_TORCHLESS_TORCH_UNIT test_checkpoint_cli test_host_reads test_train_errors test_plan_profile)
# NOTE [one process per torch unit executable]
# The unit tests that do need libtorch (tensors, models, the executor on
# threads) run as one CTest test per executable, all of its cases in one
# process (CTest's name is the executable's, e.g. test_model; a failing case
# is named in its output): their 122 cases as processes of their own spent
# about 60 s of start-up, and the 16 executables run whole in 32 s.
function(trident_torch_test src label)
  get_filename_component(name ${src} NAME_WE)
  set(alone)
  if(name IN_LIST TRIDENT_RUN_ALONE)
    set(alone RUN_SERIAL TRUE)
  endif()
  add_executable(${name} ${src})
  target_compile_options(${name} PRIVATE ${TRIDENT_WARNINGS})
  if(label STREQUAL "regression" OR label STREQUAL "multiproc" OR name IN_LIST TRIDENT_TORCHLESS_TORCH_UNIT)
    target_link_libraries(${name} PRIVATE ${TRIDENT_PURE_LIBS} GTest::gtest_main)
  else()
    target_link_libraries(${name} PRIVATE trident_train GTest::gtest_main)
  endif()
  trident_test_paths(${name} ${src})  # tests/CMakeLists.txt
  add_dependencies(${name} trident)
  if(label STREQUAL "unit" AND NOT name IN_LIST TRIDENT_TORCHLESS_TORCH_UNIT)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS ${label} ${alone})
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${label} ${alone})
  endif()
endfunction()

file(GLOB TRIDENT_TORCH_UNIT CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/torch_unit/test_*.cpp)
foreach(src ${TRIDENT_TORCH_UNIT})
  trident_torch_test(${src} unit)
endforeach()

file(GLOB TRIDENT_MP_WORKERS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/mp_*.cpp)
foreach(src ${TRIDENT_MP_WORKERS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_compile_options(${name} PRIVATE ${TRIDENT_WARNINGS})
  target_link_libraries(${name} PRIVATE trident_train)
  # Workers land next to `trident` so drivers find them at TRIDENT_BINARY_DIR.
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
endforeach()

file(GLOB TRIDENT_MP_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/test_*.cpp)
foreach(src ${TRIDENT_MP_TESTS})
  trident_torch_test(${src} multiproc)
endforeach()

file(GLOB TRIDENT_REGRESSION_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/regression/test_*.cpp)
foreach(src ${TRIDENT_REGRESSION_TESTS})
  trident_torch_test(${src} regression)
endforeach()

# The calibration and profile tests read the files they wrote with the planner's parser.
target_link_libraries(test_plan_calibrate PRIVATE trident_planner)
target_link_libraries(test_plan_profile PRIVATE trident_planner)
