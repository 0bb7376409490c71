# NOTE [torch precompiled header]
# About half of a libtorch unit's compile time is parsing libtorch's headers
# (tests/torch_unit/test_llama.cpp at -O3: 12.3 s, 6.5 s with them
# precompiled). One precompiled header of the ATen and autograd headers is
# built once (trident_torch_pch) and reused by every target that links
# libtorch, directly or through our libraries; targets without libtorch (the
# pure layers) never see it. Where the compiler finds the header unusable for
# a unit (other flags), it reads the text instead: the same code, only slower.
# ccache caches units that use it only with the sloppiness set below.

# Whether `target` links libtorch, through the libraries it links (recursively).
function(_trident_links_torch target out)
  get_property(seen GLOBAL PROPERTY _trident_torch_seen_${target} SET)
  if(seen)
    get_property(r GLOBAL PROPERTY _trident_torch_seen_${target})
    set(${out} ${r} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY _trident_torch_seen_${target} FALSE)  # cycles end here
  set(r FALSE)
  get_target_property(libs ${target} LINK_LIBRARIES)
  if(libs)
    foreach(lib IN LISTS libs)
      if(lib STREQUAL "torch" OR lib STREQUAL "torch_library" OR lib MATCHES "libtorch(_cpu)?\\.so$")
        set(r TRUE)
      elseif(TARGET ${lib} AND lib MATCHES "^trident")
        _trident_links_torch(${lib} sub)
        if(sub)
          set(r TRUE)
        endif()
      endif()
      if(r)
        break()
      endif()
    endforeach()
  endif()
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
  set(n 0)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(t STREQUAL "trident_torch_pch" OR NOT (type STREQUAL "STATIC_LIBRARY" OR type STREQUAL "EXECUTABLE"))
      continue()
    endif()
    _trident_links_torch(${t} uses)
    if(uses)
      target_precompile_headers(${t} REUSE_FROM trident_torch_pch)
      math(EXPR n "${n} + 1")
    endif()
  endforeach()
  message(STATUS "libtorch's headers precompiled once for ${n} targets (NOTE [torch precompiled header])")
endfunction()
