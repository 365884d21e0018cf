# tests of model (see tests/unit/CMakeLists.txt)
