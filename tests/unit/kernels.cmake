# tests of kernels (see tests/unit/CMakeLists.txt)
gm_test(test_kernels_dequant
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_dequant.c
  LIBS gmlx_kernels gmlx_gguf gm_testutil PkgConfig::JANSSON m)
gm_test(test_kernels_dot
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_dot.c
  LIBS gmlx_kernels gmlx_gguf gm_testutil m)
# quant_tables.{c,h} must be what tools/gen_quant_tables.py makes from the fixture JSON.
find_program(GMLX_PYTHON3 python3)
if(GMLX_PYTHON3)
  add_test(NAME test_kernels_tables_generated
    COMMAND ${GMLX_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/gen_quant_tables.py --check)
endif()
