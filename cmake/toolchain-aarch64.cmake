# Cross build for 64-bit ARM (Debian's gcc-aarch64-linux-gnu), so that the NEON kernels are
# compiled and their tests run on an x86 machine through qemu-user (ctest uses the emulator):
#   cmake -S . -B build/aarch64 --toolchain cmake/toolchain-aarch64.cmake
# Needs: gcc-aarch64-linux-gnu qemu-user, and the arm64 -dev packages of jansson, pcre2 and
# cmocka (dpkg --add-architecture arm64). scripts/neon-check.sh does all of it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# pkg-config of the arm64 multiarch packages
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} /)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
