# the CUDA backend against the CPU reference; exit 77 (skipped) without a CUDA device. The CUDA
# runtime reserves address space where AddressSanitizer keeps its shadow gap: let it.
if(GMLX_HAVE_CUDA)
  gm_test(test_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda.c LIBS gmlx_cuda LABELS unit)
  set_property(TEST test_cuda APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=protect_shadow_gap=0")
endif()
# the same device code run on the CPU, its warps emulated (tests/unit/cuda_emu): the decoders and
# the 8-bit kernels' index arithmetic, checked on every machine, with a CUDA toolkit or not
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  add_executable(test_cuda_emu ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_emu.cpp)
  set_target_properties(test_cuda_emu PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
  target_compile_options(test_cuda_emu PRIVATE -Wall -Wextra -Wno-missing-field-initializers -Wno-unknown-pragmas
    -fno-strict-aliasing) # the kernels read a half pair or a stage of halves as words, as the device does
  target_include_directories(test_cuda_emu BEFORE PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu)
  target_include_directories(test_cuda_emu PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(test_cuda_emu PRIVATE gmlx_kernels gmlx_gguf gmlx_base Threads::Threads)
  add_test(NAME test_cuda_emu COMMAND test_cuda_emu)
  set_tests_properties(test_cuda_emu PROPERTIES LABELS unit TIMEOUT ${GMLX_TEST_TIMEOUT})
endif()
