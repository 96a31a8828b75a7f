# Writes the bytes of IN as a C array into the header OUT:
#   static const unsigned char cf_dashboard_html[] = {...}; and its size.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" len)
math(EXPR size "${len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "/* Generated from ${IN} by cmake/embed.cmake: do not edit. */\n"
  "static const unsigned char cf_dashboard_html[] = {\n${bytes}0x00};\n"
  "static const unsigned long cf_dashboard_html_size = ${size};\n")
