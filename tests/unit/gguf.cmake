# tests of gguf (see tests/unit/CMakeLists.txt)
# gguf_builder writes GGUF bytes field by field (also used by tests/fuzz for the seed corpus).
add_library(gm_gguf_builder STATIC ${CMAKE_CURRENT_SOURCE_DIR}/gguf_builder.c)
target_include_directories(gm_gguf_builder PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(gm_gguf_builder PRIVATE ${GMLX_WARNINGS})
gm_test(test_gguf_reader
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_gguf_reader.c
  LIBS gmlx_gguf gm_gguf_builder gm_testutil m)
gm_test(test_gguf_corrupt
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_gguf_corrupt.c
  LIBS gmlx_gguf gm_gguf_builder gm_testutil)
