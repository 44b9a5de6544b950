# install.cmake - the installable library (issue 25): libstrata.so with a
# versioned soname beside libstrata.a, the public headers, strata.pc and the
# tool and its man page, for `make install PREFIX=DIR` and `cmake --install`.
include(GNUInstallDirs)

get_property(strata_objects GLOBAL PROPERTY STRATA_LAYER_OBJECTS)
get_property(strata_link GLOBAL PROPERTY STRATA_LAYER_LINK)
list(REMOVE_DUPLICATES strata_link)

# Only the public API (strata_name, never strata__internal) is exported:
# the version script's pattern needs a letter or digit after "strata_".
add_library(strata_shared SHARED ${strata_objects})
target_include_directories(strata_shared PUBLIC ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(strata_shared PRIVATE ${strata_link})
set_target_properties(strata_shared PROPERTIES
  OUTPUT_NAME strata
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${CMAKE_SOURCE_DIR}/cmake/strata.map)
target_link_options(strata_shared PRIVATE
  -Wl,--version-script=${CMAKE_SOURCE_DIR}/cmake/strata.map)
# Every symbol resolved at link time; not under libFuzzer, whose clang
# leaves the sanitizer runtime to the executables.
if(NOT STRATA_FUZZ)
  target_link_options(strata_shared PRIVATE -Wl,--no-undefined)
endif()
set_target_properties(strata PROPERTIES OUTPUT_NAME strata)

# strata.pc: the Debian libraries as Requires.private, CUDA's as
# Libs.private, so `pkg-config --libs strata` is -lstrata alone for the
# shared library and --static adds what the archive needs.
set(STRATA_PC_LIBS_PRIVATE "-lm -lpthread")
if(STRATA_HAVE_CUDA)
  string(APPEND STRATA_PC_LIBS_PRIVATE
    " -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/strata.pc.in
  ${CMAKE_BINARY_DIR}/strata.pc @ONLY)

install(TARGETS strata_shared strata
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS strata_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/strata
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_BINARY_DIR}/strata.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The man page, made at build time from the built tool's --help texts
# (scripts/make-man), so it says what --help says.
if(STRATA_PYTHON3)
  set(strata_man ${CMAKE_BINARY_DIR}/share/man/man1/strata.1)
  add_custom_command(OUTPUT ${strata_man}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/share/man/man1
    COMMAND ${STRATA_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/make-man
            $<TARGET_FILE:strata_cli> ${PROJECT_VERSION} ${strata_man}
    DEPENDS strata_cli ${CMAKE_SOURCE_DIR}/scripts/make-man
    COMMENT "Generating share/man/man1/strata.1 from --help")
  add_custom_target(strata_man ALL DEPENDS ${strata_man})
  install(FILES ${strata_man} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()

# CI's check of the installed tree: install into a temporary prefix, build
# the examples with `pkg-config --cflags --libs strata` alone, run them.
set(strata_example_cflags "")
if(STRATA_SANITIZE)
  set(strata_example_cflags "-fsanitize=address,undefined")
endif()
if(NOT STRATA_TSAN) # the examples are built by plain cc
add_test(NAME install_examples COMMAND sh ${CMAKE_SOURCE_DIR}/scripts/check-install
  ${CMAKE_BINARY_DIR} "${strata_example_cflags}")
set_tests_properties(install_examples PROPERTIES TIMEOUT 300)
endif()

# The exported symbols must be exactly cmake/strata.symbols (check-abi).
set(strata_abi_flags "")
if(NOT STRATA_HAVE_CUDA)
  set(strata_abi_flags "--without-cuda")
endif()
add_test(NAME abi_symbols COMMAND sh ${CMAKE_SOURCE_DIR}/scripts/check-abi
  $<TARGET_FILE:strata_shared> ${strata_abi_flags})
