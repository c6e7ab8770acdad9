# cosession_layer(<target> FOLDER <folder> SOURCES <files...>
#                 [PUBLIC <deps...>] [PRIVATE <deps...>])
# Defines the static library of one layer of cosession from the sources of
# <folder>. Its headers are included as "<folder>/name.h" through an include
# directory of the layer's own (build/layers/<folder>), which a target sees
# only if it links the layer: a file of a lower layer that includes this
# layer's headers does not compile.
function(cosession_layer target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "FOLDER" "SOURCES;PUBLIC;PRIVATE")
  set(include_root ${PROJECT_BINARY_DIR}/layers/${arg_FOLDER})
  file(MAKE_DIRECTORY ${include_root})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${arg_FOLDER}
       ${include_root}/${arg_FOLDER} SYMBOLIC)
  add_library(${target} STATIC ${arg_SOURCES})
  target_include_directories(${target} PUBLIC
                             $<BUILD_INTERFACE:${include_root}>)
  target_link_libraries(${target} PUBLIC ${arg_PUBLIC}
                        PRIVATE cosession_flags ${arg_PRIVATE})
endfunction()
