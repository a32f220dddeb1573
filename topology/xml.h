// A small XML reader and writer for NCCL's topology and graph files.
//
// Only what those files use: elements, attributes (single or double quotes, the five named
// entities and numeric character references), comments, <?...?> and <!DOCTYPE ...> (skipped).
// Text between elements is ignored. Every element remembers its line, so a caller that finds a
// semantic problem (an unknown element, a missing attribute) can name the place. Limits bound
// the input size, the nesting depth and the number of elements: a hostile or broken file gives
// an error, never unbounded recursion or memory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::topo {

/// One element: its name, its attributes in file order, its children.
struct XmlNode {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<XmlNode> children;
  int line = 0;  ///< 1-based line of the opening tag; 0 for elements made in memory

  /// The attribute's value, or nullptr.
  const std::string* attr(std::string_view key) const;
  /// The attribute's value, or fallback.
  std::string attrOr(std::string_view key, const std::string& fallback) const;
  /// Sets (or adds, at the end) an attribute.
  void set(std::string_view key, const std::string& value);
  /// Appends a child element and returns it (references to other children may move).
  XmlNode& add(std::string_view childName);
  /// The first child of that name, or nullptr.
  XmlNode* child(std::string_view childName);
  const XmlNode* child(std::string_view childName) const;
};

struct XmlLimits {
  size_t maxBytes = 16u << 20;  ///< larger inputs are refused before parsing
  int maxDepth = 24;            ///< NCCL's deepest real files nest 8 levels
  size_t maxElements = 200000;
};

/// Parses text into a document whose children are the top-level elements. `source` names the
/// input in error messages ("file.xml:12: ..."). Throws braid::Error(ncclInvalidUsage) on any
/// syntax error or exceeded limit.
XmlNode parseXml(std::string_view text, const std::string& source, const XmlLimits& limits = {});

/// Reads and parses a file; a missing or unreadable file is an ncclSystemError naming it.
XmlNode readXmlFile(const std::string& path, const XmlLimits& limits = {});

/// Writes element (and its subtree) indented by two spaces per level, one element a line.
std::string writeXml(const XmlNode& element, int indent = 0);

/// Writes a whole document (its top-level elements) to path (created 0644, truncated, closed on
/// exec); throws ncclSystemError on failure, and for a path whose last component is a symbolic
/// link (never followed: what it points to is left as it is).
void writeXmlFile(const std::string& path, const XmlNode& document);

}  // namespace braid::topo
