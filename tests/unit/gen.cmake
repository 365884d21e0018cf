# tests of gen (see tests/unit/CMakeLists.txt): the model-file generator in tools/gen.
gm_test(test_gen SOURCES test_gen.c LIBS gmlx_gen gm_testutil LABELS unit)
# What the weights decode to needs the kernels' reference dequantizer.
if(TARGET gmlx_kernels)
  gm_test(test_gen_weights SOURCES test_gen_weights.c LIBS gmlx_gen gmlx_kernels gm_testutil
          LABELS unit)
endif()
