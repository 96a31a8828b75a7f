/* What libcformers.so exports: the declarations of the public headers (include/cformers),
 * nothing else. The engine is compiled with hidden visibility (CMakeLists.txt); each public
 * header wraps its declarations in CF_API_BEGIN / CF_API_END, which give them default
 * visibility, so a function is exported exactly when a public header declares it.
 * tests/check_exports.sh checks the shared library against the headers. */
#ifndef CFORMERS_EXPORT_H
#define CFORMERS_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define CF_API_BEGIN _Pragma("GCC visibility push(default)")
#define CF_API_END _Pragma("GCC visibility pop")
#else
#define CF_API_BEGIN
#define CF_API_END
#endif

#endif
