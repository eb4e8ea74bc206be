# Cross build for Android on arm64 (phones, ARM boards running Android) with Google's Android NDK
# (r26 or later). Not built in CI: no NDK here. The engine builds without the server (no
# Android cpp-httplib) and without the tests; the CPU kernels are the NEON ones, `neon-dot`
# picked at run time where the CPU has the dot product (every phone core since ~2018).
#
#   cmake -S . -B build-android -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/android-arm64.cmake \
#         -DANDROID_NDK=/path/to/android-ndk     # or the ANDROID_NDK_HOME environment variable
#   ninja -C build-android powerinfer
#   adb push build-android/bin/powerinfer model.gguf /data/local/tmp/
#   adb shell /data/local/tmp/powerinfer run -m /data/local/tmp/model.gguf -p "Hello" -n 32
#
# ANDROID_PLATFORM (default android-28) and ANDROID_STL (default c++_static: one binary to push)
# may be overridden on the command line.
if(NOT ANDROID_NDK)
  if(DEFINED ENV{ANDROID_NDK_HOME})
    set(ANDROID_NDK $ENV{ANDROID_NDK_HOME})
  elseif(DEFINED ENV{ANDROID_NDK})
    set(ANDROID_NDK $ENV{ANDROID_NDK})
  endif()
endif()
if(NOT ANDROID_NDK OR NOT EXISTS "${ANDROID_NDK}/build/cmake/android.toolchain.cmake")
  message(FATAL_ERROR "android-arm64.cmake: set ANDROID_NDK (-DANDROID_NDK=DIR or ANDROID_NDK_HOME) to an "
                      "Android NDK, the folder holding build/cmake/android.toolchain.cmake (got '${ANDROID_NDK}')")
endif()
set(ANDROID_ABI arm64-v8a)
if(NOT ANDROID_PLATFORM)
  set(ANDROID_PLATFORM android-28)
endif()
if(NOT ANDROID_STL)
  set(ANDROID_STL c++_static)
endif()
include("${ANDROID_NDK}/build/cmake/android.toolchain.cmake")

set(PI_SERVER OFF CACHE BOOL "No HTTP server on Android (cpp-httplib is Debian's)")
set(PI_BUILD_TESTS OFF CACHE BOOL "The tests need GoogleTest for the target")
set(PI_PYTHON OFF CACHE BOOL "")
