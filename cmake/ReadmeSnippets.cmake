# Turns every ```c++ block of a Markdown file into a function of a C++
# file, so that building that file checks the README's examples compile.
#
#   cmake -DMARKDOWN=README.md -DCONTEXT=tests/readme_snippet_context.h \
#         -DOUTPUT=readme_snippets.cc -P cmake/ReadmeSnippets.cmake
#
# Each block becomes the body of a coroutine, `boost::asio::awaitable<void>
# ReadmeSnippetAtLine<N>()`, N being the block's first line in the README, so
# that a compiler error points at it. Its #include lines move to the top of
# the file. The names a block uses without declaring them (a graph, a loss,
# a timer...) are declared in CONTEXT; a block may shadow them.
cmake_minimum_required(VERSION 3.25)
foreach(var MARKDOWN CONTEXT OUTPUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "ReadmeSnippets.cmake: -D${var}=... is required")
  endif()
endforeach()

# One list element per line. A CMake list splits at ';' and not inside
# '[...]', both common in C++: they travel as placeholders.
file(READ "${MARKDOWN}" text)
string(REPLACE ";" "@SEMICOLON@" text "${text}")
string(REPLACE "[" "@OPEN@" text "${text}")
string(REPLACE "]" "@CLOSE@" text "${text}")
string(REPLACE "\n" ";" lines "${text}")
set(includes "")
set(functions "")
set(in_block OFF)
set(line_number 0)
set(blocks 0)
foreach(line IN LISTS lines)
  math(EXPR line_number "${line_number} + 1")
  if(NOT in_block)
    if(line MATCHES "^```c\\+\\+[ \t]*$")
      set(in_block ON)
      math(EXPR first "${line_number} + 1")
      string(APPEND functions
        "// ${MARKDOWN}:${first}\n"
        "boost::asio::awaitable<void> ReadmeSnippetAtLine${first}() {\n"
        "#line ${first} \"${MARKDOWN}\"\n")
      math(EXPR blocks "${blocks} + 1")
    endif()
  elseif(line MATCHES "^```[ \t]*$")
    set(in_block OFF)
    string(APPEND functions "  co_return;\n}\n\n")
  elseif(line MATCHES "^[ \t]*#include")
    string(APPEND includes "${line}\n")
    string(APPEND functions "\n")  # keeps the #line numbering
  else()
    string(APPEND functions "${line}\n")
  endif()
endforeach()
if(in_block)
  message(FATAL_ERROR "${MARKDOWN}: a ```c++ block is not closed")
endif()
if(blocks EQUAL 0)
  message(FATAL_ERROR "${MARKDOWN}: no ```c++ block to check")
endif()

foreach(var includes functions)
  string(REPLACE "@SEMICOLON@" ";" ${var} "${${var}}")
  string(REPLACE "@OPEN@" "[" ${var} "${${var}}")
  string(REPLACE "@CLOSE@" "]" ${var} "${${var}}")
endforeach()
file(WRITE "${OUTPUT}.new"
  "// Generated from ${MARKDOWN} by cmake/ReadmeSnippets.cmake: do not edit.\n"
  "${includes}"
  "#include \"${CONTEXT}\"\n\n"
  "namespace cosession::readme_snippets {\n\n"
  "${functions}"
  "}  // namespace cosession::readme_snippets\n")
# Rewritten only when it changed, so that an edit elsewhere in the README
# does not recompile it.
file(COPY_FILE "${OUTPUT}.new" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.new")
