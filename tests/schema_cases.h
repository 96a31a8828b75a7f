/* The JSON Schemas the structured-output tests generate against (tests/test_grammar.c on
 * token vocabularies, tests/test_serve_structured.c on models): nested objects, enums,
 * arrays, numbers, unions, references. Strings and arrays are mostly bounded so that a
 * tiny model's document ends within its context. */
#ifndef CFORMERS_TEST_SCHEMA_CASES_H
#define CFORMERS_TEST_SCHEMA_CASES_H

static const char *const SCHEMA_CASES[] = {
    "{\"type\":\"integer\"}",
    "{\"type\":\"number\"}",
    "{\"type\":\"boolean\"}",
    "{\"type\":\"string\",\"maxLength\":12}",
    "{\"type\":\"string\",\"minLength\":3,\"maxLength\":5}",
    "{\"enum\":[\"red\",\"green\",\"blue\",42,null]}",
    "{\"const\":{\"version\":2}}",
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":10},\"age\":{\"type\":\"integer\"}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},\"c\":{\"type\":\"number\"}},"
    "\"required\":[\"b\"]}",
    "{\"type\":\"object\",\"properties\":{\"opt1\":{\"type\":\"integer\"},\"opt2\":{\"type\":\"integer\"}}}",
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":4}",
    "{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y\"]},\"minItems\":2,\"maxItems\":3}",
    "{\"type\":\"object\",\"properties\":{\"point\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},"
    "\"y\":{\"type\":\"number\"}},\"required\":[\"x\",\"y\"]},\"label\":{\"type\":\"string\",\"maxLength\":6}},"
    "\"required\":[\"point\"]}",
    "{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},"
    "\"maxItems\":3},\"score\":{\"type\":\"number\"}},\"required\":[\"tags\",\"score\"]}",
    "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":4}]}",
    "{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]}]}",
    "{\"type\":[\"integer\",\"null\"]}",
    "{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"amber\",\"green\"]},"
    "\"mood\":{\"type\":\"string\",\"enum\":[\"happy\",\"sad\"]}},\"required\":[\"color\",\"mood\"]}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":["
    "{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}",
    "{\"type\":\"object\",\"title\":\"Person\",\"description\":\"annotations only\",\"properties\":{\"first\":{"
    "\"type\":\"string\",\"maxLength\":8},\"last\":{\"type\":\"string\",\"maxLength\":8},\"kids\":{\"type\":\"array\","
    "\"items\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]},\"maxItems\":2}},"
    "\"required\":[\"first\",\"last\",\"kids\"]}",
    "{\"type\":\"string\"}",
    "{\"type\":\"object\"}",
};
enum { N_SCHEMA_CASES = sizeof SCHEMA_CASES / sizeof SCHEMA_CASES[0] };

#endif
