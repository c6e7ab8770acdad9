# cosession_layer(<target> FOLDER <folder> SOURCES <files...>
#                 [PUBLIC <deps...>] [PRIVATE <deps...>])
# Defines the static library of one layer of cosession from the sources of
# <folder>. Its headers are included as "cosession/<folder>/name.h", through
# an include directory of the layer's own (build/layers/<folder>, holding
# cosession/<folder> as a link to the folder) that a target sees only if it
# links the layer: a file of a lower layer that includes this layer's
# headers does not compile. Installed, the headers sit in
# <prefix>/include/cosession/<folder>.
#
# It also links <folder> into build/unprefixed, the root from which
# cosession::cosession (and only it: no layer sees it) lets a consumer
# include the same headers as "<folder>/name.h" -- the spelling of the
# project's public contract ("graph/tensor.h", "async/session.h").
function(cosession_layer target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "FOLDER" "SOURCES;PUBLIC;PRIVATE")
  set(include_root ${PROJECT_BINARY_DIR}/layers/${arg_FOLDER})
  file(MAKE_DIRECTORY ${include_root}/cosession)
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${arg_FOLDER}
       ${include_root}/cosession/${arg_FOLDER} SYMBOLIC)
  file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/unprefixed)
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${arg_FOLDER}
       ${PROJECT_BINARY_DIR}/unprefixed/${arg_FOLDER} SYMBOLIC)
  add_library(${target} STATIC ${arg_SOURCES})
  add_library(cosession::${target} ALIAS ${target})
  target_include_directories(${target} PUBLIC
                             $<BUILD_INTERFACE:${include_root}>
                             $<INSTALL_INTERFACE:include>)
  target_link_libraries(${target} PUBLIC ${arg_PUBLIC}
                        PRIVATE $<BUILD_INTERFACE:cosession_flags>
                                ${arg_PRIVATE})
  if(COSESSION_INSTALL)
    install(TARGETS ${target} EXPORT cosessionTargets
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${arg_FOLDER}/
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cosession/${arg_FOLDER}
            FILES_MATCHING PATTERN "*.h")
  endif()
endfunction()
