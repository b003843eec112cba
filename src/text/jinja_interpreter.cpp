// The tree-walking interpreter behind jinja::Template.
//
// Scopes follow jinja2: the template body has one scope; each loop iteration, macro call and call
// block gets a child scope (so a `set` inside a loop is gone after it — the reason templates use
// namespace()); `if` makes no scope. Macros close over the scope they were defined in and see later
// assignments to it, as Python closures do.
#include "text/jinja.h"

#include "text/jinja_builtins.h"
#include "text/jinja_parser.h"

#include <memory>

namespace deltabit::text::jinja {

namespace {

// raise_exception(message) from the template: a refusal of the input, reported as such.
class RaisedByTemplate : public ValueError {
public:
    using ValueError::ValueError;
};

struct Scope {
    std::shared_ptr<Scope> parent;
    Dict variables;

    const Value* lookup(std::string_view name) const {
        for (const Scope* s = this; s; s = s->parent.get())
            if (const Value* v = s->variables.find(name)) return v;
        return nullptr;
    }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
    auto s = std::make_shared<Scope>();
    s->parent = parent;
    return s;
}

enum class Flow { Normal, Break, Continue };

class Interpreter {
public:
    explicit Interpreter(const RenderOptions& options) : options_(options) {}

    std::string run(const Program& program, const Dict& variables) {
        auto globals = std::make_shared<Scope>();
        install_globals(globals->variables);
        auto context = child_of(globals);
        for (const auto& [name, value] : variables.entries()) context->variables.set(name, value);
        std::string out;
        exec(program.body, child_of(context), out);
        return out;
    }

private:
    // ---- statements ----
    Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
        for (const StmtPtr& stmt : body) {
            Flow flow = exec(*stmt, scope, out);
            if (flow != Flow::Normal) return flow;
        }
        return Flow::Normal;
    }

    Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
        switch (s.kind) {
            case Stmt::Kind::Text: out += s.text; return Flow::Normal;
            case Stmt::Kind::Output: out += to_str(eval(*s.expr, scope)); return Flow::Normal;
            case Stmt::Kind::If: return exec(truthy(eval(*s.expr, scope)) ? s.body : s.else_body, scope, out);
            case Stmt::Kind::For: exec_for(s, scope, out); return Flow::Normal;
            case Stmt::Kind::Set: exec_set(s, scope); return Flow::Normal;
            case Stmt::Kind::SetBlock: {
                std::string rendered;
                exec(s.body, scope, rendered);
                Value v = Value::string(std::move(rendered));
                if (s.filter) v = eval_filter(*s.filter, scope, &v);
                scope->variables.set(s.targets[0], std::move(v));
                return Flow::Normal;
            }
            case Stmt::Kind::Macro: scope->variables.set(s.text, make_macro(s, scope)); return Flow::Normal;
            case Stmt::Kind::CallBlock: out += to_str(exec_call_block(s, scope)); return Flow::Normal;
            case Stmt::Kind::FilterBlock: {
                std::string rendered;
                exec(s.body, scope, rendered);
                Value v = Value::string(std::move(rendered));
                out += to_str(eval_filter(*s.filter, scope, &v));
                return Flow::Normal;
            }
            case Stmt::Kind::Break: return Flow::Break;
            case Stmt::Kind::Continue: return Flow::Continue;
            case Stmt::Kind::Scope: return exec(s.body, scope, out);
        }
        return Flow::Normal;
    }

    void bind_targets(const std::vector<std::string>& targets, const Value& value, Scope& scope, SourcePosition at) {
        if (targets.size() == 1) {
            scope.variables.set(targets[0], value);
            return;
        }
        List parts;
        try {
            parts = iterate(value);
        } catch (const ValueError& e) {
            throw TemplateError(at, std::string("cannot unpack: ") + e.what(), TemplateError::Origin::Runtime);
        }
        if (parts.size() != targets.size())
            throw TemplateError(at,
                                parts.size() > targets.size()
                                    ? fmt::format("too many values to unpack (expected {})", targets.size())
                                    : fmt::format("not enough values to unpack (expected {}, got {})", targets.size(), parts.size()),
                                TemplateError::Origin::Runtime);
        for (size_t i = 0; i < targets.size(); ++i) scope.variables.set(targets[i], parts[i]);
    }

    void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
        Value iterable = eval(*s.expr, scope);
        List items = located(s.expr->position, [&] { return iterate(iterable); });
        if (s.loop_filter) {
            List kept;
            for (const Value& item : items) {
                auto probe = child_of(scope);
                bind_targets(s.targets, item, *probe, s.position);
                if (truthy(eval(*s.loop_filter, probe))) kept.push_back(item);
            }
            items = std::move(kept);
        }
        // jinja2 runs the else block when no iteration ran its body to the end: an empty loop, but
        // also one whose every iteration hit `continue` or that broke out in its first iteration.
        bool completed_an_iteration = false;
        const int64_t n = static_cast<int64_t>(items.size());
        for (int64_t i = 0; i < n; ++i) {
            auto iteration = child_of(scope);
            Dict loop;
            loop.set("index", Value::integer(i + 1));
            loop.set("index0", Value::integer(i));
            loop.set("revindex", Value::integer(n - i));
            loop.set("revindex0", Value::integer(n - i - 1));
            loop.set("first", Value::boolean(i == 0));
            loop.set("last", Value::boolean(i == n - 1));
            loop.set("length", Value::integer(n));
            loop.set("depth", Value::integer(1));
            loop.set("depth0", Value::integer(0));
            loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
            loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
            loop.set("cycle", Value::callable("loop.cycle", [i](const CallArgs& args) {
                if (args.positional.empty()) value_error("no items for cycling given");
                return args.positional[static_cast<size_t>(i) % args.positional.size()];
            }));
            iteration->variables.set("loop", Value::dict(std::move(loop)));
            bind_targets(s.targets, items[static_cast<size_t>(i)], *iteration, s.position);
            Flow flow = exec(s.body, iteration, out);
            if (flow == Flow::Break) break;
            if (flow == Flow::Normal) completed_an_iteration = true;
        }
        if (!completed_an_iteration) exec(s.else_body, child_of(scope), out);
    }

    void exec_set(const Stmt& s, const ScopePtr& scope) {
        Value value = eval(*s.expr, scope);
        if (s.namespace_name.empty()) {
            bind_targets(s.targets, value, *scope, s.position);
            return;
        }
        const Value* ns = scope->lookup(s.namespace_name);
        if (!ns || !ns->is_namespace())
            throw TemplateError(s.position, "cannot assign attribute on non-namespace object '" + s.namespace_name + "'",
                                TemplateError::Origin::Runtime);
        ns->namespace_attributes().set(s.attribute, std::move(value));
    }

    // ---- macros ----
    Value make_macro(const Stmt& macro, const ScopePtr& closure) {
        return Value::callable("macro '" + macro.text + "'", [this, &macro, closure](const CallArgs& args) {
            return call_macro_body(macro.parameters, macro.body, closure, args);
        });
    }

    Value call_macro_body(const std::vector<std::pair<std::string, ExprPtr>>& parameters, const Body& body,
                          const ScopePtr& closure, const CallArgs& args) {
        if (call_depth_ >= options_.max_call_depth) value_error("maximum macro call depth ({}) exceeded", options_.max_call_depth);
        auto scope = child_of(closure);
        List varargs;
        for (size_t i = 0; i < args.positional.size(); ++i) {
            if (i < parameters.size()) scope->variables.set(parameters[i].first, args.positional[i]);
            else varargs.push_back(args.positional[i]);
        }
        Dict kwargs;
        for (const auto& [name, value] : args.keyword) {
            bool is_parameter = false;
            for (const auto& p : parameters) is_parameter = is_parameter || p.first == name;
            if (name == "caller" || is_parameter) scope->variables.set(name, value);
            else kwargs.set(name, value);
        }
        // Missing arguments take their default, evaluated in the macro's scope (it may use earlier
        // parameters), or are Undefined.
        for (const auto& [name, dflt] : parameters) {
            if (scope->variables.contains(name)) continue;
            scope->variables.set(name, dflt ? eval(*dflt, scope) : Value::undefined("parameter '" + name + "' was not given"));
        }
        scope->variables.set("varargs", Value::list(std::move(varargs)));
        scope->variables.set("kwargs", Value::dict(std::move(kwargs)));
        ++call_depth_;
        std::string out;
        try {
            exec(body, scope, out);
        } catch (...) {
            --call_depth_;
            throw;
        }
        --call_depth_;
        return Value::string(std::move(out));
    }

    Value exec_call_block(const Stmt& s, const ScopePtr& scope) {
        const Expr& call = *s.expr;
        Value caller = Value::callable("caller", [this, &s, scope](const CallArgs& args) {
            return call_macro_body(s.parameters, s.body, scope, args);
        });
        Value callee = eval(*call.args[0], scope);
        CallArgs args = eval_arguments(call, scope, 1);
        args.keyword.emplace_back("caller", std::move(caller));
        return located(call.position, [&] { return invoke(callee, args); });
    }

    // ---- expressions ----
    template <typename F>
    auto located(SourcePosition at, F&& f) -> decltype(f()) {
        try {
            return f();
        } catch (const RaisedByTemplate& e) {
            throw TemplateError(at, e.what(), TemplateError::Origin::RaisedByTemplate);
        } catch (const ValueError& e) {
            throw TemplateError(at, e.what(), TemplateError::Origin::Runtime);
        }
    }

    Value eval(const Expr& e, const ScopePtr& scope) {
        return located(e.position, [&] { return eval_node(e, scope); });
    }

    CallArgs eval_arguments(const Expr& e, const ScopePtr& scope, size_t first) {
        CallArgs args;
        for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], scope));
        for (const auto& [name, expr] : e.keyword_args) args.keyword.emplace_back(name, eval(*expr, scope));
        return args;
    }

    static Value invoke(const Value& callee, const CallArgs& args) {
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_callable()) value_error("'{}' object is not callable", type_name(callee));
        return callee.as_callable().call(args);
    }

    // A Filter node; `injected` stands for the innermost operand of {% filter %} and block-set chains.
    Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* injected) {
        Value operand;
        if (!e.args[0]) operand = *injected;
        else if (e.args[0]->kind == Expr::Kind::Filter) operand = eval_filter(*e.args[0], scope, injected);
        else operand = eval(*e.args[0], scope);
        CallArgs args = eval_arguments(e, scope, 1);
        FilterFunction filter = find_filter(e.text);  // the parser checked that it exists
        return located(e.position, [&] { return filter(operand, args); });
    }

    Value eval_node(const Expr& e, const ScopePtr& scope) {
        switch (e.kind) {
            case Expr::Kind::Constant: return e.constant;
            case Expr::Kind::Name: {
                if (const Value* v = scope->lookup(e.text)) return *v;
                return Value::undefined("'" + e.text + "' is undefined");
            }
            case Expr::Kind::ListLiteral:
            case Expr::Kind::TupleLiteral: {
                List items;
                for (const ExprPtr& item : e.args) items.push_back(eval(*item, scope));
                return e.kind == Expr::Kind::TupleLiteral ? Value::tuple(std::move(items)) : Value::list(std::move(items));
            }
            case Expr::Kind::DictLiteral: {
                Dict d;
                for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                    Value key = eval(*e.args[i], scope);
                    if (!key.is_string()) value_error("dict keys must be strings here, got {}", type_name(key));
                    d.set(key.as_string(), eval(*e.args[i + 1], scope));
                }
                return Value::dict(std::move(d));
            }
            case Expr::Kind::Not: return Value::boolean(!truthy(eval(*e.args[0], scope)));
            case Expr::Kind::Negate:
            case Expr::Kind::Plus: {
                Value v = eval(*e.args[0], scope);
                bool negate = e.kind == Expr::Kind::Negate;
                if (v.is_float()) return Value::number(negate ? -v.as_float() : v.as_float());
                if (v.is_int() || v.is_bool()) {
                    int64_t i = v.is_bool() ? int64_t{v.as_bool()} : v.as_int();
                    return Value::integer(negate ? -i : i);
                }
                if (v.is_undefined()) fail_undefined(v);
                value_error("bad operand type for unary {}: '{}'", negate ? "-" : "+", type_name(v));
            }
            case Expr::Kind::Binary: {
                if (e.text == "and" || e.text == "or") {
                    Value left = eval(*e.args[0], scope);
                    bool take_left = e.text == "and" ? !truthy(left) : truthy(left);
                    return take_left ? left : eval(*e.args[1], scope);
                }
                Value left = eval(*e.args[0], scope);
                Value right = eval(*e.args[1], scope);
                return binary_operation(e.text, left, right);
            }
            case Expr::Kind::Compare: {
                Value left = eval(*e.args[0], scope);
                for (size_t i = 0; i < e.compare_ops.size(); ++i) {
                    Value right = eval(*e.args[i + 1], scope);
                    const std::string& op = e.compare_ops[i];
                    bool ok;
                    if (op == "==") ok = equals(left, right);
                    else if (op == "!=") ok = !equals(left, right);
                    else if (op == "in") ok = contains(right, left);
                    else if (op == "not in") ok = !contains(right, left);
                    else {
                        int c = compare(left, right);
                        ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
                    }
                    if (!ok) return Value::boolean(false);
                    left = std::move(right);
                }
                return Value::boolean(true);
            }
            case Expr::Kind::Attribute: return get_attribute(eval(*e.args[0], scope), e.text);
            case Expr::Kind::Item: {
                Value object = eval(*e.args[0], scope);
                return get_item(object, eval(*e.args[1], scope));
            }
            case Expr::Kind::Slice: {
                Value object = eval(*e.args[0], scope);
                auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], scope) : Value::none(); };
                return get_slice(object, part(1), part(2), part(3));
            }
            case Expr::Kind::Call: {
                Value callee = eval(*e.args[0], scope);
                return invoke(callee, eval_arguments(e, scope, 1));
            }
            case Expr::Kind::Filter: return eval_filter(e, scope, nullptr);
            case Expr::Kind::Test: {
                Value operand = eval(*e.args[0], scope);
                CallArgs args = eval_arguments(e, scope, 1);
                bool result = find_test(e.text)(operand, args);
                return Value::boolean(e.negated ? !result : result);
            }
            case Expr::Kind::Conditional: {
                if (truthy(eval(*e.args[1], scope))) return eval(*e.args[0], scope);
                if (e.args[2]) return eval(*e.args[2], scope);
                return Value::undefined(fmt::format("the inline if-expression on line {} evaluated to false and no else section was defined", e.position.line));
            }
        }
        value_error("unhandled expression");
    }

    // ---- globals ----
    void install_globals(Dict& g) {
        g.set("range", Value::callable("range", [this](const CallArgs& args) {
            auto integer = [](const Value& v) {
                if (!v.is_int() && !v.is_bool()) value_error("'{}' object cannot be interpreted as an integer", type_name(v));
                return v.is_bool() ? int64_t{v.as_bool()} : v.as_int();
            };
            const auto& p = args.positional;
            if (p.empty() || p.size() > 3) value_error("range expected 1 to 3 arguments, got {}", p.size());
            int64_t start = p.size() == 1 ? 0 : integer(p[0]);
            int64_t stop = integer(p.size() == 1 ? p[0] : p[1]);
            int64_t step = p.size() == 3 ? integer(p[2]) : 1;
            if (step == 0) value_error("range() arg 3 must not be zero");
            List out;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                if (static_cast<int64_t>(out.size()) >= options_.max_range_length)
                    value_error("range() longer than {} items", options_.max_range_length);
                out.push_back(Value::integer(i));
            }
            return Value::list(std::move(out));
        }));
        g.set("namespace", Value::callable("namespace", [](const CallArgs& args) {
            Dict attributes;
            if (!args.positional.empty()) {
                if (args.positional.size() > 1 || !args.positional[0].is_dict())
                    value_error("namespace() takes one mapping and keyword arguments");
                attributes = args.positional[0].as_dict();
            }
            for (const auto& [name, value] : args.keyword) attributes.set(name, value);
            return Value::make_namespace(std::move(attributes));
        }));
        g.set("dict", Value::callable("dict", [](const CallArgs& args) {
            Dict d;
            if (!args.positional.empty() && args.positional[0].is_dict()) d = args.positional[0].as_dict();
            for (const auto& [name, value] : args.keyword) d.set(name, value);
            return Value::dict(std::move(d));
        }));
        g.set("raise_exception", Value::callable("raise_exception", [](const CallArgs& args) -> Value {
            throw RaisedByTemplate(args.positional.empty() ? std::string("raise_exception() called") : to_str(args.positional[0]));
        }));
        g.set("strftime_now", Value::callable("strftime_now", [this](const CallArgs& args) {
            if (args.positional.empty() || !args.positional[0].is_string()) value_error("strftime_now() needs a format string");
            std::tm now{};
            if (options_.now) {
                now = options_.now();
            } else {
                std::time_t t = std::time(nullptr);
                localtime_r(&t, &now);
            }
            char buf[256];
            size_t n = std::strftime(buf, sizeof buf, args.positional[0].as_string().c_str(), &now);
            return Value::string(std::string(buf, n));
        }));
    }

    const RenderOptions& options_;
    int call_depth_ = 0;
};

}  // namespace

Template Template::parse(std::string_view source, const LexerOptions& options) {
    return Template(std::make_shared<const Program>(jinja::parse(tokenize(source, options))));
}

std::string Template::render(const Dict& variables, const RenderOptions& options) const {
    Interpreter interpreter(options);
    return interpreter.run(*program_, variables);
}

}  // namespace deltabit::text::jinja
