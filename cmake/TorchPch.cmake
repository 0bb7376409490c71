# NOTE [torch precompiled header]
# About half of a libtorch unit's compile time is parsing libtorch's headers
# (tests/torch_unit/test_llama.cpp at -O3: 12.3 s, 6.5 s with them
# precompiled). One precompiled header of the ATen and autograd headers is
# built once (trident_torch_pch) and reused by every target that links
# libtorch, directly or through our libraries; targets without libtorch (the
# pure layers) never see it. Where the compiler finds the header unusable for
# a unit (other flags), it reads the text instead: the same code, only slower.
# ccache caches units that use it only with the sloppiness set below.

# Whether `target` links libtorch, through the libraries it links (recursively): its own
# LINK_LIBRARIES and, for the libraries it reaches, what they pass on (INTERFACE_LINK_LIBRARIES,
# where a static library's private ones read $<LINK_ONLY:name>). libtorch is reached as the
# interface library TRIDENT_TORCH_LIBRARIES names (trident_torch_cpu) or as torch's own targets.
function(_trident_links_torch target out)
  get_property(seen GLOBAL PROPERTY _trident_torch_seen_${target} SET)
  if(seen)
    get_property(r GLOBAL PROPERTY _trident_torch_seen_${target})
    set(${out} ${r} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY _trident_torch_seen_${target} FALSE)  # cycles end here
  set(r FALSE)
  get_target_property(type ${target} TYPE)
  set(libs "")
  if(NOT type STREQUAL "INTERFACE_LIBRARY" OR CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
    get_target_property(own ${target} LINK_LIBRARIES)
    if(own)
      list(APPEND libs ${own})
    endif()
  endif()
  get_target_property(passed ${target} INTERFACE_LINK_LIBRARIES)
  if(passed)
    list(APPEND libs ${passed})
  endif()
  foreach(lib IN LISTS libs)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
    if(lib IN_LIST TRIDENT_TORCH_LIBRARIES OR lib MATCHES "^(torch|torch_library|torch_cpu|torch_cpu_library)$"
       OR lib MATCHES "libtorch(_cpu)?\\.so$")
      set(r TRUE)
    elseif(TARGET ${lib} AND lib MATCHES "^trident")
      _trident_links_torch(${lib} sub)
      set(r ${sub})
    endif()
    if(r)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY _trident_torch_seen_${target} ${r})
  set(${out} ${r} PARENT_SCOPE)
endfunction()

function(_trident_targets_in dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _trident_targets_in(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Call after every target is defined.
function(trident_use_torch_pch)
  add_library(trident_torch_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp)
  target_link_libraries(trident_torch_pch PRIVATE ${TRIDENT_TORCH_LIBRARIES})
  target_precompile_headers(trident_torch_pch PRIVATE <ATen/ATen.h> <torch/csrc/autograd/autograd.h>
                            <torch/csrc/autograd/custom_function.h>)
  _trident_targets_in(${PROJECT_SOURCE_DIR} targets)
  # Which targets take the header, and which link libtorch without it (a shared library's
  # units are compiled with -fPIC, which the static header is not): the file the test
  # TorchPrecompiledHeader (tests/linkage/check_pch.py) holds the build's units to.
  set(with "")
  set(without "")
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(t STREQUAL "trident_torch_pch" OR NOT (type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|EXECUTABLE)$"))
      continue()
    endif()
    _trident_links_torch(${t} uses)
    if(uses AND type STREQUAL "SHARED_LIBRARY")
      list(APPEND without ${t})
    elseif(uses)
      target_precompile_headers(${t} REUSE_FROM trident_torch_pch)
      list(APPEND with ${t})
    endif()
  endforeach()
  list(LENGTH with n)
  string(REPLACE ";" " " with_line "${with}")
  string(REPLACE ";" " " without_line "${without}")
  file(WRITE ${PROJECT_BINARY_DIR}/torch_pch_targets.txt "with: ${with_line}\nwithout: ${without_line}\n")
  message(STATUS "libtorch's headers precompiled once for ${n} targets (NOTE [torch precompiled header])")
endfunction()
