# tests of kernels (see tests/unit/CMakeLists.txt)
gm_test(test_kernels_dequant
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_dequant.c
  LIBS gmlx_kernels gmlx_gguf gm_testutil PkgConfig::JANSSON m)
gm_test(test_kernels_dot
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_dot.c
  LIBS gmlx_kernels gmlx_gguf gm_testutil m)
# quant_tables.{c,h} and quant_grid_*.inc must be what tools/gen_quant_tables.py makes from the fixture JSON.
find_program(GMLX_PYTHON3 python3)
if(GMLX_PYTHON3)
  add_test(NAME test_kernels_tables_generated
    COMMAND ${GMLX_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/gen_quant_tables.py --check)
  set_tests_properties(test_kernels_tables_generated PROPERTIES TIMEOUT ${GMLX_TEST_TIMEOUT})
endif()
gm_test(test_kernels_simd
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_simd.c
  LIBS gmlx_kernels gmlx_gguf m LABELS unit)
gm_test(test_kernels_matmul
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_matmul.c
  LIBS gmlx_kernels gmlx_gguf m LABELS unit)
# The same program with the kernel level forced: gm_kernels_init must follow GMLX_KERNELS (a
# level this CPU lacks must be refused, which the test also checks).
foreach(level scalar avx2 avx512 avx512vbmi)
  add_test(NAME test_kernels_matmul_${level} COMMAND test_kernels_matmul)
  set_tests_properties(test_kernels_matmul_${level} PROPERTIES
    ENVIRONMENT "GMLX_KERNELS=${level}" SKIP_RETURN_CODE 77 LABELS unit TIMEOUT ${GMLX_TEST_TIMEOUT})
endforeach()
gm_test(test_kernels_attn
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_attn.c
  LIBS gmlx_kernels gmlx_gguf m LABELS unit)
