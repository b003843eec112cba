#include "text/jinja_parser.h"

#include "text/jinja_builtins.h"

#include <algorithm>
#include <initializer_list>

namespace deltabit::text::jinja {

namespace {

bool is_reserved(std::string_view name) {
    return name == "and" || name == "or" || name == "not" || name == "in" || name == "is" || name == "if" ||
           name == "else";
}

std::string describe(const Token& t) {
    switch (t.kind) {
        case Token::Kind::Text: return "template text";
        case Token::Kind::VarBegin: return "'{{'";
        case Token::Kind::VarEnd: return "'}}'";
        case Token::Kind::BlockBegin: return "'{%'";
        case Token::Kind::BlockEnd: return "'%}'";
        case Token::Kind::Name: return "'" + t.value + "'";
        case Token::Kind::String: return "a string";
        case Token::Kind::Integer:
        case Token::Kind::Float: return "'" + t.value + "'";
        case Token::Kind::Operator: return "'" + t.value + "'";
        case Token::Kind::End: return "end of template";
    }
    return "?";
}

ExprPtr make_expr(Expr::Kind kind, SourcePosition at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->position = at;
    return e;
}

StmtPtr make_stmt(Stmt::Kind kind, SourcePosition at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->position = at;
    return s;
}

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

    Program run() {
        Program program;
        program.body = parse_body({});
        return program;
    }

private:
    // ---- token helpers ----
    const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
    const Token& next() {
        const Token& t = peek();
        if (pos_ < tokens_.size() - 1) ++pos_;
        return t;
    }
    bool at_op(std::string_view op, size_t ahead = 0) const {
        return peek(ahead).kind == Token::Kind::Operator && peek(ahead).value == op;
    }
    bool at_name(std::string_view name, size_t ahead = 0) const {
        return peek(ahead).kind == Token::Kind::Name && peek(ahead).value == name;
    }
    [[noreturn]] void fail(const Token& at, const std::string& message) const {
        throw TemplateError(at.position, message, TemplateError::Origin::Syntax);
    }
    void expect_op(std::string_view op) {
        if (!at_op(op)) fail(peek(), "expected '" + std::string(op) + "', got " + describe(peek()));
        next();
    }
    const Token& expect_name() {
        if (peek().kind != Token::Kind::Name) fail(peek(), "expected a name, got " + describe(peek()));
        return next();
    }
    void expect_block_end() {
        if (peek().kind != Token::Kind::BlockEnd) fail(peek(), "expected '%}', got " + describe(peek()));
        next();
    }
    // At `{% keyword`: consumes both and returns the keyword token.
    const Token& block_keyword() {
        next();  // {%
        return next();
    }

    // Nesting is bounded so that a hostile template (a model file is not trusted input) cannot
    // exhaust the stack: real chat templates nest a dozen levels at most.
    static constexpr int kMaxNesting = 256;
    struct NestingGuard {
        Parser& parser;
        explicit NestingGuard(Parser& p) : parser(p) {
            if (++parser.nesting_ > kMaxNesting) parser.fail(parser.peek(), "template nests deeper than 256 levels");
        }
        ~NestingGuard() { --parser.nesting_; }
    };

    // ---- statements ----
    Body parse_body(std::initializer_list<std::string_view> end_keywords) {
        Body body;
        while (true) {
            const Token& t = peek();
            switch (t.kind) {
                case Token::Kind::End:
                    if (end_keywords.size() != 0)
                        fail(t, "unexpected end of template, expected '" + std::string(*(end_keywords.end() - 1)) + "'");
                    return body;
                case Token::Kind::Text: {
                    auto s = make_stmt(Stmt::Kind::Text, t.position);
                    s->text = next().value;
                    body.push_back(std::move(s));
                    break;
                }
                case Token::Kind::VarBegin: {
                    auto s = make_stmt(Stmt::Kind::Output, next().position);
                    s->expr = parse_tuple(true);
                    if (peek().kind != Token::Kind::VarEnd) fail(peek(), "expected '}}', got " + describe(peek()));
                    next();
                    body.push_back(std::move(s));
                    break;
                }
                case Token::Kind::BlockBegin: {
                    const Token& keyword = peek(1);
                    if (keyword.kind != Token::Kind::Name) fail(keyword, "expected a statement name, got " + describe(keyword));
                    if (std::find(end_keywords.begin(), end_keywords.end(), keyword.value) != end_keywords.end())
                        return body;
                    next();
                    body.push_back(parse_statement());
                    break;
                }
                default: fail(t, "unexpected " + describe(t));
            }
        }
    }

    StmtPtr parse_statement() {
        NestingGuard guard(*this);
        const Token& keyword = next();
        const std::string& k = keyword.value;
        if (k == "if") return parse_if(keyword.position);
        if (k == "for") return parse_for(keyword.position);
        if (k == "set") return parse_set(keyword.position);
        if (k == "macro") return parse_macro(keyword.position);
        if (k == "call") return parse_call_block(keyword.position);
        if (k == "filter") return parse_filter_block(keyword.position);
        if (k == "break" || k == "continue") {
            if (loop_depth_ == 0) fail(keyword, "'" + k + "' outside of a loop");
            expect_block_end();
            return make_stmt(k == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, keyword.position);
        }
        if (k == "generation") {
            expect_block_end();
            auto s = make_stmt(Stmt::Kind::Scope, keyword.position);
            s->body = parse_body({"endgeneration"});
            block_keyword();
            expect_block_end();
            return s;
        }
        if (k == "include" || k == "import" || k == "from" || k == "extends" || k == "block" || k == "with" ||
            k == "autoescape" || k == "do")
            fail(keyword, "'" + k + "' is not supported in chat templates");
        if (k.starts_with("end") || k == "elif" || k == "else")
            fail(keyword, "unexpected '" + k + "'");
        fail(keyword, "unknown statement '" + k + "'");
    }

    StmtPtr parse_if(SourcePosition at) {
        auto s = make_stmt(Stmt::Kind::If, at);
        s->expr = parse_tuple(true);
        expect_block_end();
        s->body = parse_body({"elif", "else", "endif"});
        const Token& keyword = block_keyword();
        if (keyword.value == "elif") {
            // The nested If consumes everything through the shared endif.
            s->else_body.push_back(parse_if(keyword.position));
            return s;
        }
        if (keyword.value == "else") {
            expect_block_end();
            s->else_body = parse_body({"endif"});
            block_keyword();
        }
        expect_block_end();
        return s;
    }

    std::vector<std::string> parse_targets() {
        std::vector<std::string> names;
        bool parenthesized = at_op("(");
        if (parenthesized) next();
        do {
            const Token& name = expect_name();
            if (is_reserved(name.value)) fail(name, "cannot assign to '" + name.value + "'");
            names.push_back(name.value);
        } while (at_op(",") && (next(), peek().kind == Token::Kind::Name));
        if (parenthesized) expect_op(")");
        return names;
    }

    StmtPtr parse_for(SourcePosition at) {
        auto s = make_stmt(Stmt::Kind::For, at);
        s->targets = parse_targets();
        if (!at_name("in")) fail(peek(), "expected 'in' after the loop variable, got " + describe(peek()));
        next();
        s->expr = parse_tuple(false);
        if (at_name("if")) {
            next();
            s->loop_filter = parse_expression();
        }
        if (at_name("recursive")) fail(peek(), "recursive loops are not supported");
        expect_block_end();
        ++loop_depth_;
        s->body = parse_body({"else", "endfor"});
        --loop_depth_;
        if (block_keyword().value == "else") {
            expect_block_end();
            s->else_body = parse_body({"endfor"});
            block_keyword();
        }
        expect_block_end();
        return s;
    }

    StmtPtr parse_set(SourcePosition at) {
        if (peek().kind == Token::Kind::Name && at_op(".", 1)) {
            auto s = make_stmt(Stmt::Kind::Set, at);
            s->namespace_name = next().value;
            next();
            s->attribute = expect_name().value;
            expect_op("=");
            s->expr = parse_tuple(true);
            expect_block_end();
            return s;
        }
        std::vector<std::string> targets = parse_targets();
        if (at_op("=")) {
            next();
            auto s = make_stmt(Stmt::Kind::Set, at);
            s->targets = std::move(targets);
            s->expr = parse_tuple(true);
            expect_block_end();
            return s;
        }
        if (targets.size() != 1) fail(peek(), "a block set assigns one name");
        auto s = make_stmt(Stmt::Kind::SetBlock, at);
        s->targets = std::move(targets);
        if (at_op("|")) s->filter = parse_filter_chain(nullptr);
        expect_block_end();
        s->body = parse_body({"endset"});
        block_keyword();
        expect_block_end();
        return s;
    }

    std::vector<std::pair<std::string, ExprPtr>> parse_parameters() {
        std::vector<std::pair<std::string, ExprPtr>> params;
        expect_op("(");
        while (!at_op(")")) {
            if (!params.empty()) expect_op(",");
            if (at_op(")")) break;
            const Token& name = expect_name();
            for (const auto& p : params)
                if (p.first == name.value) fail(name, "duplicate parameter '" + name.value + "'");
            ExprPtr dflt;
            if (at_op("=")) {
                next();
                dflt = parse_expression();
            } else if (!params.empty() && params.back().second) {
                fail(name, "parameter without a default follows one with a default");
            }
            params.emplace_back(name.value, std::move(dflt));
        }
        next();
        return params;
    }

    StmtPtr parse_macro(SourcePosition at) {
        auto s = make_stmt(Stmt::Kind::Macro, at);
        s->text = expect_name().value;
        s->parameters = parse_parameters();
        expect_block_end();
        int saved = loop_depth_;
        loop_depth_ = 0;  // `break` inside a macro cannot reach a loop outside it
        s->body = parse_body({"endmacro"});
        loop_depth_ = saved;
        block_keyword();
        expect_block_end();
        return s;
    }

    StmtPtr parse_call_block(SourcePosition at) {
        auto s = make_stmt(Stmt::Kind::CallBlock, at);
        if (at_op("(")) s->parameters = parse_parameters();
        const Token& start = peek();
        s->expr = parse_expression();
        if (s->expr->kind != Expr::Kind::Call) fail(start, "expected a macro call after 'call'");
        expect_block_end();
        int saved = loop_depth_;
        loop_depth_ = 0;
        s->body = parse_body({"endcall"});
        loop_depth_ = saved;
        block_keyword();
        expect_block_end();
        return s;
    }

    StmtPtr parse_filter_block(SourcePosition at) {
        auto s = make_stmt(Stmt::Kind::FilterBlock, at);
        s->filter = parse_filter_chain(nullptr, /*leading_pipe=*/false);
        expect_block_end();
        s->body = parse_body({"endfilter"});
        block_keyword();
        expect_block_end();
        return s;
    }

    // ---- expressions ----
    ExprPtr parse_expression() {
        NestingGuard guard(*this);
        return parse_conditional();
    }

    // A comma-separated list outside brackets is a tuple (`{% set a = 1, 2 %}`, `for x in a, b`).
    ExprPtr parse_tuple(bool with_conditional) {
        SourcePosition at = peek().position;
        ExprPtr first = with_conditional ? parse_expression() : parse_or();
        if (!at_op(",")) return first;
        auto tuple = make_expr(Expr::Kind::TupleLiteral, at);
        tuple->args.push_back(std::move(first));
        while (at_op(",")) {
            next();
            if (peek().kind == Token::Kind::BlockEnd || peek().kind == Token::Kind::VarEnd || at_op(")")) break;
            tuple->args.push_back(with_conditional ? parse_expression() : parse_or());
        }
        return tuple;
    }

    ExprPtr parse_conditional() {
        ExprPtr value = parse_or();
        while (at_name("if")) {
            auto cond = make_expr(Expr::Kind::Conditional, next().position);
            ExprPtr test = parse_or();
            ExprPtr otherwise;
            if (at_name("else")) {
                next();
                otherwise = parse_conditional();
            }
            cond->args.push_back(std::move(value));
            cond->args.push_back(std::move(test));
            cond->args.push_back(std::move(otherwise));
            value = std::move(cond);
        }
        return value;
    }

    ExprPtr binary(std::string op, SourcePosition at, ExprPtr left, ExprPtr right) {
        auto e = make_expr(Expr::Kind::Binary, at);
        e->text = std::move(op);
        e->args.push_back(std::move(left));
        e->args.push_back(std::move(right));
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        while (at_name("or")) {
            SourcePosition at = next().position;
            left = binary("or", at, std::move(left), parse_and());
        }
        return left;
    }

    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (at_name("and")) {
            SourcePosition at = next().position;
            left = binary("and", at, std::move(left), parse_not());
        }
        return left;
    }

    ExprPtr parse_not() {
        NestingGuard guard(*this);
        if (at_name("not")) {
            auto e = make_expr(Expr::Kind::Not, next().position);
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        SourcePosition at = peek().position;
        ExprPtr first = parse_math1();
        ExprPtr chain;
        while (true) {
            std::string op;
            if (peek().kind == Token::Kind::Operator &&
                (peek().value == "==" || peek().value == "!=" || peek().value == "<" || peek().value == "<=" ||
                 peek().value == ">" || peek().value == ">=")) {
                op = next().value;
            } else if (at_name("in")) {
                next();
                op = "in";
            } else if (at_name("not") && at_name("in", 1)) {
                next();
                next();
                op = "not in";
            } else {
                break;
            }
            if (!chain) {
                chain = make_expr(Expr::Kind::Compare, at);
                chain->args.push_back(std::move(first));
            }
            chain->compare_ops.push_back(op);
            chain->args.push_back(parse_math1());
        }
        return chain ? std::move(chain) : std::move(first);
    }

    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (at_op("+") || at_op("-")) {
            const Token& op = next();
            left = binary(op.value, op.position, std::move(left), parse_concat());
        }
        return left;
    }

    ExprPtr parse_concat() {
        ExprPtr left = parse_math2();
        while (at_op("~")) {
            const Token& op = next();
            left = binary("~", op.position, std::move(left), parse_math2());
        }
        return left;
    }

    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
            const Token& op = next();
            left = binary(op.value, op.position, std::move(left), parse_pow());
        }
        return left;
    }

    ExprPtr parse_pow() {
        ExprPtr left = parse_unary(true);
        while (at_op("**")) {
            const Token& op = next();
            left = binary("**", op.position, std::move(left), parse_unary(true));
        }
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        NestingGuard guard(*this);
        ExprPtr node;
        if (at_op("-") || at_op("+")) {
            const Token& op = next();
            node = make_expr(op.value == "-" ? Expr::Kind::Negate : Expr::Kind::Plus, op.position);
            node->args.push_back(parse_unary(false));
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_and_test(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& t = peek();
        switch (t.kind) {
            case Token::Kind::Name: {
                next();
                auto e = make_expr(Expr::Kind::Constant, t.position);
                if (t.value == "true" || t.value == "True") e->constant = Value::boolean(true);
                else if (t.value == "false" || t.value == "False") e->constant = Value::boolean(false);
                else if (t.value == "none" || t.value == "None") e->constant = Value::none();
                else if (is_reserved(t.value)) fail(t, "expected an expression, got '" + t.value + "'");
                else {
                    e->kind = Expr::Kind::Name;
                    e->text = t.value;
                }
                return e;
            }
            case Token::Kind::String: {
                auto e = make_expr(Expr::Kind::Constant, t.position);
                std::string value;
                while (peek().kind == Token::Kind::String) value += next().value;  // 'a' 'b' is 'ab'
                e->constant = Value::string(std::move(value));
                return e;
            }
            case Token::Kind::Integer: {
                next();
                auto e = make_expr(Expr::Kind::Constant, t.position);
                try {
                    e->constant = Value::integer(std::stoll(t.value));
                } catch (const std::out_of_range&) {
                    fail(t, "integer literal " + t.value + " does not fit in 64 bits");
                }
                return e;
            }
            case Token::Kind::Float: {
                next();
                auto e = make_expr(Expr::Kind::Constant, t.position);
                e->constant = Value::number(std::stod(t.value));
                return e;
            }
            case Token::Kind::Operator:
                if (t.value == "(") {
                    next();
                    if (at_op(")")) {
                        next();
                        return make_expr(Expr::Kind::TupleLiteral, t.position);
                    }
                    ExprPtr inner = parse_tuple(true);
                    expect_op(")");
                    return inner;
                }
                if (t.value == "[") {
                    next();
                    auto e = make_expr(Expr::Kind::ListLiteral, t.position);
                    while (!at_op("]")) {
                        if (!e->args.empty()) expect_op(",");
                        if (at_op("]")) break;
                        e->args.push_back(parse_expression());
                    }
                    next();
                    return e;
                }
                if (t.value == "{") {
                    next();
                    auto e = make_expr(Expr::Kind::DictLiteral, t.position);
                    while (!at_op("}")) {
                        if (!e->args.empty()) expect_op(",");
                        if (at_op("}")) break;
                        e->args.push_back(parse_expression());
                        expect_op(":");
                        e->args.push_back(parse_expression());
                    }
                    next();
                    return e;
                }
                break;
            default: break;
        }
        fail(t, "expected an expression, got " + describe(t));
    }

    void parse_call_arguments(Expr& call) {
        expect_op("(");
        bool first = true;
        while (!at_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (at_op(")")) break;
            if (at_op("*") || at_op("**")) fail(peek(), "argument unpacking (* and **) is not supported");
            if (peek().kind == Token::Kind::Name && at_op("=", 1)) {
                std::string name = next().value;
                next();
                call.keyword_args.emplace_back(std::move(name), parse_expression());
            } else {
                if (!call.keyword_args.empty()) fail(peek(), "positional argument follows keyword argument");
                call.args.push_back(parse_expression());
            }
        }
        next();
    }

    ExprPtr parse_postfix(ExprPtr node) {
        while (true) {
            if (at_op(".")) {
                next();
                const Token& attr = peek();
                if (attr.kind == Token::Kind::Name) {
                    next();
                    auto e = make_expr(Expr::Kind::Attribute, attr.position);
                    e->text = attr.value;
                    e->args.push_back(std::move(node));
                    node = std::move(e);
                } else if (attr.kind == Token::Kind::Integer) {
                    next();
                    auto e = make_expr(Expr::Kind::Item, attr.position);
                    auto index = make_expr(Expr::Kind::Constant, attr.position);
                    index->constant = Value::integer(std::stoll(attr.value));
                    e->args.push_back(std::move(node));
                    e->args.push_back(std::move(index));
                    node = std::move(e);
                } else {
                    fail(attr, "expected an attribute name after '.', got " + describe(attr));
                }
            } else if (at_op("[")) {
                node = parse_subscript(std::move(node));
            } else if (at_op("(")) {
                auto call = make_expr(Expr::Kind::Call, node->position);
                call->args.push_back(std::move(node));
                parse_call_arguments(*call);
                node = std::move(call);
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr object) {
        const Token& open = next();
        std::vector<ExprPtr> parts(1);
        bool is_slice = false;
        while (!at_op("]")) {
            if (at_op(":")) {
                next();
                is_slice = true;
                parts.emplace_back();
                if (parts.size() > 3) fail(open, "a slice has at most three parts");
                continue;
            }
            if (parts.back()) fail(peek(), "expected ']' or ':', got " + describe(peek()));
            parts.back() = parse_expression();
        }
        next();
        if (!is_slice) {
            if (!parts[0]) fail(open, "expected an index inside '[]'");
            auto e = make_expr(Expr::Kind::Item, open.position);
            e->args.push_back(std::move(object));
            e->args.push_back(std::move(parts[0]));
            return e;
        }
        auto e = make_expr(Expr::Kind::Slice, open.position);
        e->args.push_back(std::move(object));
        parts.resize(3);
        for (ExprPtr& p : parts) e->args.push_back(std::move(p));
        return e;
    }

    // `| f(args) | g ...` applied to `operand` (null for {% filter %} and block set).
    ExprPtr parse_filter_chain(ExprPtr operand, bool leading_pipe = true) {
        bool need_pipe = leading_pipe;
        while (!need_pipe || at_op("|")) {
            if (need_pipe) next();
            need_pipe = true;
            operand = parse_one_filter(std::move(operand));
        }
        return operand;
    }

    ExprPtr parse_one_filter(ExprPtr operand) {
        const Token& name = expect_name();
        if (!find_filter(name.value)) fail(name, "unknown filter '" + name.value + "'");
        auto f = make_expr(Expr::Kind::Filter, name.position);
        f->text = name.value;
        f->args.push_back(std::move(operand));
        if (at_op("(")) parse_call_arguments(*f);
        return f;
    }

    ExprPtr parse_filter_and_test(ExprPtr node) {
        while (true) {
            if (at_op("|")) {
                next();
                node = parse_one_filter(std::move(node));
            } else if (at_name("is")) {
                next();
                bool negated = at_name("not");
                if (negated) next();
                const Token& name = expect_name();
                if (!find_test(name.value)) fail(name, "unknown test '" + name.value + "'");
                auto t = make_expr(Expr::Kind::Test, name.position);
                t->text = name.value;
                t->negated = negated;
                t->args.push_back(std::move(node));
                const Token& look = peek();
                if (at_op("(")) {
                    parse_call_arguments(*t);
                } else if ((look.kind == Token::Kind::Name && !is_reserved(look.value)) ||
                           look.kind == Token::Kind::String || look.kind == Token::Kind::Integer ||
                           look.kind == Token::Kind::Float || at_op("[") || at_op("{")) {
                    // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                node = std::move(t);
            } else if (at_op("(")) {
                auto call = make_expr(Expr::Kind::Call, node->position);
                call->args.push_back(std::move(node));
                parse_call_arguments(*call);
                node = std::move(call);
            } else {
                return node;
            }
        }
    }

    std::vector<Token> tokens_;
    size_t pos_ = 0;
    int loop_depth_ = 0;
    int nesting_ = 0;
};

}  // namespace

Program parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).run(); }

}  // namespace deltabit::text::jinja
