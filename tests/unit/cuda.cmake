# the CUDA backend against the CPU reference; exit 77 (skipped) without a CUDA device. The CUDA
# runtime reserves address space where AddressSanitizer keeps its shadow gap: let it.
if(GMLX_HAVE_CUDA)
  gm_test(test_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda.c LIBS gmlx_cuda LABELS unit)
  set_property(TEST test_cuda APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=protect_shadow_gap=0")
endif()
