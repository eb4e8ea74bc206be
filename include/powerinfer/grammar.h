// Constrained output: grammars in llama.cpp's GBNF format and JSON Schema converted to one.
//
// A session samples under a grammar when SamplingParams::grammar holds GBNF text: every token
// it samples keeps the generated text a prefix of the grammar's language, and
// Session::grammar_done() says when the text is complete (nothing can follow it).
//
//   auto g = pi::json_schema_to_grammar(R"({"type":"object","properties":{"n":{"type":"integer"}}})");
//   opts.sampling.grammar = *g;
//
// Whitespace between JSON tokens is at most one space (small models otherwise spend tokens on
// it). JSON Schema subset: type (object, array, string, number, integer, boolean, null, or a list
// of them), properties (generated in the order given; those not in `required` may be left out;
// other properties are not generated unless additionalProperties is true or a schema), items,
// minItems/maxItems, minLength/maxLength, enum, const, anyOf/oneOf (oneOf is not checked for
// exclusivity), $ref to #/$defs/NAME or #/definitions/NAME (recursion allowed). Annotations
// (title, description, default, examples, $schema, $id, $comment, format) are ignored; other
// keywords (pattern, minimum, ...) are refused, naming where they are, rather than producing
// output the schema rejects.
// Thread-safety: these functions are pure.
#pragma once

#include <string>
#include <string_view>

#include "powerinfer/error.h"

namespace pi {

// Checks GBNF text; the error names the line and column: "grammar: line 2, column 9: ...".
Status check_grammar(std::string_view gbnf);

// A JSON Schema (JSON text) as GBNF whose sentences are JSON documents the schema accepts.
// Errors name the place in the schema: "json schema: /properties/age: unsupported keyword
// 'minimum'".
Result<std::string> json_schema_to_grammar(std::string_view schema);

// GBNF whose sentences are JSON objects (OpenAI's response_format {"type": "json_object"}).
std::string json_object_grammar();

}  // namespace pi
