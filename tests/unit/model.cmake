gm_test(test_model SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_model.c LIBS gmlx_model gmlx_gguf gm_testutil LABELS model)
