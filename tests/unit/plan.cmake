gm_test(test_plan SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_plan.c
        LIBS gmlx_plan gmlx_model gmlx_gen gm_testutil LABELS unit)
