// A Jinja interpreter for chat templates: the subset of jinja2 that Hugging Face chat templates use,
// with Python's semantics, as transformers renders them (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loop controls, HF's tojson).
//
//   auto t = jinja::Template::parse(source);          // TemplateError on a syntax error
//   std::string prompt = t.render(variables);         // TemplateError on a runtime error
//
// Errors name the template position: "template line 12, column 5: unknown filter 'frobnicate'".
//
// Supported: if/elif/else, for (loop.*, `if` filter, else, tuple targets), break/continue, set (also
// tuple, ns.attr and block form), namespace, macro (defaults, varargs/kwargs, caller), call blocks,
// filter blocks, raw, comments, HF's {% generation %}; the filters and tests in jinja_builtins.h;
// str methods strip/lstrip/rstrip/split/rsplit/splitlines/startswith/endswith/upper/lower/title/
// capitalize/replace/find/count/join/format/is*, dict get/items/keys/values; range, namespace, dict,
// raise_exception, strftime_now.
//
// Where this differs from Python jinja2 (what transformers runs):
//   - ints are 64-bit (overflow is an error); case mapping is one-to-one ("ß".upper() stays "ß");
//   - not supported: include/import/extends/block/with/do, recursive loops, `*`/`**` unpacking in
//     calls, printf-style `str % args`, format specs in str.format; a macro given extra arguments
//     collects them in varargs/kwargs instead of refusing them.
//
// Where the reference the tests compare against, @huggingface/jinja 0.5.11, differs from Python
// jinja2 — deltabit follows Python in each case, and the reference conversations avoid them:
//   - strip/lstrip/rstrip ignore their `chars` argument and strip all whitespace;
//   - length and [i] on strings count UTF-16 units (slices use code points, as here);
//   - True/False/None print as true/false/"" and lists/dicts print as JSON, not Python repr;
//   - JSON 1.0 becomes the int 1; floats print JS-style (1e21, 1e-7 vs Python's 1e+21, 1e-07);
//   - object keys that look like integers move to the front (JS property order);
//   - tojson: sort_keys uses localeCompare (Python: code point order), indent=0 is one line,
//     ensure_ascii also escapes U+007F;
//   - `d.name` prefers the item over the dict method (Python: the method, so `d.items` is callable);
//   - attribute access on an undefined value yields undefined (Python raises);
//   - `is iterable` is false for dicts, `is number` false for bools, `==` is JS loose equality,
//     str + number concatenates, % takes the sign of the dividend, int() of a float floors;
//   - CRLF line ends are not normalised; unknown filters fail only when evaluated.
#pragma once

#include "text/jinja_ast.h"
#include "text/jinja_error.h"
#include "text/jinja_lexer.h"
#include "text/jinja_value.h"

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace deltabit::text::jinja {

struct RenderOptions {
    // The clock behind strftime_now(); templates such as Llama 3's print today's date. Tests pin it.
    std::function<std::tm()> now;
    // Macro calls may nest this deep (Python's recursion limit stands in for this in jinja2).
    int max_call_depth = 200;
    // range() refuses to build longer lists, so a template cannot exhaust memory.
    int64_t max_range_length = 1'000'000;
};

class Template {
public:
    static Template parse(std::string_view source, const LexerOptions& options = {});

    std::string render(const Dict& variables, const RenderOptions& options = {}) const;

private:
    explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
    std::shared_ptr<const Program> program_;
};

}  // namespace deltabit::text::jinja
