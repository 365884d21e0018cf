# tests of text (see tests/unit/CMakeLists.txt)
# test_tokenizer: synthetic vocabularies (written with gguf_builder) and the committed model's.
gm_test(test_tokenizer
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer.c
  LIBS gmlx_text gmlx_gguf gm_gguf_builder gm_testutil LABELS unit)
# test_tokenizer_fixtures: tokenizer-cases.jsonl of every fixture model (Hugging Face encodings).
gm_test(test_tokenizer_fixtures
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer_fixtures.c
  LIBS gmlx_text gmlx_gguf gm_testutil PkgConfig::JANSSON LABELS model)
# test_tokenizer_vocab: llama.cpp's ggml-vocab-*.gguf suites from the fetched fixtures.
gm_test(test_tokenizer_vocab
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer_vocab.c
  LIBS gmlx_text gmlx_gguf gm_testutil LABELS model)
