// Typed errors and check macros. Library code throws; only main() turns an error into an exit
// code: UserError (bad spec, CLI, data, checkpoint) -> 2, everything else -> 1.
#pragma once
#include <exception>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace zt {

// Bad input from the user: the message names the file and key/offset. Exit status 2.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure of the engine or the machine (I/O error, broken invariant). Exit status 1.
struct RuntimeFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A run-time failure every rank of the job learnt of together (a checkpoint save that failed on
// some rank, agreed on in an all-reduce): the rank that saw it prints it, the others throw
// PeerFailure, and the job ends without an abort (no rank is left waiting). Exit status 1.
struct AgreedFailure : RuntimeFailure {
  using RuntimeFailure::RuntimeFailure;
};

// Another rank of the job failed (and reported it); this rank stops quietly with `code`.
struct PeerFailure : std::runtime_error {
  int code;
  PeerFailure(int c, const std::string& what) : std::runtime_error(what), code(c) {}
};

// The exit status for an error: UserError 2, PeerFailure its code, anything else 1.
int exit_code_of(const std::exception_ptr& error);
// An AgreedFailure: every rank ends on its own, none needs aborting.
bool is_agreed_failure(const std::exception_ptr& error);
// The one line ztrain prints for an error on stderr: "ztrain: error: ..." (bad input) or
// "ztrain: failure: ..." (anything else), with "rank R: " first when rank >= 0. A PeerFailure
// prints nothing (the failing rank reported it).
void print_error(const std::exception_ptr& error, int rank);

[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond,
                                      const std::string& msg);

template <typename... Args>
[[noreturn]] void user_error(fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace zt

// ZT_CHECK(cond, "fmt", args...): an engine invariant; reports file and line.
#define ZT_CHECK(cond, ...)                                                          \
  do {                                                                               \
    if (!(cond)) ::zt::throw_check_failure(__FILE__, __LINE__, #cond,               \
                                           ::fmt::format(__VA_ARGS__));              \
  } while (0)
