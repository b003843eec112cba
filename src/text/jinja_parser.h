// Jinja parser: tokens -> syntax tree, following jinja2's grammar and operator precedence
// (lowest first): `x if c else y`, or, and, not, comparisons (chained, `in`, `not in`), + -, ~,
// * / // %, **, unary - +, then postfix (.attr, [item], [a:b:c], call) with filters (|f) and tests
// (is [not] t) binding tighter than any arithmetic.
//
// Statements: if/elif/else, for (with `if` filter and else), set (=, tuple unpacking, ns.attr,
// block form with optional filter), macro, call (with caller arguments), filter, break, continue,
// raw (in the lexer) and HF's generation markers. Unknown filters and tests are refused here, at
// their position, as jinja2 refuses them when it compiles a template.
#pragma once

#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"

#include <vector>

namespace deltabit::text::jinja {

// Throws TemplateError (Origin::Syntax).
Program parse(std::vector<Token> tokens);

}  // namespace deltabit::text::jinja
