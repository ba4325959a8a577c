# Build-enforced layering (docs/architecture.md, "The layers"). Each folder of src/ is a static
# library, tessera_<layer>, and its sources see only an include root staged for it in the build
# tree:
#   <build>/layers/<layer>/<layer>        -> src/<layer>
#   <build>/layers/<layer>/tessera/<h>    -> include/tessera/<h>, the public headers of that layer
# A layer's root is a PUBLIC include directory, so linking the layers below brings their roots and
# nothing else: a header of a layer above (or not linked) is "No such file or directory".

set(TESSERA_LAYERS_DIR ${PROJECT_BINARY_DIR}/layers)
set(TESSERA_ASSIGNED_PUBLIC_HEADERS "")

# Removes the links a previous configure staged, so a header that moved layer does not linger.
function(_tessera_clear_links dir)
  file(GLOB entries LIST_DIRECTORIES true ${dir}/*)
  foreach(e ${entries})
    if(IS_SYMLINK ${e})
      file(REMOVE ${e})
    endif()
  endforeach()
endfunction()

# tessera_layer(<layer> [DEPS <lower layers>] [PUBLIC_HEADERS <paths under include/tessera/>])
# Sources: src/<layer>/*.cc (globbed, so new files join without edits here).
function(tessera_layer layer)
  cmake_parse_arguments(L "" "" "DEPS;PUBLIC_HEADERS" ${ARGN})
  set(root ${TESSERA_LAYERS_DIR}/${layer})
  file(MAKE_DIRECTORY ${root}/tessera)
  _tessera_clear_links(${root})
  _tessera_clear_links(${root}/tessera)
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${layer} ${root}/${layer} SYMBOLIC)
  foreach(h ${L_PUBLIC_HEADERS})
    if(EXISTS ${PROJECT_SOURCE_DIR}/include/tessera/${h})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/tessera/${h} ${root}/tessera/${h} SYMBOLIC)
    endif()
  endforeach()
  set(TESSERA_ASSIGNED_PUBLIC_HEADERS ${TESSERA_ASSIGNED_PUBLIC_HEADERS} ${L_PUBLIC_HEADERS} PARENT_SCOPE)

  file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${layer}/*.cc)
  add_library(tessera_${layer} STATIC ${sources})
  target_include_directories(tessera_${layer} PUBLIC ${root})
  list(TRANSFORM L_DEPS PREPEND tessera_)
  target_link_libraries(tessera_${layer} PUBLIC ${L_DEPS})
endfunction()

# Every public header must belong to a layer, or no layer's sources could include it.
function(tessera_check_public_headers_assigned)
  file(GLOB present CONFIGURE_DEPENDS LIST_DIRECTORIES true RELATIVE ${PROJECT_SOURCE_DIR}/include/tessera
       ${PROJECT_SOURCE_DIR}/include/tessera/*)
  foreach(h ${present})
    if(NOT h IN_LIST TESSERA_ASSIGNED_PUBLIC_HEADERS)
      message(FATAL_ERROR "include/tessera/${h} belongs to no layer: add it to the PUBLIC_HEADERS of its "
                          "layer's tessera_layer() call in CMakeLists.txt")
    endif()
  endforeach()
endfunction()

# tessera_layer_check(<test name> <layer> <source> [FAILS_WITH <regex>])
# A ctest compiling <source> with <layer>'s include roots: it must build, or, with FAILS_WITH, must
# fail with a compiler message matching <regex> (so an unrelated error does not pass).
function(tessera_layer_check name layer source)
  cmake_parse_arguments(C "" "FAILS_WITH" "" ${ARGN})
  string(REGEX REPLACE "[^A-Za-z0-9_]" "_" target tessera_layer_check_${name})
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${source})
  target_link_libraries(${target} PRIVATE tessera_${layer})
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} --build ${PROJECT_BINARY_DIR} --config $<CONFIG> --target ${target})
  # Two builds at once in one build tree would race on the generator's state.
  set_tests_properties(${name} PROPERTIES RESOURCE_LOCK tessera_build_tree)
  if(C_FAILS_WITH)
    set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${C_FAILS_WITH}")
  endif()
endfunction()
