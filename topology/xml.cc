#include "topology/xml.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include "core/files.h"
#include "core/status.h"

namespace braid::topo {

const std::string* XmlNode::attr(std::string_view key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

std::string XmlNode::attrOr(std::string_view key, const std::string& fallback) const {
  const std::string* value = attr(key);
  return value ? *value : fallback;
}

void XmlNode::set(std::string_view key, const std::string& value) {
  for (auto& [k, v] : attrs)
    if (k == key) {
      v = value;
      return;
    }
  attrs.emplace_back(std::string(key), value);
}

XmlNode& XmlNode::add(std::string_view childName) {
  children.emplace_back();
  children.back().name = std::string(childName);
  return children.back();
}

XmlNode* XmlNode::child(std::string_view childName) {
  for (auto& c : children)
    if (c.name == childName) return &c;
  return nullptr;
}

const XmlNode* XmlNode::child(std::string_view childName) const {
  return const_cast<XmlNode*>(this)->child(childName);
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, const std::string& source, const XmlLimits& limits)
      : text_(text), source_(source), limits_(limits) {}

  XmlNode document() {
    XmlNode doc;
    parseContent(doc, 0);
    if (pos_ < text_.size()) error("unexpected '</' with no element open");
    return doc;
  }

 private:
  [[noreturn]] void error(const std::string& reason) {
    fail(ncclInvalidUsage, "%s:%d: %s", source_.c_str(), line_, reason.c_str());
  }

  bool startsWith(std::string_view s) const { return text_.substr(pos_, s.size()) == s; }

  void advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < text_.size(); ++i)
      if (text_[pos_++] == '\n') ++line_;
  }

  void skipPast(std::string_view end, const char* what) {
    size_t found = text_.find(end, pos_);
    if (found == std::string_view::npos) error(std::string("unterminated ") + what);
    advance(found + end.size() - pos_);
  }

  void skipSpace() {
    while (pos_ < text_.size() && isspace(static_cast<unsigned char>(text_[pos_]))) advance(1);
  }

  static bool nameChar(char c) {
    return isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
  }

  std::string name(const char* what) { return std::string(nameView(what)); }

  /// The name at pos_, as a view into the input (stable while the parser lives).
  std::string_view nameView(const char* what) {
    size_t start = pos_;
    while (pos_ < text_.size() && nameChar(text_[pos_])) ++pos_;
    if (pos_ == start) error(std::string("expected ") + what);
    return text_.substr(start, pos_ - start);
  }

  std::string decode(std::string_view raw) {
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '&') {
        out += raw[i];
        continue;
      }
      size_t semi = raw.find(';', i);
      if (semi == std::string_view::npos || semi - i > 10) error("bad character reference in attribute");
      std::string_view ref = raw.substr(i + 1, semi - i - 1);
      if (ref == "lt") out += '<';
      else if (ref == "gt") out += '>';
      else if (ref == "amp") out += '&';
      else if (ref == "quot") out += '"';
      else if (ref == "apos") out += '\'';
      else if (ref.size() > 1 && ref[0] == '#') {
        bool hex = ref[1] == 'x';
        long code = strtol(std::string(ref.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
        if (code <= 0 || code > 127) error("character reference outside ASCII in attribute");
        out += static_cast<char>(code);
      } else {
        error("unknown entity &" + std::string(ref) + ";");
      }
      i = semi;
    }
    return out;
  }

  // Repeated names are found in a hash set of the names seen (views into the input): linear in
  // the number of attributes, where comparing each with those before it was quadratic.
  void parseAttributes(XmlNode& node) {
    std::unordered_set<std::string_view> seen;
    for (;;) {
      skipSpace();
      if (pos_ >= text_.size()) error("unterminated tag <" + node.name + ">");
      char c = text_[pos_];
      if (c == '/' || c == '>') return;
      const std::string_view keyView = nameView("attribute name");
      std::string key(keyView);
      skipSpace();
      if (!startsWith("=")) error("attribute '" + key + "' of <" + node.name + "> has no value");
      advance(1);
      skipSpace();
      if (pos_ >= text_.size() || (text_[pos_] != '"' && text_[pos_] != '\''))
        error("value of attribute '" + key + "' is not quoted");
      char quote = text_[pos_];
      size_t end = text_.find(quote, pos_ + 1);
      if (end == std::string_view::npos) error("unterminated value of attribute '" + key + "'");
      std::string value = decode(text_.substr(pos_ + 1, end - pos_ - 1));
      advance(end + 1 - pos_);
      if (!seen.insert(keyView).second) error("attribute '" + key + "' repeated in <" + node.name + ">");
      node.attrs.emplace_back(std::move(key), std::move(value));
    }
  }

  // Reads children into parent until "</" (left for the caller) or the end of input.
  void parseContent(XmlNode& parent, int depth) {
    for (;;) {
      size_t next = text_.find('<', pos_);
      if (next == std::string_view::npos) {
        advance(text_.size() - pos_);
        return;
      }
      advance(next - pos_);
      if (startsWith("<!--")) {
        skipPast("-->", "comment");
      } else if (startsWith("<?")) {
        skipPast("?>", "processing instruction");
      } else if (startsWith("<!")) {
        skipPast(">", "declaration");
      } else if (startsWith("</")) {
        return;
      } else {
        parseElement(parent, depth + 1);
      }
    }
  }

  void parseElement(XmlNode& parent, int depth) {
    if (depth > limits_.maxDepth)
      error("elements nested deeper than " + std::to_string(limits_.maxDepth) + " levels");
    if (++elements_ > limits_.maxElements)
      error("more than " + std::to_string(limits_.maxElements) + " elements");
    advance(1);  // '<'
    XmlNode& node = parent.add("");
    node.line = line_;
    node.name = name("element name after '<'");
    parseAttributes(node);
    if (startsWith("/>")) {
      advance(2);
      return;
    }
    advance(1);  // '>'
    int openLine = node.line;
    parseContent(node, depth);
    if (pos_ >= text_.size())
      error("<" + node.name + "> opened on line " + std::to_string(openLine) + " is never closed");
    advance(2);  // "</"
    std::string closing = name("element name after '</'");
    if (closing != node.name)
      error("</" + closing + "> closes <" + node.name + "> opened on line " + std::to_string(openLine));
    skipSpace();
    if (!startsWith(">")) error("expected '>' after </" + closing);
    advance(1);
  }

  std::string_view text_;
  const std::string& source_;
  XmlLimits limits_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t elements_ = 0;
};

std::string escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

XmlNode parseXml(std::string_view text, const std::string& source, const XmlLimits& limits) {
  if (text.size() > limits.maxBytes)
    fail(ncclInvalidUsage, "%s: %zu bytes is more than the %zu an XML topology may have", source.c_str(),
         text.size(), limits.maxBytes);
  return Parser(text, source, limits).document();
}

XmlNode readXmlFile(const std::string& path, const XmlLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ncclSystemError, "cannot open %s: %s", path.c_str(), strerror(errno));
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) fail(ncclSystemError, "cannot read %s", path.c_str());
  if (static_cast<size_t>(size) > limits.maxBytes)
    fail(ncclInvalidUsage, "%s: %lld bytes is more than the %zu an XML topology may have", path.c_str(),
         static_cast<long long>(size), limits.maxBytes);
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), size);
  return parseXml(text, path, limits);
}

std::string writeXml(const XmlNode& element, int indent) {
  std::string out(static_cast<size_t>(indent) * 2, ' ');
  out += "<" + element.name;
  for (const auto& [k, v] : element.attrs) out += " " + k + "=\"" + escape(v) + "\"";
  if (element.children.empty()) return out + "/>\n";
  out += ">\n";
  for (const auto& c : element.children) out += writeXml(c, indent + 1);
  return out + std::string(static_cast<size_t>(indent) * 2, ' ') + "</" + element.name + ">\n";
}

void writeXmlFile(const std::string& path, const XmlNode& document) {
  std::string text;
  for (const auto& c : document.children) text += writeXml(c);
  FILE* out = files::openOutput(path);
  if (out == nullptr && errno == ELOOP) {
    fail(ncclSystemError, "refusing to write %s: it is a symbolic link, which Braid does not follow (the file it "
                          "points to is left as it is)", path.c_str());
  }
  if (out == nullptr) fail(ncclSystemError, "cannot write %s: %s", path.c_str(), strerror(errno));
  const bool written = fwrite(text.data(), 1, text.size(), out) == text.size();
  const int err = errno;
  if (fclose(out) != 0 || !written) fail(ncclSystemError, "cannot write %s: %s", path.c_str(), strerror(written ? errno : err));
}

}  // namespace braid::topo
