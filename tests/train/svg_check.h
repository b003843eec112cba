// A small well-formedness check for the SVG the trainer writes (train/curves_plot.h), and the queries the
// tests make on it. Not a general XML parser: it accepts what a well-formed document of elements,
// double-quoted attributes and text is (the only XML the plot emits) and refuses the rest — a tag left
// open or closed out of order, an attribute without quotes or repeated, a raw '<' or a bare '&' in text
// or a value, text outside the root — with the byte offset, so a test can fail on any of them.
#pragma once

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace deltabit::test {

struct SvgElement {
    std::string name;
    std::map<std::string, std::string> attributes;
    std::string text;  // character data directly inside (entities left as written)
    std::string attribute(const std::string& key) const {
        const auto it = attributes.find(key);
        return it == attributes.end() ? std::string() : it->second;
    }
};

struct SvgDocument {
    std::string error;  // empty: well-formed
    std::vector<SvgElement> elements;  // document order

    std::vector<SvgElement> with_class(const std::string& css_class) const {
        std::vector<SvgElement> out;
        for (const SvgElement& e : elements)
            if (e.attribute("class") == css_class) out.push_back(e);
        return out;
    }
    std::vector<SvgElement> named(const std::string& name) const {
        std::vector<SvgElement> out;
        for (const SvgElement& e : elements)
            if (e.name == name) out.push_back(e);
        return out;
    }
};

namespace svg_detail {

inline bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == ':' || c == '.';
}

// '&' must start one of XML's five entities or a character reference.
inline bool entities_ok(const std::string& text) {
    for (size_t i = text.find('&'); i != std::string::npos; i = text.find('&', i + 1)) {
        bool ok = false;
        for (const char* entity : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
            ok = ok || text.compare(i, std::string(entity).size(), entity) == 0;
        if (!ok && text.compare(i, 2, "&#") == 0) ok = text.find(';', i) != std::string::npos;
        if (!ok) return false;
    }
    return true;
}

}  // namespace svg_detail

inline SvgDocument parse_svg(const std::string& s) {
    using namespace svg_detail;
    SvgDocument doc;
    std::vector<size_t> open;  // indices into doc.elements
    bool root_closed = false;
    size_t i = 0;
    auto fail = [&](const std::string& why) {
        doc.error = "offset " + std::to_string(i) + ": " + why;
        return doc;
    };
    while (i < s.size()) {
        if (s[i] != '<') {
            const size_t end = s.find('<', i);
            const std::string text = s.substr(i, end == std::string::npos ? std::string::npos : end - i);
            if (!entities_ok(text)) return fail("a bare '&' in text");
            if (open.empty() && text.find_first_not_of(" \t\r\n") != std::string::npos)
                return fail("text outside the root element");
            if (!open.empty()) doc.elements[open.back()].text += text;
            i = end == std::string::npos ? s.size() : end;
            continue;
        }
        if (s.compare(i, 2, "</") == 0) {
            size_t j = i + 2;
            while (j < s.size() && is_name_char(s[j])) ++j;
            const std::string name = s.substr(i + 2, j - i - 2);
            if (j >= s.size() || s[j] != '>') return fail("malformed closing tag </" + name);
            if (open.empty() || doc.elements[open.back()].name != name)
                return fail("</" + name + "> closes " + (open.empty() ? "nothing" : doc.elements[open.back()].name));
            open.pop_back();
            if (open.empty()) root_closed = true;
            i = j + 1;
            continue;
        }
        if (root_closed || (open.empty() && !doc.elements.empty())) return fail("a second root element");
        size_t j = i + 1;
        while (j < s.size() && is_name_char(s[j])) ++j;
        SvgElement element{s.substr(i + 1, j - i - 1), {}, {}};
        if (element.name.empty()) return fail("'<' not starting a tag");
        while (true) {
            while (j < s.size() && (s[j] == ' ' || s[j] == '\n' || s[j] == '\t')) ++j;
            if (j >= s.size()) return fail("tag <" + element.name + " not closed");
            if (s[j] == '>' || s.compare(j, 2, "/>") == 0) break;
            size_t k = j;
            while (k < s.size() && is_name_char(s[k])) ++k;
            const std::string key = s.substr(j, k - j);
            if (key.empty() || k + 1 >= s.size() || s[k] != '=' || s[k + 1] != '"')
                return fail("attribute of <" + element.name + "> is not name=\"value\"");
            const size_t close = s.find('"', k + 2);
            if (close == std::string::npos) return fail("unterminated attribute value");
            const std::string value = s.substr(k + 2, close - k - 2);
            if (value.find('<') != std::string::npos || !entities_ok(value))
                return fail("'<' or a bare '&' in attribute " + key);
            if (!element.attributes.emplace(key, value).second) return fail("attribute " + key + " repeated");
            j = close + 1;
            if (j < s.size() && s[j] != ' ' && s[j] != '\n' && s[j] != '>' && s[j] != '/')
                return fail("no space after attribute " + key);
        }
        const bool self_closing = s[j] == '/';
        doc.elements.push_back(element);
        if (!self_closing) open.push_back(doc.elements.size() - 1);
        else if (open.empty()) root_closed = true;
        i = j + (self_closing ? 2 : 1);
    }
    if (!open.empty()) return fail("<" + doc.elements[open.back()].name + "> never closed");
    if (doc.elements.empty() || doc.elements[0].name != "svg") return fail("the root is not <svg>");
    return doc;
}

// "x1,y1 x2,y2 ..." of a polyline as numbers.
struct SvgPoint {
    double x, y;
};
inline std::vector<SvgPoint> polyline_points(const SvgElement& polyline) {
    std::vector<SvgPoint> out;
    std::istringstream in(polyline.attribute("points"));
    std::string pair;
    while (in >> pair) {
        const size_t comma = pair.find(',');
        out.push_back({std::strtod(pair.c_str(), nullptr), std::strtod(pair.c_str() + comma + 1, nullptr)});
    }
    return out;
}

}  // namespace deltabit::test
