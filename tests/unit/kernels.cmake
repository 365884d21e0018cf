# tests of kernels (see tests/unit/CMakeLists.txt)
