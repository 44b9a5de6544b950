# cuda.cmake - the CUDA backend's part of the backend layer, included from
# src/backend/CMakeLists.txt when nvcc was found (STRATA_HAVE_CUDA). Sets
# cuda_backend_sources and cuda_backend_libs for strata_add_layer(backend).

# The project's warning flags are for the C compiler; nvcc gets its own
# equivalents below, so those options are limited to C in this directory.
get_property(strata_dir_opts DIRECTORY PROPERTY COMPILE_OPTIONS)
set(strata_c_only_opts)
foreach(opt IN LISTS strata_dir_opts)
  list(APPEND strata_c_only_opts "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${opt}>")
endforeach()
set_property(DIRECTORY PROPERTY COMPILE_OPTIONS ${strata_c_only_opts})

file(GLOB cuda_kernel_sources CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/kernels_*.cu)
# Host code warnings as errors, device warnings as errors; no fast math:
# expf, sqrtf and division stay IEEE so results track the CPU kernels.
set_source_files_properties(${cuda_kernel_sources} PROPERTIES
  COMPILE_OPTIONS "-Xcompiler=-Wall,-Wextra,-Werror;-Werror=all-warnings;-D_GNU_SOURCE")

set(cuda_backend_sources
  cuda/cuda_memory.c cuda/cuda_compute.c cuda/cuda_quant.c cuda/cuda_experts.c
  cuda/cublas_load.c
  ${cuda_kernel_sources})
# cuBLAS is not linked: cublas_load.c opens it at the first compute
# context, so starting the tool does not load it (issue 25). Its headers
# come with the runtime's include folder.
set(cuda_backend_libs CUDA::cudart ${CMAKE_DL_LIBS})
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/cuda/cublas_load.c
  PROPERTIES COMPILE_DEFINITIONS
  "STRATA_CUDA_LIBRARY_DIR=\"${CUDAToolkit_LIBRARY_DIR}\"")
