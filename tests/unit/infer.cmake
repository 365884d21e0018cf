gm_test(test_sample SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sample.c LIBS gmlx_infer m LABELS unit)
gm_test(test_rope SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_rope.c LIBS gmlx_infer m LABELS unit)
gm_test(test_vram_tier SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_vram_tier.c LIBS gmlx_infer LABELS unit)
