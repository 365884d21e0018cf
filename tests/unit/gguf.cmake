# tests of gguf (see tests/unit/CMakeLists.txt)
