# strata.cmake - helpers that declare a layer, a test and a bench the same way.

# strata_add_layer(NAME SOURCES f.c ... [DEPENDS layer ...] [LIBS target ...])
# Builds strata_NAME as a library that links the layers it depends on, so a
# test of one layer builds without the layers above it. Each layer is a
# shared library: its code and debug information (the backend's with an
# 11 MB CUDA fatbin) then sit on disk once, where static archives copied them
# into each of some 150 tests and benches (25 MB each with CUDA, a 2.1 GB
# build; 0.95 GB under ASan), more than CI's disk once had free. The tool
# and libstrata are built from the layers' objects either way, so neither
# depends on these. libFuzzer builds keep archives: clang links its
# sanitizer runtimes into executables only.
function(strata_add_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPENDS;LIBS" ${ARGN})
  add_library(strata_${name}_objs OBJECT ${L_SOURCES})
  target_include_directories(strata_${name}_objs
    PUBLIC ${CMAKE_SOURCE_DIR}/include PRIVATE ${CMAKE_SOURCE_DIR}/src)
  set(deps)
  foreach(d IN LISTS L_DEPENDS)
    list(APPEND deps strata_${d})
  endforeach()
  target_link_libraries(strata_${name}_objs PUBLIC ${deps} ${L_LIBS})
  if(NOT STRATA_FUZZ)
    add_library(strata_${name} SHARED $<TARGET_OBJECTS:strata_${name}_objs>)
  else()
    add_library(strata_${name} STATIC $<TARGET_OBJECTS:strata_${name}_objs>)
  endif()
  target_include_directories(strata_${name} PUBLIC ${CMAKE_SOURCE_DIR}/include)
  target_link_libraries(strata_${name} PUBLIC ${deps} ${L_LIBS})
  set_property(GLOBAL APPEND PROPERTY STRATA_LAYER_OBJECTS
    $<TARGET_OBJECTS:strata_${name}_objs>)
  set_property(GLOBAL APPEND PROPERTY STRATA_LAYER_LINK ${L_LIBS})
endfunction()

# strata_add_support(NAME SOURCES f.c ... [LAYERS layer ...] [LIBS t ...])
# One file of tests/support/ as a static archive, strata_support_NAME, that
# any test names with SUPPORT NAME.
function(strata_add_support name)
  cmake_parse_arguments(S "" "" "SOURCES;LAYERS;LIBS" ${ARGN})
  add_library(strata_support_${name} STATIC ${S_SOURCES})
  set(libs)
  foreach(l IN LISTS S_LAYERS)
    list(APPEND libs strata_${l})
  endforeach()
  target_link_libraries(strata_support_${name} PUBLIC ${libs} ${S_LIBS}
                        PkgConfig::CMOCKA)
  target_include_directories(strata_support_${name} PUBLIC
    ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src
    ${CMAKE_SOURCE_DIR}/tests)
  target_compile_definitions(strata_support_${name} PRIVATE
    STRATA_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    STRATA_BINARY_DIR="${CMAKE_BINARY_DIR}")
endfunction()

# strata_add_test(NAME SOURCES f.c ... LAYERS layer ... [SUPPORT s ...]
#                 [LABELS l ...])
# One cmocka executable registered with CTest. Tests find committed data
# through STRATA_SOURCE_DIR. Exit code 77 reports the test as skipped.
# SUPPORT links tests/support/ files (strata_add_support).
# The naming rule (tests/README.md): tests/L/test_S.c is the test test_L_S.
function(strata_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LAYERS;SUPPORT;LABELS" ${ARGN})
  get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  list(GET T_SOURCES 0 first)
  string(REGEX REPLACE "^test_${folder}_" "test_" file_for_name "${name}")
  if(NOT name MATCHES "^test_${folder}_[a-z0-9_]+$" OR
     NOT first STREQUAL "${file_for_name}.c")
    message(FATAL_ERROR "test '${name}' (first source '${first}') in "
      "tests/${folder}/ breaks the naming rule\n  fix: name the file "
      "tests/${folder}/test_SUBJECT.c and the test test_${folder}_SUBJECT "
      "(tests/README.md)")
  endif()
  add_executable(${name} ${T_SOURCES})
  set(libs)
  foreach(l IN LISTS T_LAYERS)
    list(APPEND libs strata_${l})
  endforeach()
  foreach(s IN LISTS T_SUPPORT)
    list(APPEND libs strata_support_${s})
  endforeach()
  target_link_libraries(${name} PRIVATE ${libs} PkgConfig::CMOCKA)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src
                             ${CMAKE_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    STRATA_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    STRATA_BINARY_DIR="${CMAKE_BINARY_DIR}")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77
    TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
  # Tests on the GPU read the device's free memory, which is global to the
  # device: one that runs beside another (ctest -j) sees the other's
  # allocations. Every test whose source names CUDA (its kernels, or a
  # run with --device cuda) takes the device one at a time.
  file(READ ${CMAKE_CURRENT_SOURCE_DIR}/${first} source_text)
  if(name MATCHES "cuda" OR source_text MATCHES "cuda|CUDA")
    set_tests_properties(${name} PROPERTIES RESOURCE_LOCK gpu)
  endif()
endfunction()
