# Included after find_package(Torch), by zoo's build and by zooConfig.cmake for programs linking
# zoo. PyPI's torch wheel keeps its CUDA libraries in pip packages beside it
# (site-packages/nvidia/*/lib), where LibTorch's own RPATH finds them at run time. LibTorch's
# CMake files link the CUDA runtime and NVRTC of the machine's toolkit instead (another minor
# version, with an older NCCL beside it): nothing here links them itself (zoo has no CUDA code),
# and the linker resolves LibTorch's dependencies where LibTorch will load them.
file(GLOB ZOO_WHEEL_CUDA_DIRS LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
if(ZOO_WHEEL_CUDA_DIRS AND TARGET torch::cudart AND TARGET CUDA::cudart)
  get_target_property(zoo_cuda_includes CUDA::cudart INTERFACE_INCLUDE_DIRECTORIES)
  set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES "")
  set_property(TARGET torch::cudart PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${zoo_cuda_includes}")
  list(FILTER TORCH_LIBRARIES EXCLUDE REGEX "nvrtc")
  string(REPLACE ";" ":" zoo_rpath_link "${ZOO_WHEEL_CUDA_DIRS}")
  add_link_options("LINKER:-rpath-link,${zoo_rpath_link}")
  message(STATUS "zoo: CUDA libraries from the torch wheel (${TORCH_INSTALL_PREFIX}/../nvidia)")
endif()
