# libhlx.so (SONAME libhlx.so.<HLX_ABI_VERSION>) and libhlx.a from the objects of the layers under
# the C API, plus the install tree: library, hlx.h, the hlx binary, hlx.pc and a CMake package
# (find_package(hlx) -> hlx::hlx, hlx::hlx_static).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(hlx_lib_objects)
foreach(layer core io stablehlo runtime tokenizer multimodal models engine capi)
  list(APPEND hlx_lib_objects $<TARGET_OBJECTS:hlx_${layer}>)
endforeach()

# What the objects need from the system, as plain library names (for hlx.pc and the static
# archive's link interface; the shared library records them as DT_NEEDED itself).
set(HLX_SYSTEM_LIBS dnnl utf8proc png jpeg gomp pthread m)

add_library(hlx_shared SHARED ${hlx_lib_objects})
set_target_properties(hlx_shared PROPERTIES
  OUTPUT_NAME hlx EXPORT_NAME hlx LINKER_LANGUAGE CXX
  VERSION ${HLX_ABI_VERSION}.${PROJECT_VERSION} SOVERSION ${HLX_ABI_VERSION})  # libhlx.so.1.0.1.0
target_include_directories(hlx_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(hlx_shared PRIVATE OpenMP::OpenMP_CXX ${DNNL_LIBRARY} ${UTF8PROC_LIBRARY} PNG::PNG JPEG::JPEG)
# The version script keeps hlx_* global and makes everything else local, including the std::
# template instantiations that libstdc++'s headers mark visible; --no-undefined: all deps are linked.
target_link_options(hlx_shared PRIVATE -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/hlx.map
                    -Wl,--no-undefined)
set_property(TARGET hlx_shared APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/hlx.map)

add_library(hlx_static STATIC ${hlx_lib_objects})
set_target_properties(hlx_static PROPERTIES OUTPUT_NAME hlx EXPORT_NAME hlx_static LINKER_LANGUAGE CXX
  ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)  # beside libhlx.so, not among the layer archives
target_include_directories(hlx_static INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(hlx_static INTERFACE ${HLX_SYSTEM_LIBS} stdc++)

install(TARGETS hlx_shared hlx_static EXPORT hlxTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/hlx/hlx.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hlx)

set(hlx_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/hlx)
install(EXPORT hlxTargets NAMESPACE hlx:: DESTINATION ${hlx_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hlxConfig.cmake.in
  ${CMAKE_BINARY_DIR}/hlxConfig.cmake INSTALL_DESTINATION ${hlx_cmake_dir})
# ABI compatibility follows HLX_ABI_VERSION; while it is 0.x, SameMinorVersion is the honest promise.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/hlxConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/hlxConfig.cmake ${CMAKE_BINARY_DIR}/hlxConfigVersion.cmake
        DESTINATION ${hlx_cmake_dir})

# hlx.pc finds its prefix from its own location, so `cmake --install --prefix P` needs no reconfigure.
set(hlx_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH HLX_PC_TO_PREFIX /${hlx_pc_dir} /)
list(TRANSFORM HLX_SYSTEM_LIBS PREPEND -l OUTPUT_VARIABLE HLX_PC_LIBS_PRIVATE)
list(JOIN HLX_PC_LIBS_PRIVATE " " HLX_PC_LIBS_PRIVATE)
configure_file(${PROJECT_SOURCE_DIR}/cmake/hlx.pc.in ${CMAKE_BINARY_DIR}/hlx.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/hlx.pc DESTINATION ${hlx_pc_dir})

install(TARGETS hlx RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
