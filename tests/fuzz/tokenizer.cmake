# fuzz_tokenizer: libFuzzer target of text/tokenizer (included from tests/fuzz/CMakeLists.txt,
# after gm_fuzz is defined). It loads the committed trained-qwen3moe vocabulary once; the path
# can be overridden at run time with GMLX_FUZZ_TOKENIZER_MODEL.
target_compile_options(gmlx_text PRIVATE -fsanitize=fuzzer-no-link)
gm_fuzz(fuzz_tokenizer SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tokenizer.c LIBS gmlx_text gmlx_gguf)
target_compile_definitions(fuzz_tokenizer PRIVATE
  GMLX_FUZZ_TOKENIZER_MODEL="${PROJECT_SOURCE_DIR}/tests/fixtures/trained-qwen3moe/model-q4_k_m.gguf")
