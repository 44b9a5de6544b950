# embed.cmake - writes a file's bytes as a C array: cmake -DIN=f -DOUT=f.c
# -DNAME=sym -P embed.cmake (the chat page of strata serve).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE ${OUT} "/* generated from ${IN} by cmake/embed.cmake */\n#include <stddef.h>\n"
  "const char ${NAME}[] = {${body} 0};\nconst size_t ${NAME}_len = ${bytes};\n")
