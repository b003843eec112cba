// The syntax tree of a parsed template. One node type for expressions and one for statements, each
// with a kind and the few fields its kinds use: the interpreter is a switch over kinds, and a tree of
// a real chat template is a few hundred nodes, so uniform nodes cost nothing and read simply.
#pragma once

#include "text/jinja_error.h"
#include "text/jinja_value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace deltabit::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
    enum class Kind {
        Constant,     // constant
        Name,         // text = variable name
        ListLiteral,  // args = items
        TupleLiteral, // args = items
        DictLiteral,  // args = key0, value0, key1, value1, ...
        Not,          // args[0]
        Negate,       // args[0]
        Plus,         // args[0]
        Binary,       // text = "+", "-", "*", "/", "//", "%", "**", "~", "and", "or"; args = left, right
        Compare,      // args = operands (n+1), compare_ops = n operators ("==", "<", "in", "not in", ...)
        Attribute,    // args[0] . text
        Item,         // args[0] [ args[1] ]
        Slice,        // args[0] [ args[1] : args[2] : args[3] ], absent parts null
        Call,         // args[0] ( args[1..], keyword_args )
        Filter,       // args[0] | text ( args[1..], keyword_args ); args[0] null inside {% filter %}
        Test,         // args[0] is [not] text ( args[1..] )
        Conditional,  // args = value_if_true, condition, value_if_false (null: undefined)
    };

    Kind kind = Kind::Constant;
    SourcePosition position;
    std::string text;
    Value constant;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> keyword_args;
    std::vector<std::string> compare_ops;
    bool negated = false;  // Test: `is not`
};

struct Stmt {
    enum class Kind {
        Text,         // text: template data, written as is
        Output,       // {{ expr }}
        If,           // expr = condition, body, else_body (an elif is an If alone in else_body)
        For,          // targets in expr [if loop_filter], body, else_body
        Set,          // targets = expr, or namespace_name.attribute = expr
        SetBlock,     // targets[0] = rendered body, optionally through filter
        Macro,        // text = name, parameters, body
        CallBlock,    // expr = the macro call, parameters = caller's parameters, body = caller
        FilterBlock,  // filter = Filter expression with null operand, body
        Break,
        Continue,
        Scope,        // {% generation %}: renders its body (HF's assistant-mask marker)
    };

    Kind kind = Kind::Text;
    SourcePosition position;
    std::string text;
    ExprPtr expr;
    ExprPtr loop_filter;
    ExprPtr filter;
    std::vector<std::string> targets;
    std::string namespace_name;  // Set on `ns.attr`
    std::string attribute;
    std::vector<std::pair<std::string, ExprPtr>> parameters;  // name, default (null when none)
    Body body;
    Body else_body;
};

struct Program {
    Body body;
};

}  // namespace deltabit::text::jinja
