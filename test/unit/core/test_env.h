// Helpers for tests that need an environment and config files of their own.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "core/params.h"

namespace braid::test {

/// A fake environment for params::Sources.
struct FakeEnv {
  std::map<std::string, std::string> vars;
  params::Sources sources(const std::string& systemFile = "") const {
    params::Sources s;
    s.getenv = [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
    s.systemFile = systemFile;
    return s;
  }
};

/// A temporary directory removed (with the files written through it) at scope exit.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/braid-test-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() {
    for (const auto& f : files_) std::remove(f.c_str());
    rmdir(path_.c_str());
  }
  std::string write(const std::string& name, const std::string& content) {
    const std::string file = path_ + "/" + name;
    std::ofstream(file) << content;
    files_.push_back(file);
    return file;
  }
  std::string file(const std::string& name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

/// Runs a shell command; returns what it printed (stdout and stderr), then "exit=N\n".
inline std::string runShell(const std::string& command) {
  std::string out;
  FILE* p = popen((command + " 2>&1; echo \"exit=$?\"").c_str(), "r");
  if (p == nullptr) return "popen failed\n";
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), p)) > 0) out.append(buffer, n);
  pclose(p);
  return out;
}

}  // namespace braid::test
