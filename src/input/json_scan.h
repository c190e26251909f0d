// A small reader for the JSON of tokenizer files (GPT-2's encoder.json, Hugging Face's
// tokenizer.json): no tree is built; a cursor walks the text, skipping what it does not need.
// Every function returns NULL (or -1) on malformed JSON; callers name the file.
#ifndef FGPIPE_JSON_SCAN_H
#define FGPIPE_JSON_SCAN_H

#include <stddef.h>

const char *json_ws(const char *p);          // past white space
const char *json_skip(const char *p);        // past one value (at p, after white space)
// The value of `key` in the object at p (NULL when p is not an object or the key is absent).
const char *json_get(const char *p, const char *key);
// The string at p unescaped (UTF-8; \u escapes with surrogate pairs) into dst, which needs as
// many bytes as the quoted text; its length, or -1. *end (if not NULL) is set past it.
long json_string(const char *p, char *dst, const char **end);
// 1 when the value at p is the string s.
int json_is(const char *p, const char *s);
// Iterates an object's members or an array's elements: call with *it = the '{' or '[' first;
// each call leaves *it at the next value (after "key": for objects, the key's start in *key)
// and returns 1, or 0 at the end, -1 when malformed.
int json_next(const char **it, const char **key);

#endif
